"""Counterfactual contribution analysis: ``cocoa_reward`` and ``cocoa_feature`` (COCOA).

COCOA asks of every action "would I still have got that reward with another action?" through the
contribution coefficient of a *rewarding outcome* u rather than of a later state:

    w(s, a, u) = p^π(a | s, u) / π(a | s),
    A[t, a] = (1[a = a_t]/π(a_t|s_t) − 1) r_t + Σ_{k>t} γ^{k−t} (w(s_t, a, u_k) − 1) r_k,

with p^π(a | s, u) the hindsight distribution of the action at s given that outcome u followed
(pooled over later steps with weight γ^{k−t−1}). Because the reward is a function of u, the sum
is an unbiased estimate of A^π(s_t, a) when p is exact (COCOA, Theorem 1), and an action that
changes later states but not the rewards gets w = 1, i.e. no spurious credit (HCA+'s failure).

* ``cocoa_reward``: u_k = the reward value r_k, one of a finite set (one-hot to the model).
* ``cocoa_feature``: u_k = a binary feature vector g(s_k, a_k) learned to predict r_k: per action a
  gate matrix G_a thresholded to a binary mask, features 1[mask · x > θ] with straight-through
  gradients, and a per-action linear readout regressed on r_k (COCOA's feature model).
* HCA+ (u_k = s_k) is ``hca_state``: the same pairwise machinery
  (``jaxcredit.estimators.contribution``) with the state as the object.

Reference: Meulemans, Schug, Kobayashi, Daw, Wayne, "Would I have gotten that reward? Long-term
credit assignment by counterfactual contribution analysis", NeurIPS 2023 (arXiv 2306.16803).
docs/cocoa.md lists where jaxcredit differs from the paper's code.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import hypernet
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.contribution import (
    HindsightObject, check_pair_options, pairwise_estimator)
from jaxcredit.estimators.hca_return import check_choice, obs_ndim
from jaxcredit.types import Trajectory

Array = jax.Array


# ----------------------------------------------------------------------------------------------
# Hindsight objects
# ----------------------------------------------------------------------------------------------


def reward_index(reward: Array, values: Array) -> Array:
    """The index of the reward value nearest to each reward (COCOA's reward grouping)."""
    return jnp.argmin(jnp.abs(reward[..., None] - values), axis=-1).astype(jnp.int32)


def reward_value_object(values: Array, one_hot: bool) -> HindsightObject:
    """u_k = the reward value of step k: a one-hot vector (MLP) or its index (tables)."""
    values = jnp.asarray(values, jnp.float32)

    def apply(params, tr: Trajectory):
        del params
        index = reward_index(tr.reward, values)
        return jax.nn.one_hot(index, values.shape[0]) if one_hot else index

    def groups(params, tr: Trajectory):
        del params
        every = jnp.arange(values.shape[0])
        return (reward_index(tr.reward, values),
                jax.nn.one_hot(every, values.shape[0]) if one_hot else every, values)

    return HindsightObject(apply=apply, groups=groups)


def straight_through_step(x: Array, threshold: float) -> Array:
    """1[x > threshold] forward, identity gradient backward (COCOA's hard threshold)."""
    return x + jax.lax.stop_gradient((x > threshold).astype(x.dtype) - x)


def reward_features(params: dict, obs: Array, action: Array, threshold: float) -> Array:
    """``[*b, F]`` binary features g(s, a) = 1[1[G_a > θ] · x > θ] of flattened observations.

    Every action's projection is computed and the taken one picked: gathering G_a per sample
    built a ``[*b, F, D]`` mask (and its gradient a scatter of that size), 2.1x slower for
    COCOA-feature's pretraining steps on KeyToDoor (240 episodes × 23 steps, 8 vmapped seeds).
    """
    mask = straight_through_step(params["gate"], threshold)  # [A, F, D]
    every = jnp.einsum("afd,...d->...af", mask, obs)
    taken = jnp.take_along_axis(every, action[..., None, None], axis=-2)[..., 0, :]
    return straight_through_step(taken, threshold)


def reward_prediction(params: dict, features: Array, action: Array) -> Array:
    """r̂(s, a) = w_a · g(s, a) + b_a: the per-action linear readout of the features."""
    return jnp.sum(params["readout"][action] * features, -1) + params["bias"][action]


def feature_object(num_features: int, threshold: float, feature_l1: float,
                   readout_l2: float, max_distinct: Optional[int] = None) -> HindsightObject:
    """u_k = g(s_k, a_k), features fitted to predict r_k (COCOA-feature).

    Loss: ½ mean_k (r̂(s_k, a_k) − r_k)² + feature_l1 · mean|G| + readout_l2 · mean(w²). The
    shrinkage keeps the features few and coarse: the fewer distinct objects, the fewer spurious
    contributions.

    ``max_distinct``: a bound on the distinct (observation, action) pairs (a tabular
    environment's states × actions). With it the object has a summary for the pretraining: the
    distinct pairs x_j with their counts n_j, mean rewards r̄_j and the spread
    c = ½ Σ_k (r_k − r̄_{j(k)})² / n, from which ½ mean_k (r̂_k − r_k)² = ½ Σ_j (n_j / n)
    (r̂(x_j) − r̄_j)² + c: the same loss and gradient from at most ``max_distinct`` rows
    instead of every step of the burn-in episodes (KeyToDoor L = 63: 512 rows against 15 120).
    Pairs beyond the bound would be dropped, so it must hold: observations that are a
    function of the tabular state.
    """

    def inputs(tr: Trajectory) -> Array:
        ndim = obs_ndim(tr)
        return jnp.reshape(tr.obs, tr.obs.shape[: tr.obs.ndim - ndim] + (-1,)).astype(jnp.float32)

    def init(key, tr: Trajectory):
        dim = inputs(tr).shape[-1]
        num_actions = tr.logits.shape[-1]
        return {
            "gate": threshold + jax.random.normal(key, (num_actions, num_features, dim)),
            "readout": jnp.zeros((num_actions, num_features), jnp.float32),
            "bias": jnp.zeros((num_actions,), jnp.float32),
        }

    def apply(params, tr: Trajectory):
        return reward_features(params, inputs(tr), tr.action, threshold)

    def loss(params, tr: Trajectory):
        features = reward_features(params, inputs(tr), tr.action, threshold)
        error = reward_prediction(params, features, tr.action) - tr.reward
        mse = 0.5 * jnp.mean(error ** 2)
        value = (mse + feature_l1 * jnp.mean(jnp.abs(params["gate"]))
                 + readout_l2 * jnp.mean(params["readout"] ** 2))
        metrics = {"feature_loss": mse, "features_active": jax.lax.stop_gradient(features).mean()}
        return value, metrics

    def penalties(params) -> Array:
        return (feature_l1 * jnp.mean(jnp.abs(params["gate"]))
                + readout_l2 * jnp.mean(params["readout"] ** 2))

    def summarise(tr: Trajectory) -> dict:
        x = inputs(tr).reshape(-1, inputs(tr).shape[-1])
        action, reward = tr.action.reshape(-1), tr.reward.reshape(-1).astype(jnp.float32)
        rows = jnp.concatenate([x, action[:, None].astype(x.dtype)], -1)
        size = min(int(max_distinct), rows.shape[0])
        distinct, index = jnp.unique(rows, axis=0, size=size, fill_value=0.0,
                                     return_inverse=True)
        index = jnp.clip(index.reshape(-1), 0, size - 1)
        count = jax.ops.segment_sum(jnp.ones_like(reward), index, size)
        mean = jax.ops.segment_sum(reward, index, size) / jnp.maximum(count, 1.0)
        spread = 0.5 * jnp.mean((reward - mean[index]) ** 2)
        # A row beyond the bound has no distinct row of its own (whatever index ``unique``
        # gives it): then the weights are NaN, and so is the pretraining, rather than a loss
        # silently fitted to part of the data.
        complete = jnp.all(distinct[index] == rows)
        return {"obs": distinct[:, :-1], "action": distinct[:, -1].astype(jnp.int32),
                "weight": jnp.where(complete, count / reward.shape[0], jnp.nan),
                "reward": mean, "spread": spread}

    def summary_loss(params, summary: dict):
        features = reward_features(params, summary["obs"], summary["action"], threshold)
        error = reward_prediction(params, features, summary["action"]) - summary["reward"]
        mse = 0.5 * jnp.sum(summary["weight"] * error ** 2) + summary["spread"]
        active = jnp.sum(summary["weight"][:, None] * jax.lax.stop_gradient(features))
        return mse + penalties(params), {"feature_loss": mse,
                                         "features_active": active / features.shape[-1]}

    if max_distinct is None:
        return HindsightObject(apply=apply, init=init, loss=loss)
    return HindsightObject(apply=apply, init=init, loss=loss, summarise=summarise,
                           summary_loss=summary_loss)


def reward_oracle() -> hm.StateHindsightModel:
    """The exact p^π_γ(a | s_t, u_k) of the reward value; params ``{"log_h": [S, U, A],
    "values": [U]}`` (``hindsight.reward_hindsight``). It reads r_k itself, against the
    environment's values, so it is exact whatever values the learned twin uses; grouped pair
    sums must then group by those values too (``cocoa_reward`` sees to it)."""

    def source(params, obs):
        del params
        return hm.state_of(obs)

    def target(params, u, reward):
        del u
        return reward_index(reward, params["values"])

    def pair_logits(params, src, tgt, policy_logits):
        del policy_logits
        return params["log_h"][src, tgt]

    return hm.StateHindsightModel(init=lambda key, obs, num_actions, target=None: {},
                                  source=source, target=target, pair_logits=pair_logits)


# ----------------------------------------------------------------------------------------------
# Estimators
# ----------------------------------------------------------------------------------------------


def resolve_reward_values(reward_values: Union[None, str, Sequence[float]], env: Any,
                          env_params: Any) -> np.ndarray:
    """The finite set of reward values: given (a sequence, or "0,0.1,0.9" from the command line)
    or read from the environment (``jaxcredit.exact.ground_truth.reward_value_law``)."""
    if isinstance(reward_values, str):
        try:
            reward_values = [float(v) for v in reward_values.replace(";", ",").split(",") if v]
        except ValueError:
            raise ValueError(f"reward_values must be numbers separated by commas, got "
                             f"{reward_values!r}") from None
    if reward_values is None:
        if env is None:
            raise ValueError("cocoa_reward needs reward_values (the finite set of reward "
                             "values) or an environment to read them from")
        from jaxcredit.exact.ground_truth import reward_value_law  # noqa: PLC0415

        params = env.default_params if env_params is None else env_params
        try:
            reward_values = reward_value_law(env, params)[0]
        except ValueError as err:
            raise ValueError(f"cocoa_reward: {err}") from None
    values = np.unique(np.asarray(reward_values, np.float32))
    if values.ndim != 1 or values.size < 1:
        raise ValueError(f"reward_values must be a non-empty list of numbers, "
                         f"got {reward_values!r}")
    return values


def cocoa_reward(
    reward_values: Union[None, str, Sequence[float]] = None,
    pairs: str = "grouped",
    num_pairs: int = 16,
    chunk: int = 8,
    bootstrap: bool = True,
    mask_zero_reward_loss: bool = True,
    model: str = "mlp",
    hidden: int = 128,
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    gate_leak: float = 0.0,
    gate_floor: float = 0.0,
    start_at_policy: bool = False,
    env: Any = None,
    env_params: Any = None,
) -> Estimator:
    """COCOA-reward (Meulemans et al. 2023) — all-action; u_k = the reward value (module doc).

        A[t,a] = (1[a = a_t]/π(a_t|s_t) − 1) r_t + Σ_{k>t} γ^{k−t} (p(a|s_t, r_k)/π(a|s_t) − 1) r_k

    Loss: the γ^{k−t−1}-weighted cross-entropy of p(a_t | s_t, u_k) over pairs t < k with
    r_k ≠ 0 (``mask_zero_reward_loss``, COCOA's setting); its minimiser is the exact
    ``hindsight.reward_hindsight``. The engine supplies the environment, from which the reward
    values are read (``reward_distribution``, or the distinct rewards of its tabular MDP);
    rewards are mapped to the nearest value.

    Args:
      reward_values: the finite set of reward values (default: the environment's).
      pairs: "grouped" (default: the later rewards summed by value, exact and O(T·U)), or as
        ``hca_state``: "all", "sampled", "rewarded" (``contribution.pairwise_estimator``).
      num_pairs, chunk, bootstrap: as ``hca_state``.
      mask_zero_reward_loss: fit only on pairs whose later reward is non-zero.
      model: "mlp" (policy-modulated MLP on [s_t, one-hot u_k]), "hypernet" (COCOA's own
        network, ``hypernet.hypernet_hindsight``; ``hidden=256`` as COCOA), "tabular"
        (a table ``[S, U, A]`` on one-hot state observations; needs ``num_states``) or "oracle" (the
        exact p^π_γ of the current policy, supplied by the engine on environments with ground
        truth).
      hidden: MLP width.
      policy_modulated: logits = stop_gradient(log π(·|s_t)) + f_φ(s_t, u_k).
      gate_leak: the hypernet's two-sided outputs as leaky ReLUs of this slope (0: COCOA's
        ReLUs, whose entries can die: ``hypernet.relu_gate``).
      gate_floor: COCOA's ReLU outputs with this gradient slope where they are 0 (straight
        through: the same values, but an entry that is off still learns).
      start_at_policy: the hypernet's output layers start at zero, so h = π (every
        coefficient w = 1, exact for every outcome the action does not change) before any fit;
        needs ``gate_floor`` > 0 (a ReLU output at 0 has no gradient).
      env, env_params: supplied by the engine and the diagnostics.
    """
    check_pair_options(pairs, num_pairs, chunk)
    check_choice("model", model, ("mlp", "hypernet", "tabular", "oracle"))
    for name, value in (("gate_leak", gate_leak), ("gate_floor", gate_floor)):
        if not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if value and model != "hypernet":
            raise ValueError(f"{name} applies to model='hypernet' only")
    if gate_leak and gate_floor:
        raise ValueError("gate_leak and gate_floor are alternatives: set one")
    if start_at_policy and not (model == "hypernet" and gate_floor):
        raise ValueError("start_at_policy needs model='hypernet' and gate_floor > 0 (a ReLU "
                         "output that starts at 0 has no gradient)")
    if model == "hypernet" and not policy_modulated:
        raise ValueError("cocoa_reward: model='hypernet' is modulated by the policy by design "
                         "(COCOA's network); policy_modulated=False is for 'mlp' and 'tabular'")
    if model == "tabular" and num_states is None:
        raise ValueError("model='tabular' needs num_states")
    values = resolve_reward_values(reward_values, env, env_params)
    oracle = model == "oracle"
    if oracle and env is not None:
        # The exact model reads each later reward against the environment's own values
        # (reward_oracle); grouped by other values, one group would stand for several rewards.
        own = resolve_reward_values(None, env, env_params)
        if pairs == "grouped" and reward_values is not None and not np.array_equal(values, own):
            raise ValueError(f"cocoa_reward: the exact model groups the rewards by the "
                             f"environment's own values {own.tolist()}, not {values.tolist()}: "
                             f"drop reward_values, or use pairs='all'")
        values = own

    def build(trajectory):
        if oracle:
            return reward_oracle()
        if model == "mlp":
            return hm.state_mlp(obs_ndim(trajectory), hidden, policy_modulated, target_ndim=1)
        if model == "hypernet":
            return hypernet.hypernet_hindsight(obs_ndim(trajectory), hidden, leak=gate_leak,
                                         floor=gate_floor, at_policy=start_at_policy)
        return hm.state_tabular(num_states, policy_modulated, num_targets=len(values))

    options = dict(pairs=pairs, num_pairs=num_pairs, chunk=chunk, bootstrap=bootstrap,
                   mask_zero_reward_loss=mask_zero_reward_loss)
    return pairwise_estimator(
        "cocoa_reward", build,
        reward_value_object(values, one_hot=model in ("mlp", "hypernet")), **options,
        oracle=oracle, exact_model="reward_hindsight",
        # The exact twin groups by the environment's values whatever values the learned model
        # uses (with env None it has no other values to read).
        make_oracle=lambda: cocoa_reward(None if env is not None else tuple(values.tolist()),
                                         **options, model="oracle", env=env,
                                         env_params=env_params))


def tabular_pairs(env: Any) -> Optional[int]:
    """States × actions of a tabular environment whose observations are a function of its
    state (``envs.tabular_env.TabularEnv.observation_of_state``); None for any other (e.g.
    GridWorld with its time feature, whose observations outnumber its states)."""
    if (getattr(env, "tabular_mdp", None) is not None and getattr(env, "num_states", None)
            and getattr(env, "observation_of_state", False)):
        return int(env.num_states) * int(env.num_actions)
    return None


def cocoa_feature(
    num_features: int = 128,
    threshold: float = 0.05,
    feature_l1: float = 1e-3,
    readout_l2: float = 1e-3,
    pairs: str = "all",
    num_pairs: int = 16,
    chunk: int = 8,
    bootstrap: bool = True,
    mask_zero_reward_loss: bool = True,
    hidden: int = 128,
    policy_modulated: bool = True,
    model: str = "mlp",
    features: str = "joint",
    env: Any = None,
    env_params: Any = None,
) -> Estimator:
    """COCOA-feature (Meulemans et al. 2023) — all-action; u_k = g(s_k, a_k), binary features
    learned to predict r_k (module doc).

        A[t,a] = (1[a = a_t]/π(a_t|s_t) − 1) r_t + Σ_{k>t} γ^{k−t} (p(a|s_t, g_k)/π(a|s_t) − 1) r_k

    Loss: the hindsight cross-entropy (as ``cocoa_reward``, on stop-gradient features) plus the
    feature model's reward regression. Both are fitted by the engine's schedule on every
    update's batch (COCOA trains the features once, 20 000 steps on a buffer of early episodes,
    then freezes them: docs/cocoa.md). Learned features have no exact model of their own; the
    exact model the estimator is measured against (its oracle twin, ``exact_model``) is
    ``cocoa_reward``'s: u_k = the reward value, the coarsest feature that fixes r_k and the one
    the features are fitted to carry. Its credit is what ideal features with an exact hindsight
    model would give, so the credit-error metrics count the features' error with the model's.
    There is no ``estimator/kl_to_exact``: the two models condition on different u.

    Args:
      num_features: F, the width of the binary feature vector (COCOA: 128).
      threshold: θ of the straight-through steps (COCOA: 0.05).
      feature_l1, readout_l2: shrinkage of the gates and of the readout.
      pairs, num_pairs, chunk, bootstrap, mask_zero_reward_loss, hidden, policy_modulated:
        as ``cocoa_reward``.
      model: the hindsight model on [s_t, g_k]: "mlp" or "hypernet" (COCOA's).
      features: "joint" (fitted with the hindsight model at every update) or "pretrain"
        (COCOA's schedule: fitted once on the burn-in windows, ``estimator_pretrain_steps``
        steps after ``burn_in_updates``, then frozen).
      env, env_params: the environment (the engine passes them), whose reward values the
        oracle twin reads; without one there is no twin.
    """
    check_pair_options(pairs, num_pairs, chunk)
    check_choice("model", model, ("mlp", "hypernet"))
    if not isinstance(num_features, int) or num_features < 1:
        raise ValueError(f"num_features must be a positive integer, got {num_features!r}")
    for name, value in (("feature_l1", feature_l1), ("readout_l2", readout_l2)):
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")

    if model == "hypernet" and not policy_modulated:
        raise ValueError("cocoa_feature: model='hypernet' is modulated by the policy by design "
                         "(COCOA's network); policy_modulated=False is for 'mlp'")

    def build(trajectory):
        if model == "hypernet":
            return hypernet.hypernet_hindsight(obs_ndim(trajectory), hidden)
        return hm.state_mlp(obs_ndim(trajectory), hidden, policy_modulated, target_ndim=1)

    return pairwise_estimator(
        "cocoa_feature", build,
        feature_object(num_features, float(threshold), float(feature_l1), float(readout_l2),
                       max_distinct=tabular_pairs(env)),
        pairs=pairs, num_pairs=num_pairs, chunk=chunk, bootstrap=bootstrap,
        mask_zero_reward_loss=mask_zero_reward_loss, oracle=False,
        exact_model=None if env is None else "reward_hindsight",
        # The twin draws the same pairs as the fitted model (sampled or rewarded, same key);
        # every pair is its exact grouped sum.
        make_oracle=None if env is None else lambda: cocoa_reward(
            env=env, env_params=env_params, bootstrap=bootstrap,
            pairs="grouped" if pairs == "all" else pairs, num_pairs=num_pairs, chunk=chunk,
            mask_zero_reward_loss=mask_zero_reward_loss, model="oracle"),
        object_schedule=features)

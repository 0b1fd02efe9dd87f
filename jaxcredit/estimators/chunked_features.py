"""Chunked-TD with a learned model per observation feature, and the vector λ of factored rewards.

The model of ``chunked model=features`` (Ramesh et al., ICML 2024, arXiv 2405.03878; official
code ``Aditya-Ramesh-10/chunktd``, ``model.py`` and ``chunkers.py``): an MLP of (observation,
action) that predicts each feature of the transition as a categorical, independently,

    p̂(c | s, a) = Π_k p̂_k(c_k | s, a),

where c = ``env.transition_code(obs, next_obs)`` is what the environment says a transition is,
feature by feature (the next value of each feature, or its change, as the official
``CategoricalStateDynamicsModel`` and ``CategoricalStateDeltaDynamicsModel``), and
``env.transition_categories`` sizes each categorical. It is fitted by cross-entropy (the official
loss) in the engine's fitting of learned credit models.

The per-step probability of what happened, as ``chunked.step_probability`` but per feature (the
expected form averages over π first, as ``get_next_s_prob_all_actions`` does):

    ℓ_{t,k} = Σ_a π(a | s_t) p̂_k(c_{t,k} | s_t, a)        (expected)
    ℓ_{t,k} = π(a_t | s_t) p̂_k(c_{t,k} | s_t, a_t)         (sampled; π(a_t | s_t) for one k only)

A scalar λ (``lambdas="scalar"``, the paper's C-default) is their product over k. A vector λ
(``lambdas="vector"``, the paper's C-factored, for environments whose reward is a sum over
features, ``env.reward_components``): reward component k gets its own λ-return with λ'_{i,k} =
ℓ_{i+1,k}, bootstrapped from its own value V_k, so the noise of features that change at random
is cut off at once while a feature that follows predictably carries its reward back unchanged:

    G_{i,k} = r_{i,k} + γ_i [(1 − λ'_{i,k}) V_k(s_{i+1}) + λ'_{i,k} G_{i+1,k}]
    A_i = Σ_k (G_{i,k} − V_k(s_i))  (as GAE per component).

The official learner is a Q-table per component; here the component values V_k are a second head
of the estimator's own model (an MLP of the observation, fitted to the G_k with the model's
loss), and whatever part of the reward the components do not explain (a reward transformed by
another stage) is one more component with the scalar λ, so the components always sum to the
reward. The agent's own critic is fitted to Σ_k G_{i,k}.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcredit.estimators import returns
from jaxcredit.types import Trajectory

Array = jax.Array
LAMBDAS = ("scalar", "vector")


def factored_env(env: Any, need_rewards: bool) -> Any:
    """The environment (looked up through wrappers) that says how its transitions read feature
    by feature; a one-line ValueError where it does not."""
    inner, seen = env, 0
    while inner is not None and seen < 16:
        if hasattr(inner, "transition_code") and hasattr(inner, "transition_categories"):
            if need_rewards and not hasattr(inner, "reward_components"):
                break
            return inner
        inner, seen = getattr(inner, "_env", None), seen + 1
    what = "transition_code and reward_components" if need_rewards else "transition_code"
    raise ValueError(f"chunked model=features needs an environment with {what} (per-feature "
                     "transitions: AccumulatedCharge, KeyToDoorDistractors)")


class FeatureModel(nn.Module):
    """Logits ``[..., F, C]`` of each transition feature given (obs, one-hot action), the
    categories beyond a feature's own count masked out; and, with ``components`` > 0, the
    component values ``[..., components]`` of the observation (a separate tower)."""

    categories: tuple[int, ...]
    num_actions: int
    hidden: int = 128
    components: int = 0

    def setup(self):
        width = max(self.categories)
        self.mask = jnp.arange(width)[None, :] < jnp.asarray(self.categories)[:, None]
        self.trunk = [nn.Dense(self.hidden), nn.Dense(self.hidden)]
        self.head = nn.Dense(len(self.categories) * width)
        if self.components:
            self.value_tower = [nn.Dense(self.hidden), nn.Dense(self.hidden),
                                nn.Dense(self.components)]

    def __call__(self, obs: Array, action: Array) -> Array:
        x = jnp.concatenate([obs, jax.nn.one_hot(action, self.num_actions, dtype=obs.dtype)],
                            axis=-1)
        for layer in self.trunk:
            x = jnp.tanh(layer(x))
        logits = self.head(x).reshape(x.shape[:-1] + self.mask.shape)
        return jnp.where(self.mask, logits, -1e9)

    def initialise(self, obs: Array, action: Array) -> tuple:
        """Touches every layer (``init`` through this method)."""
        return self(obs, action), (self.values(obs) if self.components else None)

    def values(self, obs: Array) -> Array:
        x = obs
        for layer in self.value_tower[:-1]:
            x = jnp.tanh(layer(x))
        return self.value_tower[-1](x)


def feature_probabilities(model: FeatureModel, params: Any, obs: Array, code: Array,
                          num_actions: int) -> Array:
    """``[T, *batch, A, F]``: p̂_k(c_k | s_t, a) for every action a and feature k."""
    def under(action):
        log_p = jax.nn.log_softmax(model.apply(params, obs, jnp.full(obs.shape[:-1], action)))
        return jnp.exp(jnp.take_along_axis(log_p, code[..., None], axis=-1)[..., 0])
    return jnp.stack([under(a) for a in range(num_actions)], axis=-2)


def feature_step_probability(p_all: Array, pi: Array, action: Array, form: str,
                             lambdas: str) -> Array:
    """ℓ_t (module docstring): ``[T, *batch]`` for the scalar λ, ``[T, *batch, F]`` for the
    vector λ, from ``p_all [T, *batch, A, F]`` and π ``[T, *batch, A]``."""
    if form == "expected":
        per_feature = jnp.einsum("...a,...af->...f", pi, p_all)
        return per_feature.prod(-1) if lambdas == "scalar" else per_feature
    pick = lambda x: jnp.take_along_axis(x, action[..., None], axis=-1)[..., 0]  # noqa: E731
    taken = jnp.take_along_axis(p_all, action[..., None, None], axis=-2)[..., 0, :]
    if lambdas == "scalar":
        return pick(pi) * taken.prod(-1)
    return pick(pi)[..., None] * taken


def shift_lambda(ell: Array, done: Array) -> Array:
    """λ'_i = ℓ_{i+1} (1 − done_i), λ'_{T−1} = 0, over a leading time axis (any trailing axes)."""
    shifted = jnp.concatenate([ell[1:], jnp.zeros_like(ell[:1])], axis=0)
    cut = 1.0 - done.astype(ell.dtype)
    return shifted * cut.reshape(cut.shape + (1,) * (ell.ndim - cut.ndim))


def component_gae(rewards: Array, values: Array, next_values: Array, trajectory: Trajectory,
                  gamma: Any, lam: Array) -> tuple[Array, Array]:
    """GAE per reward component (trailing axis K of every input): ``(A [T, *batch, K],
    targets [T, *batch, K])``."""
    per = jax.vmap(lambda r, v, nv, la: returns.gae(r, v, nv, trajectory.terminated,
                                                    trajectory.truncated, gamma, la),
                   in_axes=-1, out_axes=-1)
    return per(rewards, values, next_values, lam)


def split_rewards(env: Any, trajectory: Trajectory) -> Array:
    """``[T, *batch, F + 1]``: the environment's reward components and the rest of the reward."""
    parts = env.reward_components(trajectory.obs, trajectory.next_obs)
    rest = trajectory.reward - parts.sum(-1)
    return jnp.concatenate([parts, rest[..., None]], axis=-1)


def transition_probabilities(model: FeatureModel, params: Any, env: Any,
                             trajectory: Trajectory, num_actions: int,
                             exact: bool = False) -> Array:
    """``[T, *batch, A, F]``: p̂_k(c_k | s_t, a) of the fitted model, or with ``exact`` the
    environment's exact law (``env.transition_law(obs, action) -> [..., F, C]``)."""
    code = env.transition_code(trajectory.obs, trajectory.next_obs)
    if not exact:
        return feature_probabilities(model, params, trajectory.obs, code, num_actions)
    obs = trajectory.obs

    def under(action):
        law = env.transition_law(obs, jnp.full(obs.shape[:-1], action))
        return jnp.take_along_axis(law, code[..., None], axis=-1)[..., 0]
    return jnp.stack([under(a) for a in range(num_actions)], axis=-2)


def step_lambdas(p_all: Array, pi: Array, trajectory: Trajectory,
                 form: str) -> tuple[Array, Array]:
    """``(scalar λ' [T, *batch], vector λ' [T, *batch, F])`` of a window from the per-feature
    probabilities ``p_all [T, *batch, A, F]``."""
    scalar, vector = (shift_lambda(feature_step_probability(p_all, pi, trajectory.action, form,
                                                            kind), trajectory.done)
                      for kind in LAMBDAS)
    return scalar, vector


def component_credit(model: FeatureModel, params: Any, env: Any, trajectory: Trajectory,
                     pi: Array, gamma: Any, form: str,
                     p_all: Array) -> tuple[Array, Array, Array]:
    """``(A, G, λ')``, each ``[T, *batch, F + 1]``: GAE per reward component on the component
    values, the last component the rest of the reward with the scalar λ."""
    scalar, vector = step_lambdas(p_all, pi, trajectory, form)
    lam = jnp.concatenate([vector, scalar[..., None]], axis=-1)
    values = model.apply(params, trajectory.obs, method=FeatureModel.values)
    next_values = model.apply(params, trajectory.next_obs, method=FeatureModel.values)
    advantage, targets = component_gae(split_rewards(env, trajectory), values, next_values,
                                       trajectory, gamma, lam)
    return advantage, targets, lam


def feature_credit(model: FeatureModel, params: Any, env: Any, trajectory: Trajectory,
                   pi: Array, gamma: Any, form: str, lambdas: str,
                   exact: bool = False) -> tuple[Array, Array, Array]:
    """``(advantages, value targets, λ')`` of a window: the per-step λ of the fitted feature
    model (or, with ``exact``, of the environment's exact law), scalar (GAE on the agent's
    values) or vector (GAE per reward component on the component values, summed)."""
    p_all = transition_probabilities(model, params, env, trajectory, pi.shape[-1], exact)
    if lambdas == "vector":
        advantage, targets, lam = component_credit(model, params, env, trajectory, pi, gamma,
                                                   form, p_all)
        return advantage.sum(-1), targets.sum(-1), lam
    scalar, _ = step_lambdas(p_all, pi, trajectory, form)
    advantage, targets = returns.gae(
        trajectory.reward, trajectory.value, trajectory.next_value, trajectory.terminated,
        trajectory.truncated, gamma, scalar)
    return advantage, targets, scalar


def feature_loss(model: FeatureModel, params: Any, env: Any, trajectory: Trajectory, pi: Array,
                 gamma: Any, form: str, lambdas: str, exact: bool = False) -> tuple[Array, dict]:
    """Cross-entropy of the transition features (the official loss: the mean over steps and
    features; not with ``exact``, where the model's transition head is unused), plus, for the
    vector λ, half the squared error of the component values to their λ-returns (held fixed:
    computed at the current parameters under stop_gradient)."""
    loss, metrics = jnp.zeros(()), {}
    if not exact:
        code = env.transition_code(trajectory.obs, trajectory.next_obs)
        log_p = jax.nn.log_softmax(model.apply(params, trajectory.obs, trajectory.action))
        nll = -jnp.take_along_axis(log_p, code[..., None], axis=-1)[..., 0]
        loss = nll.mean()
        metrics["model_nll"] = loss
    if lambdas == "vector":
        fixed = jax.lax.stop_gradient(params)
        p_all = transition_probabilities(model, fixed, env, trajectory, pi.shape[-1], exact)
        _, targets, _ = component_credit(model, fixed, env, trajectory, pi, gamma, form, p_all)
        values = model.apply(params, trajectory.obs, method=FeatureModel.values)
        value_loss = 0.5 * jnp.mean(jnp.sum((values - targets) ** 2, axis=-1))
        loss = loss + value_loss
        metrics["component_value_loss"] = value_loss
    return loss, metrics

"""Chunked-TD: λ chosen per step by a model of the transitions (``chunked``).

Ramesh, Young, Kirsch & Schmidhuber, "Sequence Compression Speeds Up Credit Assignment in
Reinforcement Learning", ICML 2024 (arXiv 2405.03878); official code ``Aditya-Ramesh-10/chunktd``.

Where the step that follows s_{i+1} was predictable, continuing the return through it adds no
variance, so the target should not bootstrap there; where it was a surprise, it should. A model
of the dynamics gives the probability ℓ of the step that happened, and the λ-return uses it as its
per-step λ (the model never enters the target itself: a poor model only moves λ):

    G_i = r_i + γ_i [(1 − λ'_i) V(s_{i+1}) + λ'_i G_{i+1}],     λ'_i = ℓ_{i+1} (1 − done_i)

    ℓ_t = π(a_t | s_t) p̂(s_{t+1} | s_t, a_t)          (form="sampled", Chunked SARSA)
    ℓ_t = Σ_a π(a | s_t) p̂(s_{t+1} | s_t, a)            (form="expected", Chunked expected SARSA)

The official code learns Q by SARSA with accumulating traces whose decay at step t is γ ℓ_t with
ℓ_t = p̂(s_{t+1}|s_t,a_t) π(a_{t+1}|s_{t+1}) (``chunkers.py``, ``get_next_sa_prob``;
``algorithms/tabular_algo.py``): the forward view of that rule weighs G_{i+1} in the target of
step i by the probability of the step after s_{i+1}. jaxcredit's learners bootstrap from V(s), not
Q(s, a), so the action at s_{i+1} is part of what must be predicted (π(a_{i+1}|s_{i+1}) in the
sampled form) and G_{i+1} is weighed by ℓ_{i+1} as written above. The advantage is the
generalised advantage with these λ' (``returns.gae`` with a per-step λ), and the critic's
target is the same λ'-return; ``hparams.lambda_`` is not read.

Models (``model``):

* ``"counts"``: n(s, a, s′) / n(s, a) over the environment's tabular state index (the official
  ``TrulyTabularModel``), with one extra column for "the episode terminated". The counts are
  updated after each window's credit is assigned (``Estimator.update``), so a window's λ comes
  from the transitions seen before it (the official code counts each transition just before
  using it); an (s, a) never seen has p̂ = 0, i.e. bootstraps.
* ``"oracle"``: the exact P(s′ | s, a) of the tabular MDP (``exact_model = "transition"``).
* ``"features"``: the official categorical network, one categorical per feature of the
  transition (``jaxcredit.estimators.chunked_features``), for environments too large for a
  table that say how a transition reads feature by feature (``transition_code``); with
  ``lambdas="vector"``, one λ per reward feature (the paper's C-factored learner).
* ``"feature_oracle"``: the environment's exact per-feature law (``transition_law``) in the
  feature model's place.

Where the window does not hold s_{t+1} (the step is a time-out, or the window's last step), the
next state's index is unknown and ℓ_t = 0: the step before it bootstraps one step early. The
feature model reads the final observation that the window keeps, so it has ℓ_t at every step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxcredit.estimators import chunked_features as cf
from jaxcredit.estimators import returns
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.hca_return import behaviour_policy, check_choice
from jaxcredit.exact.tabular import has_ground_truth
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

FORMS = ("sampled", "expected")
MODELS = ("counts", "oracle", "features", "feature_oracle")


def next_state_index(trajectory: Trajectory, num_states: int) -> tuple[Array, Array]:
    """``(s_{t+1} [T, *batch], known [T, *batch])``: the index of the next state, ``num_states``
    for a termination, and ``known = False`` where the window does not hold it (a time-out, or
    the window's last step when it is not an episode end)."""
    following = jnp.concatenate([trajectory.state[1:], trajectory.state[-1:]], axis=0)
    last = jnp.zeros(trajectory.state.shape, bool).at[-1].set(True)
    terminated = trajectory.terminated.astype(bool)
    truncated = trajectory.truncated.astype(bool)
    nxt = jnp.where(terminated, num_states, following)
    known = terminated | ~(truncated | last)
    return nxt, known


def step_probability(p_next: Array, pi: Array, action: Array, state: Array, nxt: Array,
                     form: str) -> Array:
    """ℓ_t of every step (module docstring) from a model ``p_next [S, A, S + 1]``.

    Args:
      p_next: P̂(s′ | s, a), the last column the probability of terminating.
      pi: ``[T, *batch, A]`` π(·|s_t). action, state, nxt: ``[T, *batch]`` a_t, s_t, s_{t+1}.
      form: "sampled" (the action taken and its next state) or "expected" (the next state,
        averaged over π's actions).
    """
    p_all = p_next[state, :, nxt]  # [T, *batch, A]: P̂(s_{t+1} | s_t, a) for every a
    if form == "expected":
        return jnp.sum(pi * p_all, axis=-1)
    pick = lambda x: jnp.take_along_axis(x, action[..., None], axis=-1)[..., 0]  # noqa: E731
    return pick(pi) * pick(p_all)


def chunked_lambda(ell: Array, known: Array, done: Array) -> Array:
    """λ'_i = ℓ_{i+1} (1 − done_i), with ℓ = 0 where the next state is unknown; λ'_{T−1} = 0
    (the window's last step bootstraps whatever its λ)."""
    ell = jnp.where(known, ell, 0.0)
    shifted = jnp.concatenate([ell[1:], jnp.zeros_like(ell[:1])], axis=0)
    return shifted * (1.0 - done.astype(ell.dtype))


def count_probabilities(counts: Array) -> Array:
    """n(s, a, s′) / n(s, a), 0 where (s, a) was never seen."""
    total = counts.sum(axis=-1, keepdims=True)
    return counts / jnp.maximum(total, 1.0)


def chunked_advantages(p_next: Array, trajectory: Trajectory, gamma: Any,
                       form: str = "sampled") -> tuple[Array, Array, Array]:
    """``(advantages, value targets, λ')`` of a window under the transition model ``p_next``
    ``[S, A, S + 1]``: GAE with the chunked per-step λ' (module docstring)."""
    pi, _ = behaviour_policy(trajectory)
    nxt, known = next_state_index(trajectory, p_next.shape[0])
    ell = step_probability(p_next, pi, trajectory.action, trajectory.state, nxt, form)
    lam = chunked_lambda(ell, known, trajectory.done)
    advantage, targets = returns.gae(
        trajectory.reward, trajectory.value, trajectory.next_value, trajectory.terminated,
        trajectory.truncated, gamma, lam)
    return advantage, targets, lam


def chunked(form: str = "sampled", model: str = "counts", lambdas: str = "scalar",
            hidden: int = 128, env: Any = None, env_params: Any = None) -> Estimator:
    """Chunked-TD advantages and value targets (module docstring).

    Args:
      form: "sampled" (Chunked SARSA's λ) or "expected" (Chunked expected SARSA's).
      model: "counts" (fitted transition counts), "oracle" (the exact transition model) or
        "features" (a network with one categorical per transition feature).
      lambdas: "scalar" (one λ per step) or "vector" (one per reward feature; model=features).
      hidden: the width of the feature model's two tanh layers (model=features).
      env, env_params: supplied by the engine; the environment must have a tabular state index
        and MDP (``jaxcredit.exact.tabular.has_ground_truth``), which sizes the count table, or
        for model=features say how its transitions read (``transition_code``).
    """
    check_choice("form", form, FORMS)
    check_choice("model", model, MODELS)
    check_choice("lambdas", lambdas, cf.LAMBDAS)
    if lambdas == "vector" and model not in ("features", "feature_oracle"):
        raise ValueError("chunked lambdas=vector needs model=features or feature_oracle (a λ "
                         "per reward feature)")
    if model in ("features", "feature_oracle"):
        return _chunked_features(form, lambdas, hidden, model == "feature_oracle", env,
                                 env_params)
    if env is None or not has_ground_truth(env):
        raise ValueError("chunked needs an environment with a tabular state index and MDP "
                         "(its transition model is a table over the states)")
    # The table's size only: building the MDP here would be work the engine does again.
    S, A = int(env.num_states), int(env.action_space(env_params).n)

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del key
        p_next = params["p_next"] if model == "oracle" else count_probabilities(params["counts"])
        advantage, targets, lam = chunked_advantages(p_next, trajectory, hparams.gamma, form)
        return Credit(advantage=advantage, value_target=targets,
                      diagnostics={"advantage_mean": advantage.mean(),
                                   "advantage_std": advantage.std(), "lambda_mean": lam.mean()})

    def init(key: Array, example: Trajectory) -> dict:
        del key, example
        return {"counts": jnp.zeros((S, A, S + 1), jnp.float32)}

    def update(params: dict, trajectory: Trajectory, hparams: Any) -> dict:
        del hparams
        nxt, known = next_state_index(trajectory, S)
        seen = known.astype(jnp.float32)
        counts = params["counts"].at[trajectory.state, trajectory.action, nxt].add(seen)
        return {"counts": counts}

    if model == "oracle":
        return Estimator(name="chunked", assign=assign, exact_model="transition",
                         is_oracle=True)
    return Estimator(name="chunked", assign=assign, init=init, update=update,
                     exact_model="transition",
                     oracle=lambda: chunked(form=form, model="oracle", env=env,
                                            env_params=env_params))


def _chunked_features(form: str, lambdas: str, hidden: int, exact: bool, env: Any,
                      env_params: Any) -> Estimator:
    """``chunked model=features`` (the fitted feature model, ``chunked_features``) or
    ``model=feature_oracle`` (the environment's exact per-feature law in its place; a model
    is still fitted for the component values of the vector λ). Where the environment has its
    exact law, the fitted learner reports at evaluation points how far its λ and its credit
    are from the exact law's on the same window (``lambda_error_to_exact``,
    ``advantage_rmse_to_exact``)."""
    if hidden < 1:
        raise ValueError(f"chunked hidden must be >= 1, got {hidden}")
    factored = cf.factored_env(env, need_rewards=lambdas == "vector")
    has_law = callable(getattr(factored, "transition_law", None))
    if exact and not has_law:
        raise ValueError("chunked model=feature_oracle needs an environment with its exact "
                         "per-feature law (transition_law: AccumulatedCharge, "
                         "KeyToDoorDistractors)")
    categories = tuple(int(c) for c in factored.transition_categories)
    num_actions = int(env.action_space(env_params).n)
    components = len(categories) + 1 if lambdas == "vector" else 0
    model = cf.FeatureModel(categories, num_actions, hidden, components)

    def init(key: Array, example: Trajectory) -> Any:
        return model.init(key, example.obs[0], example.action[0],
                          method=cf.FeatureModel.initialise)

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del key
        pi, _ = behaviour_policy(trajectory)
        advantage, targets, lam = cf.feature_credit(model, params, factored, trajectory, pi,
                                                    hparams.gamma, form, lambdas, exact)
        diagnostics = {"advantage_mean": advantage.mean(), "advantage_std": advantage.std(),
                       "lambda_mean": lam.mean()}
        return Credit(advantage=advantage, value_target=targets, diagnostics=diagnostics)

    def diagnose(params: Any, trajectory: Trajectory, hparams: Any) -> dict:
        """The fitted λ and credit against the exact law's on the same window."""
        pi, _ = behaviour_policy(trajectory)
        advantage, _, lam = cf.feature_credit(model, params, factored, trajectory, pi,
                                              hparams.gamma, form, lambdas)
        exact_advantage, _, exact_lam = cf.feature_credit(
            model, params, factored, trajectory, pi, hparams.gamma, form, lambdas, True)
        return {"lambda_error_to_exact": jnp.abs(lam - exact_lam).mean(),
                "advantage_rmse_to_exact": jnp.sqrt(jnp.mean((advantage - exact_advantage) ** 2))}

    def loss(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> tuple[Array, dict]:
        del key
        pi, _ = behaviour_policy(trajectory)
        return cf.feature_loss(model, params, factored, trajectory, pi, hparams.gamma, form,
                               lambdas, exact)

    if exact and lambdas == "scalar":  # nothing to fit
        return Estimator(name="chunked", assign=assign, init=init)
    return Estimator(name="chunked", assign=assign, init=init, loss=loss, learned=True,
                     diagnose=diagnose if has_law and not exact else None)

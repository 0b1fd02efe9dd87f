"""Exact quantities of the current policy inside the compiled step, on environments with a
tabular MDP.

On an environment with ground truth (``jaxcredit.exact.tabular``: ``tabular_mdp`` and
``state_index``) the policy network can be read as a table: π[s] = softmax(f_θ(o(s))) with o(s)
the observation of state s (aliased states share it). From that table dynamic programming gives,
for the *current* policy and inside the same compiled program:

* the exact expected return J(π) and the environment's task metrics (``evaluation``);
* the exact hindsight models the learned credit models approximate: h_γ(a | s, s') for
  state-conditioned estimators, h(a | s, Z) for return-conditioned ones. They serve as an
  **oracle** (``model="oracle"``: credit from the exact model, so estimator error and model error
  separate) and as the reference of ``estimator/kl_to_exact``.

Which exact models exist, how each is planned and computed, is ``jaxcredit.exact.models``; the
ground truth plans the kinds a run needs and computes them for the current policy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

from jaxcredit.exact import tabular
from jaxcredit.exact.models import exact_model, reward_value_law  # noqa: F401 (re-exported)
from jaxcredit.exact.tabular import has_ground_truth

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    """What the engine needs to compute exact quantities for any policy (static parts).

    Attributes:
      mdp: ``() -> TabularMDP`` (traced inside the program; constant-folded when params are).
      horizon: the episode time limit (finite-horizon J(π)).
      task_metrics: ``pi [S, A] -> {name: scalar}`` (the environment's, if any).
      reward_law: the environment's exact discrete reward law, or None (Gaussian).
      plans: ``{kind: plan}`` of the exact models planned for this run (``exact.models``).
      plan_errors: ``{kind: why}`` for the kinds that could not be planned here.
    """

    mdp: Callable[[], tabular.TabularMDP]
    horizon: int
    task_metrics: Callable[[Array], dict]
    reward_law: Any
    plans: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    plan_errors: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def reward_values(self) -> Any:
        """``(values [U], probs [S, A, U])`` where the reward hindsight was planned, else None."""
        return self.plans.get("reward_hindsight")


def make_ground_truth(env: Any, env_params: Any,
                      exact_models: Sequence[str] = ()) -> "GroundTruth | None":
    """The :class:`GroundTruth` of ``env`` or None if it has none, with the kinds of exact
    model in ``exact_models`` planned on the concrete environment (``exact.models``; one that
    cannot be planned is recorded in ``plan_errors``, for the stage that needs it to refuse)."""
    if not has_ground_truth(env):
        return None
    horizon = int(getattr(env_params, "max_steps_in_episode", 0) or 0)
    law_fn = getattr(env, "reward_law", None)
    reward_law = law_fn(env_params) if callable(law_fn) else None
    metrics_fn = getattr(env, "task_metrics", None)
    task_metrics = ((lambda pi: dict(metrics_fn(env_params, pi))) if callable(metrics_fn)
                    else (lambda pi: {}))
    plans, errors = {}, {}
    for kind in dict.fromkeys(k for k in exact_models if k):
        plan = exact_model(kind).plan
        try:
            plans[kind] = None if plan is None else plan(env, env_params)
        except (ValueError, jax.errors.ConcretizationTypeError, TypeError) as err:
            errors[kind] = " ".join(str(err).split())[:300]
    return GroundTruth(mdp=lambda: env.tabular_mdp(env_params), horizon=horizon,
                       task_metrics=task_metrics, reward_law=reward_law, plans=plans,
                       plan_errors=errors)


def exact_unavailable(kind: str, gt: GroundTruth, gamma: Any = None,
                      where: str = "this environment") -> str:
    """Why the exact model ``kind`` cannot be computed on ``where`` ("" if it can); ``gamma``,
    where given, is checked against a kind exact only for γ = 1."""
    name = kind.replace("_", " ")
    if exact_model(kind).undiscounted_only and gamma is not None and float(gamma) != 1.0:
        return (f"the exact {name} is that of the undiscounted return and needs gamma=1, got "
                f"gamma={float(gamma):g}")
    if kind not in gt.plans:
        return f"no exact {name} on {where}: {gt.plan_errors.get(kind, 'not planned')}"
    return ""


def policy_table(logits: Callable[[Any, Array], Array], params: Any, mdp: tabular.TabularMDP
                 ) -> Array:
    """π[s, a] = softmax(logits(params, o(s)))[a] for every state of the tabular MDP, where
    ``logits(params, obs [..., O]) -> [..., A]`` is the policy (the agent's behaviour policy, with
    its exploration mixture, for what the data and the exact credit models follow; its target
    policy for what evaluation plays)."""
    return jax.nn.softmax(logits(params, mdp.observation).astype(jnp.float32), axis=-1)


def exact_return(gt: GroundTruth, mdp: tabular.TabularMDP, pi: Array) -> Array:
    """J(π): expected undiscounted return from the start distribution within the time limit."""
    values = tabular.finite_horizon_values(mdp, pi, max(gt.horizon, 1), 1.0)
    return mdp.initial @ values


def exact_model_params(kind: str, gt: GroundTruth, mdp: tabular.TabularMDP, pi: Array,
                       gamma: Array) -> Any:
    """Parameters of the exact (oracle) model ``kind`` for policy ``pi`` (``exact.models``);
    a one-line ValueError where it was not planned."""
    if kind not in gt.plans:
        raise ValueError(exact_unavailable(kind, gt))
    return exact_model(kind).params(gt.plans[kind], mdp, pi, gamma)


def kl_divergence(log_p: Array, log_q: Array, weight: Array) -> Array:
    """Σ w · KL(p ‖ q) / Σ w, with KL over the last axis (distributions given as log-probs)."""
    kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
    return jnp.sum(weight * kl) / jnp.maximum(jnp.sum(weight), 1e-12)


def has_undelayed_truth(env: Any) -> bool:
    """A ``DelayedReward`` environment over an environment with ground truth: J(π) and the
    Q-values of the undelayed reward are its reference (``wrappers.DelayedReward``)."""
    inner = getattr(env, "undelayed", None)
    return inner is not None and has_ground_truth(inner)


def redistribution_quality(mdp: tabular.TabularMDP, pi: Array, gamma: Array, state: Array,
                           action: Array, reward: Array) -> dict[str, Array]:
    """How a redistributed reward ``[T, *batch]`` relates to the exact Q of ``pi``.

    * ``advantage_correlation``: Pearson correlation over the window's steps of the new reward
      r̃_t with the exact advantage A^π(s_t, a_t) of the action taken;
    * ``decisive_share``: the share of Σ|r̃_t| that lands on *decisive* steps, those in states
      whose actions' exact Q-values differ (on an aliased chain whose actions change nothing,
      every step but the decisive one has equal Q-values).
    """
    q = tabular.action_values(mdp, pi, gamma)
    advantage = q - jnp.sum(pi * q, axis=-1, keepdims=True)
    taken = advantage[state, action]
    spread = jnp.max(q, axis=-1) - jnp.min(q, axis=-1)
    decisive = (spread > 1e-5 * (1.0 + jnp.max(jnp.abs(q), axis=-1)))[state]
    r = reward - reward.mean()
    a = taken - taken.mean()
    denom = jnp.sqrt(jnp.sum(r * r) * jnp.sum(a * a))
    magnitude = jnp.abs(reward)
    return {
        "advantage_correlation": jnp.where(denom > 0, jnp.sum(r * a) / denom, jnp.nan),
        "decisive_share": jnp.sum(jnp.where(decisive, magnitude, 0.0))
        / jnp.maximum(jnp.sum(magnitude), 1e-12),
    }

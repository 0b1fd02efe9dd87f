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

The return-conditioned model is exact for the undiscounted Monte-Carlo return (γ = 1): with
γ < 1 its tables are NaN, so a misconfigured oracle run fails loudly instead of learning from the
wrong model (the host loop also refuses it up front).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.exact import hindsight, return_grid, return_law, tabular
from jaxcredit.exact.tabular import has_ground_truth
from jaxcredit.networks import ActorCritic

Array = jax.Array


def is_bandit(mdp: tabular.TabularMDP) -> bool:
    """Every action from every start state ends the episode (checked on concrete arrays)."""
    start = np.asarray(mdp.initial) > 0
    reach_terminal = np.asarray(jnp.sum(mdp.transition * mdp.terminal[None, None, :], axis=-1))
    return bool(np.all(reach_terminal[start] > 1 - 1e-6))


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    """What the engine needs to compute exact quantities for any policy (static parts).

    Attributes:
      mdp: ``() -> TabularMDP`` (traced inside the program; constant-folded when params are).
      horizon: the episode time limit (finite-horizon J(π)).
      task_metrics: ``pi [S, A] -> {name: scalar}`` (the environment's, if any).
      reward_law: the environment's exact discrete reward law, or None (Gaussian).
      return_plan: how to compute the exact return hindsight: ``("bandit", None)``,
        ``("grid", plan)``, or None if it cannot be computed here (message in ``return_error``).
      return_error: why there is no return plan.
      reward_values: ``(values [U], probs [S, A, U])``, the law of the reward value given
        (s, a) for COCOA-reward's exact model, or None (why in ``reward_values_error``).
    """

    mdp: Callable[[], tabular.TabularMDP]
    horizon: int
    task_metrics: Callable[[Array], dict]
    reward_law: Any
    return_plan: Optional[tuple]
    return_error: str = ""
    reward_values: Optional[tuple] = None
    reward_values_error: str = ""


def reward_value_law(env: Any, env_params: Any) -> tuple[Array, Array]:
    """``(values [U], probs [S, A, U])``: the law of the reward value given (s, a).

    The environment's own ``reward_distribution`` (or ``reward_law``) where it has one, else the
    distinct rewards of a tabular MDP with deterministic rewards (``hindsight.reward_value_law``).
    A law over next states ``[S, A, S', U]`` is marginalised with the transition. Raises a
    one-line ValueError where the rewards are not a finite set of values.
    """
    for name in ("reward_distribution", "reward_law"):
        fn = getattr(env, name, None)
        law = fn(env_params) if callable(fn) else None
        if law is not None:
            values, probs = law
            values, probs = jnp.asarray(values, jnp.float32), jnp.asarray(probs, jnp.float32)
            if probs.ndim == 4:
                probs = jnp.einsum("sat,satu->sau", env.tabular_mdp(env_params).transition, probs)
            return values, probs
    if not has_ground_truth(env):
        raise ValueError("the environment has no tabular MDP from which to read its reward "
                         "values; give the estimator reward_values")
    return hindsight.reward_value_law(env.tabular_mdp(env_params))


def make_ground_truth(env: Any, env_params: Any, need_return_law: bool,
                      need_reward_values: bool = False) -> Optional[GroundTruth]:
    """The :class:`GroundTruth` of ``env`` or None if it has none.

    The grid of the return law is planned here, on the concrete MDP, only when
    ``need_return_law`` (an oracle or a learned return-hindsight model); the law of the reward
    values only when ``need_reward_values`` (COCOA-reward's exact model).
    """
    if not has_ground_truth(env):
        return None
    horizon = int(getattr(env_params, "max_steps_in_episode", 0) or 0)
    law_fn = getattr(env, "reward_law", None)
    reward_law = law_fn(env_params) if callable(law_fn) else None
    metrics_fn = getattr(env, "task_metrics", None)
    task_metrics = ((lambda pi: dict(metrics_fn(env_params, pi))) if callable(metrics_fn)
                    else (lambda pi: {}))
    return_plan, error = None, ""
    if need_return_law:
        try:
            mdp = env.tabular_mdp(env_params)
            if is_bandit(mdp):
                return_plan = ("bandit", None)
            else:

                return_plan = ("grid", return_grid.plan_return_grid(mdp, horizon, reward_law))
        except (ValueError, jax.errors.ConcretizationTypeError, TypeError) as err:
            error = " ".join(str(err).split())[:300]
    reward_values, values_error = None, ""
    if need_reward_values:
        try:
            reward_values = jax.tree.map(np.asarray, reward_value_law(env, env_params))
        except ValueError as err:
            values_error = str(err)
    return GroundTruth(mdp=lambda: env.tabular_mdp(env_params), horizon=horizon,
                       task_metrics=task_metrics, reward_law=reward_law,
                       return_plan=return_plan, return_error=error,
                       reward_values=reward_values, reward_values_error=values_error)


def policy_table(network: ActorCritic, agent_params: Any, mdp: tabular.TabularMDP,
                 behaviour: bool = True) -> Array:
    """π[s, a] = softmax(f_θ(o(s)))[a] for every state of the tabular MDP: the behaviour policy
    (with the network's exploration mixture, what the data and the exact credit models follow),
    or with ``behaviour=False`` the target policy that evaluation plays."""
    method = ActorCritic.policy if behaviour else ActorCritic.target_policy
    logits = network.apply(agent_params, mdp.observation, method=method)
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def exact_return(gt: GroundTruth, mdp: tabular.TabularMDP, pi: Array) -> Array:
    """J(π): expected undiscounted return from the start distribution within the time limit."""
    values = tabular.finite_horizon_values(mdp, pi, max(gt.horizon, 1), 1.0)
    return mdp.initial @ values


def exact_model_params(kind: str, gt: GroundTruth, mdp: tabular.TabularMDP, pi: Array,
                       gamma: Array) -> Any:
    """Parameters of the exact (oracle) hindsight model ``kind`` for policy ``pi``.

    ``"state_hindsight"``: ``{"log_h": log h_γ [S, S, A]}`` (``hindsight.state_hindsight``).
    ``"reward_hindsight"``: ``{"log_h": log p_γ(a|s, u) [S, U, A], "values": [U]}``
    (``hindsight.reward_hindsight``; COCOA-reward).
    ``"return_hindsight"``: ``{"bandit": (mdp, pi)}`` or ``{"grid": (p_sa, p_s, pi, support)}``,
    NaN unless γ = 1 (module docstring).
    """
    if kind == "state_hindsight":
        h = hindsight.state_hindsight(mdp, pi, gamma)
        return {"log_h": jnp.log(jnp.maximum(h, 1e-30))}
    if kind == "reward_hindsight":
        if gt.reward_values is None:
            raise ValueError(f"no exact reward hindsight for this environment: "
                             f"{gt.reward_values_error or 'reward values not planned'}")
        values, probs = gt.reward_values
        h = hindsight.reward_hindsight(mdp, pi, gamma, jnp.asarray(probs))
        return {"log_h": jnp.log(jnp.maximum(h, 1e-30)), "values": jnp.asarray(values)}
    if kind != "return_hindsight":
        raise ValueError(f"unknown exact model {kind!r}")
    if gt.return_plan is None:
        raise ValueError(f"no exact return hindsight for this environment: {gt.return_error}")
    poison = jnp.where(gamma == 1.0, 0.0, jnp.nan)
    if gt.return_plan[0] == "bandit":
        return {"bandit": (mdp, pi + poison)}

    plan = gt.return_plan[1]
    p_sa, p_s = return_law.return_law(mdp, pi, plan, gt.reward_law)
    return {"grid": (p_sa + poison, p_s, pi, jnp.asarray(plan.support))}


def kl_divergence(log_p: Array, log_q: Array, weight: Array) -> Array:
    """Σ w · KL(p ‖ q) / Σ w, with KL over the last axis (distributions given as log-probs)."""
    kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
    return jnp.sum(weight * kl) / jnp.maximum(jnp.sum(weight), 1e-12)


def has_undelayed_truth(env: Any) -> bool:
    """A ``DelayedReward`` environment over an environment with ground truth: J(π) and the
    Q-values of the undelayed reward are its reference (``wrappers.DelayedReward``)."""
    inner = getattr(env, "undelayed", None)
    return inner is not None and has_ground_truth(inner)


def exact_redistribution_params(kind: str, mdp: tabular.TabularMDP, pi: Array) -> dict:
    """The exact quantity an oracle redistributor reads (``Redistributor.exact_model``).

    ``"action_values"``: Q^π of the undiscounted return (γ = 1; every policy must end its
    episodes) and the mean reward of each transition.
    """
    if kind != "action_values":
        raise ValueError(f"unknown exact redistribution model {kind!r}")
    return {"q": tabular.action_values(mdp, pi, 1.0), "transition_reward": mdp.transition_reward}


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

"""The kinds of exact model: what an oracle stage reads, planned once and computed per policy.

A learned stage that approximates an exact quantity names its kind (``Estimator.exact_model``,
``Redistributor.exact_model``). Each kind is an :class:`ExactModel` built by a factory in
:data:`EXACT_MODELS`:

* ``plan(env, env_params)``: the concrete work done once, outside the compiled program (the grid
  of the return law, the law of the reward values); a one-line ValueError says why the kind
  cannot be computed on that environment. None: nothing to plan.
* ``params(plan, mdp, pi, gamma)``: the exact model of policy ``pi`` [S, A], traced inside the
  compiled step; the parameters the stage's oracle reads.

The engine, the diagnostics and the credit-error metrics read only these records, so a new kind
is one factory and one :func:`register_exact_model` line (``docs/extending.md``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.exact import hindsight, return_grid, return_law, tabular
from jaxcredit.exact.tabular import has_ground_truth
from jaxcredit.registry import Registry

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ExactModel:
    """One kind of exact model (module docstring).

    Attributes:
      params: ``(plan, mdp, pi [S, A], gamma) -> params`` for the stage's oracle.
      plan: ``(env, env_params) -> plan`` or None; raises ValueError (or a JAX tracing
        error) where the kind cannot be computed on that environment.
      undiscounted_only: exact only for γ = 1 (an oracle at another γ is refused).
      linear_in_reward: the credit built on it is linear in the later rewards, so its error
        splits by reward value (``credit.error.reward_value_errors``).
    """

    params: Callable[[Any, tabular.TabularMDP, Array, Array], Any]
    plan: Optional[Callable[[Any, Any], Any]] = None
    undiscounted_only: bool = False
    linear_in_reward: bool = False


def _log(p: Array) -> Array:
    return jnp.log(jnp.maximum(p, 1e-30))


def state_hindsight() -> ExactModel:
    """h_γ(a | s_t, s_k), the state-conditioned hindsight (HCA Theorem 1): ``{"log_h": [S, S,
    A]}`` (``hindsight.state_hindsight``)."""
    return ExactModel(
        params=lambda plan, mdp, pi, gamma: {"log_h": _log(hindsight.state_hindsight(
            mdp, pi, gamma))},
        linear_in_reward=True)


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


def reward_hindsight() -> ExactModel:
    """p_γ(a | s_t, u) of a later reward value u (COCOA-reward): ``{"log_h": [S, U, A],
    "values": [U]}`` (``hindsight.reward_hindsight``); planned: the law of the reward values."""

    def params(plan, mdp, pi, gamma):
        values, probs = plan
        h = hindsight.reward_hindsight(mdp, pi, gamma, jnp.asarray(probs))
        return {"log_h": _log(h), "values": jnp.asarray(values)}

    return ExactModel(
        params=params, linear_in_reward=True,
        plan=lambda env, env_params: jax.tree.map(np.asarray, reward_value_law(env, env_params)))


def _is_bandit(mdp: tabular.TabularMDP) -> bool:
    """Every action from every start state ends the episode (checked on concrete arrays)."""
    start = np.asarray(mdp.initial) > 0
    reach_terminal = np.asarray(jnp.sum(mdp.transition * mdp.terminal[None, None, :], axis=-1))
    return bool(np.all(reach_terminal[start] > 1 - 1e-6))


def return_hindsight() -> ExactModel:
    """h(a | s, Z) of the undiscounted return Z (HCA Theorem 2): ``{"bandit": (mdp, pi)}`` for
    one-step bandits, else ``{"grid": (p_sa, p_s, pi, support)}`` on a planned grid
    (``return_law``). Exact only for γ = 1: at another γ its tables are NaN, so a
    misconfigured oracle fails loudly instead of learning from the wrong model."""

    def plan(env, env_params):
        mdp = env.tabular_mdp(env_params)
        law_fn = getattr(env, "reward_law", None)
        reward_law = law_fn(env_params) if callable(law_fn) else None
        if _is_bandit(mdp):
            return ("bandit", None, reward_law)
        horizon = int(getattr(env_params, "max_steps_in_episode", 0) or 0)
        return ("grid", return_grid.plan_return_grid(mdp, horizon, reward_law), reward_law)

    def params(plan, mdp, pi, gamma):
        poison = jnp.where(gamma == 1.0, 0.0, jnp.nan)
        kind, grid, reward_law = plan
        if kind == "bandit":
            return {"bandit": (mdp, pi + poison)}
        p_sa, p_s = return_law.return_law(mdp, pi, grid, reward_law)
        return {"grid": (p_sa + poison, p_s, pi, jnp.asarray(grid.support))}

    return ExactModel(params=params, plan=plan, undiscounted_only=True)


def action_values() -> ExactModel:
    """Q^π of the undiscounted return (RUDDER's exact redistribution; every policy must end its
    episodes): ``{"q": [S, A], "transition_reward": [S, A, S']}``."""
    return ExactModel(params=lambda plan, mdp, pi, gamma: {
        "q": tabular.action_values(mdp, pi, 1.0), "transition_reward": mdp.transition_reward})


def transition() -> ExactModel:
    """P(s′ | s, a) with the terminal states pooled into one last column, "the episode
    terminated" (Chunked-TD's exact model): ``{"p_next": [S, A, S + 1]}``; it does not depend on
    the policy."""

    def params(plan, mdp, pi, gamma):
        terminal = mdp.terminal.astype(mdp.transition.dtype)
        ends = jnp.sum(mdp.transition * terminal, axis=-1, keepdims=True)
        return {"p_next": jnp.concatenate([mdp.transition * (1.0 - terminal), ends], axis=-1)}

    return ExactModel(params=params)


EXACT_MODELS = Registry("exact model", {
    "state_hindsight": "jaxcredit.exact.models:state_hindsight",
    "reward_hindsight": "jaxcredit.exact.models:reward_hindsight",
    "return_hindsight": "jaxcredit.exact.models:return_hindsight",
    "action_values": "jaxcredit.exact.models:action_values",
    "transition": "jaxcredit.exact.models:transition",
})


def register_exact_model(name: str, factory: Any) -> None:
    """Adds a kind of exact model: ``factory() -> ExactModel`` or ``"module:factory"``."""
    EXACT_MODELS.register(name, factory)
    exact_model.cache_clear()


@functools.lru_cache(maxsize=None)
def exact_model(name: str) -> ExactModel:
    """The :class:`ExactModel` of kind ``name`` (one-line ValueError for an unknown kind)."""
    model = EXACT_MODELS.make(name)
    if not isinstance(model, ExactModel):
        raise ValueError(f"exact model {name!r}: its factory returned "
                         f"{type(model).__name__}, not an ExactModel")
    return model

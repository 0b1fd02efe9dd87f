"""One protocol for every environment with exact ground truth: :class:`TabularEnv`.

An environment with a finite state space mixes in :class:`TabularEnv` and writes three things:

* ``num_states``: the number of tabular states S (an attribute or a property);
* ``state_index(state) -> int32``: the tabular index of an environment state (jittable,
  elementwise over batch dimensions);
* ``_tabular_arrays(params) -> dict``: the keyword arguments of
  :func:`jaxcredit.exact.tabular.make_tabular_mdp` (jittable in ``params``).

It then gets ``tabular_mdp(params=None)``: one compiled program per environment instance (building
the tensors op by op would cost one compilation per op and shape), which also works when
``params`` are traced (inside a jitted or vmapped function it is inlined). Two optional hooks and
a flag have defaults:

* ``task_metrics(params, pi) -> {name: scalar}``: decisive task quantities of a tabular policy
  ``pi [S, A]`` (e.g. the probability of collecting KeyToDoor's treasure); default ``{}``.
* ``reward_law(params) -> (values [J], probs [S, A, S, J] or [S, A, J]) | None``: the exact
  discrete law of each transition's reward where it is not Gaussian; ``probs[..., j]`` is the
  probability of reward ``values[j]`` given (s, a, s') (or given (s, a), the reward then being
  independent of s'). Default ``None``: the MDP's own law, N(``transition_reward``,
  ``transition_reward_std``²), deterministic where the std is 0.
* ``observation_of_state``: True (the default) where the observation is a function of the
  tabular state, so that an episode shows at most S distinct observations (COCOA-feature's
  pretraining summary relies on it); False where it also carries something else, such as
  GridWorld's elapsed-time feature.

Wrappers that do not change the reward process (``TimeLimit``, ``EpisodeStats``,
``FlattenObservation``) forward all of this to the inner environment; ``DelayedReward`` hides it
(the reward then depends on the history, so the inner MDP is not its ground truth).
:func:`jaxcredit.exact.tabular.has_ground_truth` says whether an environment (wrapped or not)
exposes it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from jaxcredit.exact.tabular import TabularMDP, make_tabular_mdp

Array = jax.Array

# Every attribute of the protocol: what DelayedReward hides.
GROUND_TRUTH_ATTRIBUTES = frozenset({
    "num_states", "state_index", "tabular_mdp", "_tabular_arrays", "task_metrics",
    "reward_law", "reward_distribution",
})


class TabularEnv:
    """Mixin of environments with an exact tabular MDP (see the module docstring).

    Put it first among the bases, e.g. ``class KeyToDoor(TabularEnv, environment.Environment)``.
    Subclasses define ``num_states``, ``state_index`` and ``_tabular_arrays``; they may override
    ``task_metrics`` and ``reward_law``.
    """

    num_states: int
    observation_of_state: bool = True

    def state_index(self, state: Any) -> Array:
        """Tabular index ``int32`` of an environment state (jittable, elementwise)."""
        raise NotImplementedError(f"{type(self).__name__} must define state_index")

    def _tabular_arrays(self, params: Any) -> dict[str, Array]:
        """Keyword arguments of ``make_tabular_mdp`` for ``params`` (jittable in params)."""
        raise NotImplementedError(f"{type(self).__name__} must define _tabular_arrays")

    def tabular_mdp(self, params: Any = None) -> TabularMDP:
        """The exact tabular MDP under ``params`` (default: ``default_params``)."""
        return _tabular_mdp(self, self.default_params if params is None else params)

    def task_metrics(self, params: Any, pi: Array) -> dict[str, Array]:
        """Scalar task metrics of the tabular policy ``pi [S, A]`` (jittable); none by default."""
        del params, pi
        return {}

    def reward_law(self, params: Any = None) -> tuple[Array, Array] | None:
        """Exact discrete reward law ``(values [J], probs)``, or None for the MDP's Gaussian law."""
        del params
        return None


@functools.partial(jax.jit, static_argnums=0)
def _tabular_mdp(env: TabularEnv, params: Any) -> TabularMDP:
    # One compiled program per environment instance; inlined when called under a trace.
    return make_tabular_mdp(**env._tabular_arrays(params))


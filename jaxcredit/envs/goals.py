"""The goal-conditioned environment protocol (what hindsight relabelling needs).

A goal-conditioned environment's observation is one flat float vector that the networks read as
they read any other, laid out as ``concat(observation, desired_goal)``; the *achieved goal* is a
function of the observation part (the bits for BitFlip, the position for GoalGrid). The
environment says how to take the three apart and how to score a goal:

* ``goal_size``: length of a goal vector;
* ``desired_goal(obs)`` / ``achieved_goal(obs)``: ``[..., goal_size]`` views of an observation;
* ``replace_goal(obs, goal)``: the same observation with another desired goal;
* ``compute_reward(achieved, desired)``: the reward of a transition whose next state achieved
  ``achieved`` (jittable, broadcasting over leading axes);
* ``success(achieved, desired)``: bool, whether ``achieved`` satisfies ``desired``;
* ``terminates_on_success``: whether reaching the desired goal ends the episode.

``compute_reward`` must agree with the environment's own reward on its own goal (the tests check
BitFlip and GoalGrid): relabelling a transition with its own goal changes nothing.

:func:`goal_env` finds the protocol through wrappers, so ``DelayedReward-`` and other wrappers do
not hide it; :func:`success_fn` is what the engines use to count successful episodes
(``success_rate``, ``eval/success_rate``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, runtime_checkable

import jax

Array = jax.Array

METHODS = ("desired_goal", "achieved_goal", "replace_goal", "compute_reward", "success")


@runtime_checkable
class GoalEnv(Protocol):
    """See the module docstring."""

    goal_size: int
    terminates_on_success: bool

    def desired_goal(self, obs: Array) -> Array: ...

    def achieved_goal(self, obs: Array) -> Array: ...

    def replace_goal(self, obs: Array, goal: Array) -> Array: ...

    def compute_reward(self, achieved: Array, desired: Array) -> Array: ...

    def success(self, achieved: Array, desired: Array) -> Array: ...


def goal_env(env: Any) -> Optional[Any]:
    """The goal-conditioned environment inside ``env`` (through ``_env`` wrappers), else None.

    A wrapper that changes rewards (``DelayedReward``) still exposes the inner goal protocol:
    relabelling recomputes the *per-step* goal reward, which is the inner environment's.
    """
    seen = 0
    while env is not None and seen < 16:
        if all(callable(getattr(type(env), m, None)) for m in METHODS) and \
                hasattr(env, "goal_size"):
            return env
        env = getattr(env, "_env", None)
        seen += 1
    return None


def success_fn(env: Any) -> Optional[Callable[[Array, Array, Array], Array]]:
    """``(obs, next_obs, reward) -> bool``: did the transition reach the goal shown in ``obs``?
    None for environments without goals.

    An environment that is not goal-conditioned but knows when an episode succeeded (a task whose
    reward may be a proxy, such as ArithmeticChain's hacked grader) defines
    ``episode_success(obs, next_obs, reward)``; it is found through wrappers and used the same way
    (it reads the environment's own observations and rewards: a wrapper that changes either
    must hide it). A partially observable task whose goal is not in the observation (TMaze)
    reads the reward of the episode's last step.
    """
    goals = goal_env(env)
    if goals is None:
        inner, seen = env, 0
        while inner is not None and seen < 16:
            if callable(getattr(type(inner), "episode_success", None)):
                return inner.episode_success
            inner, seen = getattr(inner, "_env", None), seen + 1
        return None
    return lambda obs, next_obs, reward: goals.success(goals.achieved_goal(next_obs),
                                                       goals.desired_goal(obs))

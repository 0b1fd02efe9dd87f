"""Hindsight experience replay as the relabel stage (Andrychowicz et al. 2017, NeurIPS).

A replayed transition (s_t || g, a_t, r_t, s_{t+1} || g) is, with probability k / (k + 1), replayed
as (s_t || g', a_t, r'_t, s_{t+1} || g') with a goal g' the agent *did* achieve, and

    r'_t = compute_reward(achieved(s_{t+1}), g'),   terminated'_t = success(achieved(s_{t+1}), g')

(the latter only on environments that end an episode on success). The paper stores k relabelled
copies of every transition, so k / (k + 1) of the replayed data is relabelled; relabelling at
sample time with that probability gives the same mixture without storing copies (as the
authors' baselines code does). Strategies for g' (the paper's Sec. 4.5):

* ``final``: the goal achieved at the end of the transition's episode;
* ``future``: the goal achieved at a uniformly chosen step t' ≥ t of the same episode (the state
  s_{t'+1}; t' = t is the transition's own next state);
* ``episode``: the goal achieved at a uniformly chosen step of the same episode, before or after t;
* ``random``: the goal achieved at a uniformly chosen step of the whole replay sample (a uniform
  sample of everything encountered so far).

Goals of ``final``, ``future`` and ``episode`` come from the transition's own episode only: never
across an episode boundary, never from another environment. A goal reached by the episode ending
on its *original* goal is not a termination for g' (the environment would have gone on): such a
step becomes a time-out for g', bootstrapped from its final observation.

Windows. The off-policy engine samples windows ``[S, B]`` from replay, trains on the step
``anchor = past`` of each column and reads up to ``future`` steps after it (``Relabeller.past`` /
``.future``, set here from the environment's episode length). Every step of a column is
relabelled with that column's goal, so an n-step target stays consistent. ``relabel`` takes
whole windows (the stage contract); ``relabel_rows`` is the same relabelling given only the
window's episode ends and achieved goals and the rows to train on, which is what the engine
gathers from replay.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxcredit.envs.goals import goal_env
from jaxcredit.relabel import Relabeller
from jaxcredit.types import Trajectory

Array = jax.Array
STRATEGIES = ("final", "future", "episode", "random")


def episode_ids(done: Array) -> Array:
    """``[S, B]`` index of the episode each step belongs to within its column: the number of
    episode ends strictly before the step."""
    ends = done.astype(jnp.int32)
    return jnp.cumsum(ends, axis=0) - ends


def choose_goal_steps(key: Array, done: Array, anchor: int, strategy: str) -> Array:
    """``[B]`` the step (row) whose achieved goal relabels each column (see module docstring).

    ``random`` returns rows only; :func:`relabel_goals` pairs them with random columns.
    """
    num_steps = done.shape[0]
    rows = jnp.arange(num_steps)[:, None]
    same_episode = episode_ids(done) == episode_ids(done)[anchor][None, :]
    if strategy == "final":
        # The last step of the anchor's episode inside the window (its episode end, where seen).
        return jnp.max(jnp.where(same_episode & (rows >= anchor), rows, anchor), axis=0)
    if strategy == "future":
        allowed = same_episode & (rows >= anchor)
    elif strategy == "episode":
        allowed = same_episode
    elif strategy == "random":
        allowed = jnp.ones_like(done, bool)
    else:
        raise ValueError(f"unknown HER strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    score = jnp.where(allowed, jax.random.uniform(key, done.shape), -1.0)
    return jnp.argmax(score, axis=0)  # uniform over the allowed rows


def choose_goals(goals: Any, done: Array, achieved_next: Array, desired: Array, key: Array,
                 anchor: int, strategy: str, k: int) -> tuple[Array, Array]:
    """The goal of each column of a window: ``(goal [B, G], relabelled [B] bool)``.

    Args:
      goals: the goal-conditioned environment (``jaxcredit.envs.goals``).
      done: ``[S, B]`` episode ends of the window.
      achieved_next: ``[S, B, G]`` the goal achieved at s'_{t+1} of every step.
      desired: ``[B, G]`` the original goal of the anchor's episode.
      key: PRNG key.
      anchor: the row the learner trains on.
      strategy: one of :data:`STRATEGIES`.
      k: relabelled replays per original one; a column is relabelled with probability k/(k+1).
    """
    del goals
    step_key, column_key, coin_key = jax.random.split(key, 3)
    batch = done.shape[1]
    rows = choose_goal_steps(step_key, done, anchor, strategy)
    columns = (jax.random.randint(column_key, (batch,), 0, batch) if strategy == "random"
               else jnp.arange(batch))
    relabelled = jax.random.uniform(coin_key, (batch,)) < k / (k + 1.0)
    goal = jnp.where(relabelled[:, None], achieved_next[rows, columns], desired)
    return goal, relabelled


def apply_goals(goals: Any, trajectory: Trajectory, achieved_next: Array, goal: Array,
                relabelled: Array) -> Trajectory:
    """Rows ``[K, B]`` of windows with column b's goal set to ``goal[b]`` where ``relabelled``:
    new goal in ``obs`` and ``next_obs``, rewards and terminations recomputed (module doc)."""
    batch = goal.shape[0]
    goal_t = jnp.broadcast_to(goal[None], achieved_next.shape)
    reward = goals.compute_reward(achieved_next, goal_t).astype(trajectory.reward.dtype)
    if goals.terminates_on_success:
        # Success on g' terminates; a stored termination that was not the original goal's
        # success (a pit, a crash) still terminates; one that was becomes a time-out for g'.
        own_success = goals.success(achieved_next, goals.desired_goal(trajectory.obs))
        terminated = goals.success(achieved_next, goal_t) | (trajectory.terminated
                                                             & ~own_success)
        truncated = trajectory.done & ~terminated
    else:
        terminated, truncated = trajectory.terminated, trajectory.truncated
    keep = lambda new, old: jnp.where(  # noqa: E731
        relabelled.reshape((1, batch) + (1,) * (old.ndim - 2)), new, old)
    return trajectory.replace(
        obs=keep(goals.replace_goal(trajectory.obs, goal_t), trajectory.obs),
        next_obs=keep(goals.replace_goal(trajectory.next_obs, goal_t), trajectory.next_obs),
        reward=keep(reward, trajectory.reward), terminated=keep(terminated, trajectory.terminated),
        truncated=keep(truncated, trajectory.truncated))


def relabel_goals(goals: Any, trajectory: Trajectory, key: Array, anchor: int, strategy: str,
                  k: int) -> tuple[Trajectory, Array]:
    """Relabels every row of ``[S, B]`` windows: ``(trajectory, relabelled [B] bool)``."""
    achieved_next = goals.achieved_goal(trajectory.next_obs)
    goal, relabelled = choose_goals(goals, trajectory.done, achieved_next,
                                    goals.desired_goal(trajectory.obs[anchor]), key, anchor,
                                    strategy, k)
    return apply_goals(goals, trajectory, achieved_next, goal, relabelled), relabelled


def _changes_rewards(env: Any, goals: Any) -> bool:
    """A wrapper between ``env`` and its goal-conditioned core changes the rewards (it says so
    with ``changes_rewards``, as ``DelayedReward`` does)."""
    while env is not None and env is not goals:
        if getattr(type(env), "changes_rewards", False):
            return True
        env = getattr(env, "_env", None)
    return False


def her(strategy: str = "future", k: int = 4, env: Any = None, horizon: int | None = None
        ) -> Relabeller:
    """Hindsight experience replay (Andrychowicz et al. 2017): replayed windows relabelled with
    achieved goals (``--relabel her --relabel-option strategy=future k=4``).

    Args:
      strategy: ``final`` | ``future`` | ``episode`` | ``random``.
      k: relabelled replays per original (k ≥ 1; the paper's best is 4 for ``future``).
      env: the goal-conditioned environment (passed by the engine).
      horizon: the longest episode (passed by the engine): the context a window needs.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown HER strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"HER needs an integer k >= 1 (relabelled replays per original), "
                         f"got k={k!r}")
    if env is None:
        raise ValueError("her relabels goals and needs the environment (the engine passes it)")
    goals = goal_env(env)
    if goals is None:
        raise ValueError(f"her needs a goal-conditioned environment (jaxcredit.envs.goals: "
                         f"desired/achieved goals and compute_reward); "
                         f"{getattr(env, 'name', type(env).__name__)!r} has none")
    if _changes_rewards(env, goals):
        raise ValueError("her recomputes per-step goal rewards, but this environment's wrapper "
                         "changes its rewards (DelayedReward): the relabelled and the original "
                         "replays would follow different reward functions")
    if horizon is None or horizon < 1:
        raise ValueError("her needs the environment's episode length (max_steps_in_episode) to "
                         "know how much of an episode a replayed window must hold")
    # An episode has at most `horizon` steps, so `horizon - 1` steps on either side of the
    # trained step hold all of its episode.
    past = horizon - 1 if strategy == "episode" else 0
    future = 0 if strategy == "random" else horizon - 1

    def relabel(trajectory: Trajectory, key: Array) -> Trajectory:
        return relabel_goals(goals, trajectory, key, past, strategy, k)[0]

    def relabel_rows(rows: Trajectory, done: Array, achieved_next: Array, key: Array):
        goal, relabelled = choose_goals(goals, done, achieved_next,
                                        goals.desired_goal(rows.obs[0]), key, past, strategy, k)
        rows_achieved = achieved_next[past:past + rows.reward.shape[0]]
        return apply_goals(goals, rows, rows_achieved, goal, relabelled), relabelled

    return Relabeller(name="her", relabel=relabel, needs_replay=True, past=past, future=future,
                      relabel_rows=relabel_rows)

"""Goal navigation on an open grid: a goal-conditioned task beyond bit strings.

An agent on a ``size × size`` grid must reach a goal cell. Start and goal are drawn uniformly with
goal ≠ start; actions 0–3 move up / down / left / right (a move into the border leaves the agent
in place). The reward of a step is r = −[position' ≠ goal] (0 on the step that reaches the goal,
−1 otherwise), reaching the goal **terminates** the episode, and episodes are truncated after
``max_steps_in_episode`` steps (default ``2 · size``: about three times the mean start-to-goal
distance, and enough for the longest, 2·(size − 1)).

Observation: float32 ``concat(position, goal) / (size − 1)``, four numbers in [0, 1]. The task is
goal-conditioned (``jaxcredit.envs.goals``): the achieved goal is the (scaled) position, and
success compares cells (to half a cell, so float rounding never matters).

Why it is hard without relabelling: a uniformly random walk reaches a random goal within the time
limit with a probability that falls quickly with the grid size (docs/envs.md has Monte-Carlo
rates), so Q-learning sees almost only −1 rewards and learns no goal-directed values. The optimal
return from Manhattan distance d is −(d − 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv

Array = jax.Array
MOVES = jnp.array([[0, 1], [0, -1], [-1, 0], [1, 0]], jnp.int32)  # up, down, left, right


@struct.dataclass
class GoalGridState(environment.EnvState):
    position: Array  # [2] int32
    goal: Array  # [2] int32
    time: int


@struct.dataclass
class GoalGridParams(environment.EnvParams):
    max_steps_in_episode: int = 16


class GoalGrid(DiscreteEnv):
    """Goal-conditioned: reach a goal cell on an open ``size × size`` grid (module docstring)."""

    terminates_on_success = True
    goal_size = 2

    def __init__(self, size: int = 8):
        super().__init__()
        if int(size) < 2:
            raise ValueError(f"GoalGrid needs size >= 2 (got size={size}).")
        self.size = int(size)

    num_actions = 4
    obs_size = 4

    @property
    def default_params(self) -> GoalGridParams:
        return GoalGridParams(max_steps_in_episode=2 * self.size)

    # The goal-conditioned protocol (jaxcredit.envs.goals).
    def desired_goal(self, obs: Array) -> Array:
        return obs[..., 2:]

    def achieved_goal(self, obs: Array) -> Array:
        return obs[..., :2]

    def replace_goal(self, obs: Array, goal: Array) -> Array:
        return jnp.concatenate([obs[..., :2], goal.astype(obs.dtype)], axis=-1)

    def success(self, achieved: Array, desired: Array) -> Array:
        half_cell = 0.5 / (self.size - 1)
        return jnp.all(jnp.abs(achieved - desired) < half_cell, axis=-1)

    def compute_reward(self, achieved: Array, desired: Array) -> Array:
        return self.success(achieved, desired).astype(jnp.float32) - 1.0

    # gymnax API.
    def step_env(self, key, state, action, params):
        position = jnp.clip(state.position + MOVES[action], 0, self.size - 1)
        state = GoalGridState(position=position, goal=state.goal, time=state.time + 1)
        reached = jnp.all(position == state.goal)
        reward = reached.astype(jnp.float32) - 1.0
        return self.get_obs(state), state, reward, reached, {"is_success": reached}

    def reset_env(self, key, params):
        start_key, offset_key = jax.random.split(key)
        cells = self.size * self.size
        start = jax.random.randint(start_key, (), 0, cells)
        # goal = start + a uniform non-zero offset (mod cells): uniform over the other cells.
        goal = (start + jax.random.randint(offset_key, (), 1, cells)) % cells
        as_xy = lambda c: jnp.stack([c % self.size, c // self.size]).astype(jnp.int32)  # noqa: E731
        state = GoalGridState(position=as_xy(start), goal=as_xy(goal), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        return (jnp.concatenate([state.position, state.goal]).astype(jnp.float32)
                / (self.size - 1))

    def is_terminated(self, state, params) -> Array:
        return jnp.all(state.position == state.goal)

    @property
    def name(self) -> str:
        return f"GoalGrid-{self.size}"

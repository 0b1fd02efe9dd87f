"""T-Maze, passive and active: memory length and credit length varied separately.

Ni et al., "When Do Transformers Shine in RL? Decoupling Memory from Credit Assignment",
NeurIPS 2023 (arXiv 2307.03864); official environment ``twni2016/Memory-RL``, ``envs/tmaze.py``
(``TMazeClassicPassive``, ``TMazeClassicActive``), with the per-step penalty −1/L of its
registration (``penalty=-1.0 / length``, "Σ_t −1/T = −1"). Originally Bakker (2001).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv

Array = jax.Array

# The four moves (x, y): right, up, left, down, as the official action mapping.
MOVES = jnp.array([[1, 0], [0, 1], [-1, 0], [0, -1]], jnp.int32)


@struct.dataclass
class TMazeState(environment.EnvState):
    x: Array  # 0 is the oracle cell; the junction is at oracle_length + corridor_length
    y: Array  # 0 on the corridor; ±1 on the two arms at the junction
    goal: Array  # ±1, the arm that pays
    seen: Array  # the oracle cell was visited before this state (it shows the cue once)
    time: int


@struct.dataclass
class TMazeParams(environment.EnvParams):
    goal_reward: float = 1.0
    penalty: float = -0.1  # per step behind schedule; default_params sets −1 / corridor_length
    max_steps_in_episode: int = 11


class TMaze(DiscreteEnv):
    """A corridor of ``corridor_length`` cells between a cue and a junction; the cue says which
    arm pays at the end (Ni et al. 2023's T-Maze).

    * The maze: the oracle cell x = 0, the corridor, the junction at x = o + L (o =
      ``oracle_length``: 0 passive, 1 active) with the two arms y = ±1 beside it. Four moves
      (right, up, left, down); a move off the maze stays put.
    * Passive (``active=0``): the agent starts on the oracle cell and sees the cue at once.
      Active (``active=1``): it starts one cell to the right and must first step back to see it.
      The cue is shown on the first visit to the oracle cell only.
    * The episode lasts exactly L + 1 + 2o steps. The last step pays ``goal_reward`` if the
      agent is on the arm of the cue; every earlier step pays ``penalty`` (−1/L by default) while
      the agent is behind schedule, x < t − o, where t counts the steps taken.
    * Observation (the official ambiguous encoding, affinely mapped into [0, 1]):
      [at the junction column, (v + 1) / 2] with v the cue (±1) on the oracle cell's first
      visit, the arm (±1, 0 at the junction) on the junction column, and 0 elsewhere. Every
      corridor cell looks the same: the cue must be remembered for L steps.

    Memory length L in both; credit length 1 in the passive maze (the final turn), about L in
    the active one (the step back to the cue pays only at the end). Optimal return 1 (the cue's
    arm, never behind schedule); a memoryless policy that walks straight to the junction turns
    the right way half of the time: return 0.5.
    """

    num_actions = 4
    obs_size = 2

    def __init__(self, corridor_length: int = 10, active: int = 0):
        super().__init__()
        if int(corridor_length) < 1:
            raise ValueError(f"TMaze needs corridor_length >= 1, got {corridor_length}")
        if int(active) not in (0, 1):
            raise ValueError(f"TMaze active must be 0 (passive) or 1 (active), got {active}")
        self.corridor_length, self.oracle_length = int(corridor_length), int(active)

    @property
    def name(self) -> str:
        return "TMaze-active" if self.oracle_length else "TMaze-passive"

    @property
    def episode_length(self) -> int:
        return self.corridor_length + 1 + 2 * self.oracle_length

    @property
    def default_params(self) -> TMazeParams:
        return TMazeParams(penalty=-1.0 / self.corridor_length,
                           max_steps_in_episode=self.episode_length)

    def _on_maze(self, x: Array, y: Array) -> Array:
        junction = self.oracle_length + self.corridor_length
        corridor = (y == 0) & (x >= 0) & (x <= junction)
        return corridor | ((x == junction) & (jnp.abs(y) == 1))

    def step_env(self, key, state, action, params):
        move = MOVES[action]
        x, y = state.x + move[0], state.y + move[1]
        valid = self._on_maze(x, y)
        x, y = jnp.where(valid, x, state.x), jnp.where(valid, y, state.y)
        time = state.time + 1
        done = time >= self.episode_length
        behind = x < time - self.oracle_length
        reward = jnp.where(done, params.goal_reward * (y == state.goal),
                           params.penalty * behind)
        new = TMazeState(x=x.astype(jnp.int32), y=y.astype(jnp.int32), goal=state.goal,
                         seen=state.seen | (state.x == 0), time=time)
        return self.get_obs(new), new, jnp.asarray(reward, jnp.float32), done, {}

    def reset_env(self, key, params):
        goal = jnp.where(jax.random.bernoulli(key), 1, -1).astype(jnp.int32)
        state = TMazeState(x=jnp.int32(self.oracle_length), y=jnp.int32(0), goal=goal,
                           seen=jnp.bool_(False), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        # The cue shows on the oracle cell's first visit only; after it, that cell looks like
        # the corridor.
        junction = self.oracle_length + self.corridor_length
        cue = (state.x == 0) & ~state.seen
        value = jnp.where(cue, state.goal, jnp.where(state.x == junction, state.y, 0))
        return jnp.stack([(state.x == junction).astype(jnp.float32),
                          (value.astype(jnp.float32) + 1.0) / 2.0])

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The episode ended on the cue's arm: its last step paid the (positive) goal reward,
        where every earlier step pays a penalty ≤ 0 (``jaxcredit.envs.goals.success_fn``)."""
        del obs, next_obs
        return reward > 0

    def is_terminated(self, state, params) -> Array:
        return state.time >= self.episode_length

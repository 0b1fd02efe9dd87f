"""T-Maze, passive and active: memory length and credit length varied separately.

Ni et al., "When Do Transformers Shine in RL? Decoupling Memory from Credit Assignment",
NeurIPS 2023 (arXiv 2307.03864); official environment ``twni2016/Memory-RL``, ``envs/tmaze.py``
(``TMazeClassicPassive``, ``TMazeClassicActive``), with the per-step penalty −1/L of its
registration (``penalty=-1.0 / length``, "Σ_t −1/T = −1"). Originally Bakker (2001).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

Array = jax.Array

# Exact ground truth only where small: its [S, A, S] transition tensor and the DP over it grow
# with S², and S grows with L² (the time is part of the state).
MAX_TABULAR_STATES = 1024

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


class TMaze(TabularEnv, DiscreteEnv):
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

    Exact ground truth (:class:`~jaxcredit.envs.tabular_env.TabularEnv`): the state is (cell,
    cue, seen, time), (L + 2o + 3) · 2 · 2 · (episode length + 1) tabular states; the
    observation function aliases them (every corridor cell looks alike), so the exact values are
    those of a policy of the observation (a memoryless one) on the true states. Only where small:
    up to ``MAX_TABULAR_STATES`` states (passive L ≤ 13, active L ≤ 12); a longer maze has none.
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
        if self.num_states > MAX_TABULAR_STATES:  # no ground truth (has_ground_truth: False)
            self.tabular_mdp = self.state_index = None

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

    # ---- exact ground truth --------------------------------------------------------------

    @property
    def num_states(self) -> int:
        return self._num_cells * 2 * 2 * (self.episode_length + 1)

    @property
    def _num_cells(self) -> int:  # the corridor's cells and the two arms
        return self.oracle_length + self.corridor_length + 3

    def _cell(self, x, y):
        junction = self.oracle_length + self.corridor_length
        return jnp.where(y == 0, x, jnp.where(y > 0, junction + 1, junction + 2))

    def state_index(self, state) -> Array:
        """(cell, cue, seen, time) in row-major order."""
        cell = self._cell(state.x, state.y)
        index = (cell * 2 + (state.goal > 0).astype(jnp.int32)) * 2 + state.seen.astype(
            jnp.int32)
        return (index * (self.episode_length + 1) + jnp.minimum(state.time, self.episode_length)
                ).astype(jnp.int32)

    def _decode_all(self) -> dict:
        """Every tabular state's fields, in index order (plain numpy)."""
        junction = self.oracle_length + self.corridor_length
        cells = [(x, 0) for x in range(junction + 1)] + [(junction, 1), (junction, -1)]
        fields = {"x": [], "y": [], "goal": [], "seen": [], "time": []}
        for x, y in cells:
            for goal in (-1, 1):
                for seen in (0, 1):
                    for time in range(self.episode_length + 1):
                        for name, value in zip(fields, (x, y, goal, seen, time)):
                            fields[name].append(value)
        return {k: np.asarray(v, np.int32) for k, v in fields.items()}

    def _tabular_structure(self):
        """``(next index [S, A], goal reached [S, A], behind schedule [S, A])``, built in numpy
        from the maze's rules, independently of ``step_env``."""
        f, junction = self._decode_all(), self.oracle_length + self.corridor_length
        moves = np.asarray(MOVES)
        x = f["x"][:, None] + moves[None, :, 0]
        y = f["y"][:, None] + moves[None, :, 1]
        valid = ((y == 0) & (x >= 0) & (x <= junction)) | ((x == junction) & (np.abs(y) == 1))
        x, y = np.where(valid, x, f["x"][:, None]), np.where(valid, y, f["y"][:, None])
        time = np.minimum(f["time"] + 1, self.episode_length)[:, None] + 0 * x
        seen = (f["seen"] | (f["x"] == 0))[:, None] + 0 * x
        cell = np.where(y == 0, x, np.where(y > 0, junction + 1, junction + 2))
        goal = f["goal"][:, None] + 0 * x
        index = (((cell * 2 + (goal > 0)) * 2 + seen) * (self.episode_length + 1) + time)
        done = time >= self.episode_length
        reached = done & (y == goal)
        behind = ~done & (x < time - self.oracle_length)
        return index.astype(np.int32), reached, behind

    def _tabular_arrays(self, params=None) -> dict:
        params = self.default_params if params is None else params
        f = self._decode_all()
        index, reached, behind = self._tabular_structure()
        initial = ((f["x"] == self.oracle_length) & (f["y"] == 0) & (f["seen"] == 0)
                   & (f["time"] == 0)).astype(np.float32)
        states = TMazeState(x=jnp.asarray(f["x"]), y=jnp.asarray(f["y"]),
                            goal=jnp.asarray(f["goal"]), seen=jnp.asarray(f["seen"], bool),
                            time=jnp.asarray(f["time"]))
        return {
            "transition": jax.nn.one_hot(index, self.num_states, dtype=jnp.float32),
            "transition_reward": params.goal_reward * jnp.asarray(reached, jnp.float32)
            + params.penalty * jnp.asarray(behind, jnp.float32),
            "initial": jnp.asarray(initial / initial.sum()),
            "terminal": jnp.asarray(f["time"] >= self.episode_length),
            "observation": jax.vmap(self.get_obs)(states),
        }

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The episode ended on the cue's arm: its last step paid the (positive) goal reward,
        where every earlier step pays a penalty ≤ 0 (``jaxcredit.envs.goals.success_fn``)."""
        del obs, next_obs
        return reward > 0

    def is_terminated(self, state, params) -> Array:
        return state.time >= self.episode_length

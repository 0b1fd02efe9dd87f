"""The gridworlds of Velu et al. (2023), "Hindsight-DICE", as gymnax environments.

``GridWorld`` pays its rewards when they happen and has an exact tabular MDP.
``DelayedGridWorld`` is ``GridWorld`` under the :class:`~jaxcredit.envs.wrappers.DelayedReward`
protocol used in the paper (the whole episode return paid at the last step).

The paper's maps (``test_v4.txt`` 5×5 and ``test_v6.txt`` 10×10) were not available; the maps below
are reconstructions with the published tile semantics, designed so that the diamond is a detour
that pays off: the credit for the detour arrives, under delayed reward, only at the episode end.

Tiles: ``S`` start, ``G`` goal (ends the episode), ``#`` wall, ``F`` fire, ``*`` diamond,
``.`` floor.
Rewards of a step, by the cell it ends in: ``step_reward`` (−1) always; ``diamond_reward`` (+20)
on a diamond not yet collected (then consumed); ``fire_reward`` (−100) on fire, every time (fire
does not end the episode; bumping into a wall or the border while on fire burns again).
Actions: 0 up, 1 right, 2 down, 3 left; a move into a wall or the border stays in place.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv
from jaxcredit.envs.wrappers import DelayedReward

Array = jax.Array

MAPS = {
    1: (
        "S...G",
        ".#F#.",
        ".....",
        ".F#F.",
        "*....",
    ),
    2: (
        "S...#....*",
        ".##.#.FF..",
        "..F....#..",
        "#...##.#..",
        "*.F..F....",
        "..##...##.",
        ".F...#..F.",
        "...#.#F...",
        ".#.F...#.F",
        ".....*...G",
    ),
}
MAX_STEPS = {1: 50, 2: 100}
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])


@struct.dataclass
class GridWorldState(environment.EnvState):
    position: Array  # flat cell index row * width + col
    collected: Array  # [num_diamonds] bool
    time: int


@struct.dataclass
class GridWorldParams(environment.EnvParams):
    step_reward: float = -1.0
    diamond_reward: float = 20.0
    fire_reward: float = -100.0
    max_steps_in_episode: int = 50


class GridWorld(TabularEnv, DiscreteEnv):
    """H-DICE gridworld with immediate rewards (v1: 5×5, 50 steps; v2: 10×10, 100 steps).

    Observation (float32): one-hot agent cell ``[H·W]``, map of diamonds still present ``[H·W]``,
    and (if ``time_feature``) the elapsed fraction t / max_steps ``[1]`` — the paper's "flattened
    tile map with the agent marked, plus the time step", without the static tiles.

    Ground truth: the tabular state is (cell, collected-diamond mask); time is *not* part of it.
    The tabular MDP is the MDP without time limit, and its observation rows have the time feature
    at 0. For the time-limited returns use ``tabular.finite_horizon_values(mdp, pi, max_steps)``,
    which is exact for policies that ignore time.
    """

    def __init__(self, version: int = 1, time_feature: bool = True):
        super().__init__()
        if version not in MAPS:
            raise ValueError(f"GridWorld version must be one of {sorted(MAPS)} (got {version}).")
        self.version = int(version)
        self.time_feature = bool(time_feature)
        self.observation_of_state = not self.time_feature  # t / max_steps is not in the state
        grid = np.array([list(row) for row in MAPS[version]])
        self.height, self.width = grid.shape
        flat = grid.reshape(-1)
        self.num_cells = flat.size
        self.start = int(np.flatnonzero(flat == "S")[0])
        self.goal_cells = np.flatnonzero(flat == "G")
        self.diamond_cells = np.flatnonzero(flat == "*")
        self.num_diamonds = self.diamond_cells.size
        self._wall = flat == "#"
        self._fire = flat == "F"
        self._goal = flat == "G"
        self._next_cell = self._build_moves()

    def _build_moves(self) -> np.ndarray:
        """``[cells, 4]`` cell reached by each action (staying put at walls and borders)."""
        rows, cols = np.divmod(np.arange(self.num_cells), self.width)
        nxt = np.zeros((self.num_cells, 4), np.int32)
        for a, (dr, dc) in enumerate(_MOVES):
            r, c = rows + dr, cols + dc
            inside = (r >= 0) & (r < self.height) & (c >= 0) & (c < self.width)
            target = np.where(inside, np.clip(r, 0, self.height - 1) * self.width
                              + np.clip(c, 0, self.width - 1), np.arange(self.num_cells))
            nxt[:, a] = np.where(self._wall[target], np.arange(self.num_cells), target)
        return nxt

    num_actions = 4

    @property
    def obs_size(self) -> int:
        return 2 * self.num_cells + int(self.time_feature)

    @property
    def default_params(self) -> GridWorldParams:
        return GridWorldParams(max_steps_in_episode=MAX_STEPS[self.version])

    def _step_reward(self, cell, fresh_diamond, params) -> Array:
        return (params.step_reward + params.diamond_reward * fresh_diamond
                + params.fire_reward * jnp.asarray(self._fire)[cell])

    def step_env(self, key, state, action, params):
        cell = jnp.asarray(self._next_cell)[state.position, action]
        here = jnp.asarray(self.diamond_cells) == cell
        fresh = jnp.any(here & ~state.collected)
        reward = self._step_reward(cell, fresh, params)
        state = GridWorldState(position=cell, collected=state.collected | here,
                               time=state.time + 1)
        return (self.get_obs(state, params), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params):
        state = GridWorldState(position=jnp.int32(self.start),
                               collected=jnp.zeros(self.num_diamonds, bool), time=0)
        return self.get_obs(state, params), state

    def get_obs(self, state, params=None, key=None) -> Array:
        params = self.default_params if params is None else params
        agent = jax.nn.one_hot(state.position, self.num_cells, dtype=jnp.float32)
        diamonds = jnp.zeros(self.num_cells, jnp.float32).at[jnp.asarray(self.diamond_cells)].set(
            (~state.collected).astype(jnp.float32))
        parts = [agent, diamonds]
        if self.time_feature:
            parts.append(jnp.reshape(state.time / params.max_steps_in_episode, (1,)).astype(
                jnp.float32))
        return jnp.concatenate(parts)

    def is_terminated(self, state, params) -> Array:
        return jnp.asarray(self._goal)[state.position]

    @property
    def name(self) -> str:
        return f"GridWorld-v{self.version}"

    @property
    def num_states(self) -> int:
        return self.num_cells * 2**self.num_diamonds

    def state_index(self, state: GridWorldState) -> Array:
        """cell · 2^D + Σ_i collected_i · 2^i (time is not part of the tabular state)."""
        bits = jnp.sum(state.collected.astype(jnp.int32) * (2 ** jnp.arange(self.num_diamonds)),
                       axis=-1)
        return (state.position * 2**self.num_diamonds + bits).astype(jnp.int32)

    def _tabular_arrays(self, params: GridWorldParams) -> dict[str, Array]:
        masks = 2**self.num_diamonds
        num = self.num_states
        cell_of = np.arange(num) // masks
        mask_of = np.arange(num) % masks
        nxt_cell = self._next_cell[cell_of]  # [S, A]
        hit = nxt_cell[:, :, None] == self.diamond_cells[None, None, :]  # [S, A, D]
        bit = (2 ** np.arange(self.num_diamonds))[None, None, :]
        fresh = np.any(hit & ((mask_of[:, None, None] & bit) == 0), axis=-1)
        nxt_mask = mask_of[:, None] | np.sum(hit * bit, axis=-1)
        nxt_state = nxt_cell * masks + nxt_mask
        transition = np.zeros((num, 4, num), np.float32)
        np.put_along_axis(transition, nxt_state[:, :, None], 1.0, axis=-1)
        reward = self._step_reward(jnp.asarray(nxt_cell), jnp.asarray(fresh, jnp.float32), params)
        collected = ((mask_of[:, None] & (2 ** np.arange(self.num_diamonds))[None]) > 0)
        observation = jax.vmap(lambda p, c: self.get_obs(
            GridWorldState(position=p, collected=c, time=0), params))(
                jnp.asarray(cell_of), jnp.asarray(collected))
        return dict(
            transition=transition,
            transition_reward=reward,
            initial=jax.nn.one_hot(self.start * masks, num),
            terminal=self._goal[cell_of],
            observation=observation,
        )


class DelayedGridWorld(DelayedReward):
    """``GridWorld`` with the whole episode return paid at its last step (H-DICE protocol).

    Like every ``DelayedReward``, it hides the ground truth of the inner ``GridWorld``
    (``tabular_mdp``, ``state_index`` ...): per-step rewards, and Q-values conditioned on the
    past, are not those of the inner MDP. The expected episode return, hence J(θ) and its
    gradient, are the same under delayed reward: ``env.undelayed.tabular_mdp(params)`` gives them.
    """

    def __init__(self, version: int = 1, time_feature: bool = True):
        super().__init__(GridWorld(version=version, time_feature=time_feature))

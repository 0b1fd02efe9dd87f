"""Linear key-to-door (COCOA's "treasure conveyor") as a gymnax environment.

Meulemans, Schug, Kobayashi, Daw & Wayne, "Would I have gotten that reward? Long-term credit
assignment by counterfactual contribution analysis", NeurIPS 2023 (arXiv 2306.16803), and its
code ``seijin-kobayashi/cocoa`` (``ccoa/envs/treasure_conveyor.py`` with
``configs/canonical_conveyorlength_performance.py``).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

# Cell contents, in COCOA's order (the order fixes the observation's one-hot layout).
EMPTY, APPLE_LEFT, APPLE_RIGHT, DOOR, KEY, TREASURE = range(6)
NUM_CELL_TYPES = 6
# Actions, in COCOA's order.
PICK_KEY, PICK_LEFT, PICK_RIGHT, OPEN_DOOR = range(4)
NUM_ACTIONS = 4

PAPER_LENGTHS = (23, 43, 63, 83, 103)
# COCOA's rewards are written for L = 23 and scaled by 23 / L, so that the total distractor reward
# stays comparable across lengths.
REFERENCE_LENGTH = 23.0
APPLE_REWARDS_AT_REFERENCE = (0.1, 0.9)
TREASURE_REWARD_AT_REFERENCE = 0.2


@struct.dataclass
class KeyToDoorState(environment.EnvState):
    """Position on the track and the two bits that matter for the future.

    Attributes:
      position: int32 cell index; ``length`` means the episode is over.
      has_key: bool, the key was picked up at position 0.
      door_open: bool, the door was opened (with the key) at position ``length - 2``.
      time: int32 steps taken in this episode.
    """

    position: jax.Array
    has_key: jax.Array
    door_open: jax.Array
    time: jax.Array


@struct.dataclass
class KeyToDoorParams(environment.EnvParams):
    """Reward magnitudes and time limit (defaults come from ``KeyToDoor.default_params``).

    Attributes:
      apple_reward_low: first of the two equally likely apple rewards.
      apple_reward_high: second of the two equally likely apple rewards.
      treasure_reward: deterministic treasure reward.
      max_steps_in_episode: time limit; an episode that reaches it *before* the natural end is
        truncated (not terminated). The default equals ``length``, so it never truncates.
    """

    apple_reward_low: float = 0.1
    apple_reward_high: float = 0.9
    treasure_reward: float = 0.2
    max_steps_in_episode: int = 23


def fixed_layout(length: int, seed: int = 2022, apple_prob: float = 0.8) -> np.ndarray:
    """COCOA's fixed track: key, apples drawn once from ``seed``, door, treasure cell.

    Cells 1..L-3 are empty with probability ``1 - apple_prob`` and otherwise hold an apple on the
    left or on the right with equal probability, drawn with ``numpy.random.default_rng(seed)``
    exactly as the reference does. Cell L-2 is the door; cell L-1 is empty until the door is
    opened, then it holds the treasure (added by the dynamics, not stored here).

    Returns:
      int32 array [length] of cell types.
    """
    cells = np.zeros((length,), np.int32)
    rng = np.random.default_rng(seed)
    cells[1:-2] = rng.choice(
        a=[EMPTY, APPLE_LEFT, APPLE_RIGHT],
        size=(length - 3,),
        p=[1.0 - apple_prob, apple_prob / 2.0, apple_prob / 2.0],
    )
    cells[0] = KEY
    cells[-2] = DOOR
    cells[-1] = EMPTY
    return cells


class KeyToDoor(TabularEnv, DiscreteEnv):
    """COCOA's linear key-to-door task: pick a key at t = 0, open a door at t = L-2.

    The agent rides a conveyor of ``length`` cells; the position advances by one cell every step
    whatever the action, so every episode lasts exactly ``length`` steps. Actions (4): PICK_KEY,
    PICK_LEFT, PICK_RIGHT, OPEN_DOOR.

    * Cell 0 holds the key; PICK_KEY there takes it.
    * Cells 1..L-3 hold a fixed layout of distractor apples (see ``fixed_layout``; with COCOA's
      seed 2022 and apple probability 0.8 there are 16, 27, 44, 59, 77 apples for L = 23, 43,
      63, 83, 103). PICK_LEFT on a left apple or PICK_RIGHT on a right apple pays
      r ~ Uniform{0.1, 0.9} * 23 / L.
    * Cell L-2 is the door; OPEN_DOOR there with the key opens it.
    * Cell L-1 then shows the treasure, whose reward 0.2 * 23 / L is paid on the last step
      whatever the action.

    Observation (9 floats, COCOA's layout):
    ``[position / L, one-hot(cell, 6), one-hot(has_key, 2)]``
    with cell order (empty, apple-left, apple-right, door, key, treasure).

    Choices where the reference is silent or implementation-defined:

    * The terminal observation (position L, after the last step) is ``[1, 0, ..., 0]``: off the
      track, no cell and no inventory. (The reference reads past the end of its grid there.) This
      makes the terminal state a single tabular state.
    * Apples already picked are never seen again (the agent has moved on), so the state is just
      ``(position, has_key, door_open)``; the apple pick-ups are reported in ``info``.
    * ``termination`` is the natural end at step L; ``max_steps_in_episode`` (default L) only
      truncates when set below L.

    Returns and chance level (exact, from the tabular MDP, L = 23): optimal expected return
    16 * 0.5 + 0.2 = 8.2; a uniform random policy gets 16 * 0.5 / 4 + 0.2 / 16 = 2.0125 and
    collects the treasure with probability 1/4 * 1/4 = 1/16 (key at t = 0, door at t = L-2).

    Ground truth (:class:`~jaxcredit.envs.tabular_env.TabularEnv`): ``tabular_mdp(params)`` for
    every length (2L + 2 states: two per cell, three at the treasure cell, one terminal).
    Transitions are deterministic; apple rewards are a two-point distribution, given to the
    tabular MDP as mean and std; ``reward_law(params)`` (alias ``reward_distribution``) has the
    exact law. ``task_metrics(params, pi)``: ``key_rate`` and ``treasure_rate``. Index 1 (at the
    key cell already holding the key) is unreachable.
    """

    def __init__(self, length: int = 23, seed: int = 2022, apple_prob: float = 0.8):
        super().__init__()
        if int(length) != length or length < 4:
            raise ValueError(
                f"KeyToDoor length must be an integer >= 4 (the paper uses {PAPER_LENGTHS}), "
                f"got {length}"
            )
        if not 0.0 <= apple_prob <= 1.0:
            raise ValueError(f"KeyToDoor apple_prob must lie in [0, 1], got {apple_prob}")
        self.length = int(length)
        self.seed = int(seed)
        self.apple_prob = float(apple_prob)
        self.layout = fixed_layout(self.length, self.seed, self.apple_prob)
        # One extra cell past the end: type -1 one-hot encodes to zeros (terminal observation).
        self._cells = np.concatenate([self.layout, [-1]]).astype(np.int32)
        self.num_apples = int(np.sum((self.layout == APPLE_LEFT) | (self.layout == APPLE_RIGHT)))
        self.num_states = 2 * self.length + 2

    # ------------------------------------------------------------------ gymnax API

    num_actions = NUM_ACTIONS
    obs_size = 1 + NUM_CELL_TYPES + 2

    @property
    def default_params(self) -> KeyToDoorParams:
        scale = REFERENCE_LENGTH / self.length
        low, high = APPLE_REWARDS_AT_REFERENCE
        return KeyToDoorParams(
            apple_reward_low=low * scale,
            apple_reward_high=high * scale,
            treasure_reward=TREASURE_REWARD_AT_REFERENCE * scale,
            max_steps_in_episode=self.length,
        )

    def step_env(
        self,
        key: chex.PRNGKey,
        state: KeyToDoorState,
        action: int | jax.Array,
        params: KeyToDoorParams,
    ) -> tuple[jax.Array, KeyToDoorState, jax.Array, jax.Array, dict[str, Any]]:
        cell = self._cell(state)
        picked_apple = ((cell == APPLE_LEFT) & (action == PICK_LEFT)) | (
            (cell == APPLE_RIGHT) & (action == PICK_RIGHT)
        )
        took_key = (cell == KEY) & (action == PICK_KEY)
        opened = (cell == DOOR) & state.has_key & (action == OPEN_DOOR)
        got_treasure = cell == TREASURE

        apple_reward = jnp.where(
            jax.random.bernoulli(key, 0.5), params.apple_reward_high, params.apple_reward_low
        )
        reward = jnp.where(picked_apple, apple_reward, 0.0) + jnp.where(
            got_treasure, params.treasure_reward, 0.0
        )
        next_state = KeyToDoorState(
            position=state.position + 1,
            has_key=state.has_key | took_key,
            door_open=state.door_open | opened,
            time=state.time + 1,
        )
        terminated = self.is_terminated(next_state, params)
        info = {
            "discount": 1.0 - terminated.astype(jnp.float32),
            "apple_collected": picked_apple,
            "treasure_collected": got_treasure,
        }
        obs = self.get_obs(next_state, params)
        obs, next_state = self._apply_transition_gradient_policy(obs, next_state)
        return obs, next_state, reward.astype(jnp.float32), terminated, info

    def reset_env(
        self, key: chex.PRNGKey, params: KeyToDoorParams
    ) -> tuple[jax.Array, KeyToDoorState]:
        del key  # the start state is deterministic
        state = KeyToDoorState(
            position=jnp.int32(0),
            has_key=jnp.bool_(False),
            door_open=jnp.bool_(False),
            time=jnp.int32(0),
        )
        return self.get_obs(state, params), state

    def get_obs(self, state: KeyToDoorState, params=None, key=None) -> jax.Array:
        on_track = state.position < self.length
        position = jnp.reshape(state.position / self.length, (1,))
        cell = jax.nn.one_hot(self._cell(state), NUM_CELL_TYPES)
        keys = jax.nn.one_hot(state.has_key.astype(jnp.int32), 2) * on_track
        return jnp.concatenate([position, cell, keys]).astype(jnp.float32)

    def is_terminated(self, state: KeyToDoorState, params: KeyToDoorParams) -> jax.Array:
        return state.position >= self.length

    @property
    def name(self) -> str:
        return f"KeyToDoor-{self.length}"

    def state_space(self, params: KeyToDoorParams | None = None) -> spaces.Dict:
        return spaces.Dict(
            {
                "position": spaces.Discrete(self.length + 1),
                "has_key": spaces.Discrete(2),
                "door_open": spaces.Discrete(2),
                "time": spaces.Discrete(self.length + 1),
            }
        )

    # ------------------------------------------------------------------ tabular ground truth

    def state_index(self, state: KeyToDoorState) -> jax.Array:
        """Tabular index of a state (jittable, elementwise over batch dimensions).

        ``2 p + has_key`` for cells p < L-1; ``2 (L-1) + has_key + door_open`` at the treasure
        cell (no key / key, door shut / treasure); ``2 L + 1`` for the terminal state.
        """
        last = self.length - 1
        key_bit = state.has_key.astype(jnp.int32)
        on_track = 2 * state.position + key_bit
        at_treasure_cell = 2 * last + key_bit + state.door_open.astype(jnp.int32)
        index = jnp.where(state.position < last, on_track, at_treasure_cell)
        return jnp.where(state.position >= self.length, self.num_states - 1, index).astype(
            jnp.int32
        )

    def _tabular_arrays(self, params: KeyToDoorParams | None = None) -> dict[str, jax.Array]:
        """Arguments of ``jaxcredit.exact.tabular.make_tabular_mdp``, jittable in params.

        Built from the layout with plain numpy, independently of ``step_env``, so that tests can
        check one against the other. Apple rewards enter as mean and std of their two-point
        distribution (``reward_law`` has the exact one).
        """
        params = self.default_params if params is None else params
        next_index, apple, treasure = self._tabular_structure()
        low, high, treasure_reward = self._reward_scalars(params)
        apple_f = jnp.asarray(apple, jnp.float32)
        initial = np.zeros((self.num_states,), np.float32)
        initial[0] = 1.0
        terminal = np.zeros((self.num_states,), bool)
        terminal[-1] = True
        positions, has_key, door_open = self._decode_all()
        states = KeyToDoorState(
            position=jnp.asarray(positions, jnp.int32),
            has_key=jnp.asarray(has_key, bool),
            door_open=jnp.asarray(door_open, bool),
            time=jnp.asarray(positions, jnp.int32),
        )
        return {
            "transition": jax.nn.one_hot(next_index, self.num_states, dtype=jnp.float32),
            "transition_reward": apple_f * 0.5 * (low + high)
            + jnp.asarray(treasure, jnp.float32) * treasure_reward,
            "transition_reward_std": apple_f * 0.5 * jnp.abs(high - low),
            "initial": jnp.asarray(initial),
            "terminal": jnp.asarray(terminal),
            "observation": jax.vmap(self.get_obs)(states),
        }

    def reward_law(self, params: KeyToDoorParams | None = None) -> tuple[jax.Array, jax.Array]:
        """Exact reward law given (s, a): apples are two-point, not Gaussian.

        Returns:
          (values ``[4]`` = (0, apple low, apple high, treasure), probs ``[S, A, 4]``).
        """
        params = self.default_params if params is None else params
        _, apple, treasure = self._tabular_structure()
        low, high, treasure_reward = self._reward_scalars(params)
        apple_f = jnp.asarray(apple, jnp.float32)
        treasure_f = jnp.asarray(treasure, jnp.float32)
        values = jnp.stack([jnp.float32(0.0), low, high, treasure_reward])
        probs = jnp.stack(
            [1.0 - apple_f - treasure_f, 0.5 * apple_f, 0.5 * apple_f, treasure_f], axis=-1
        )
        return values, probs

    def reward_distribution(
        self, params: KeyToDoorParams | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Exact reward law given (s, a), for reward-conditioned hindsight (= ``reward_law``)."""
        return self.reward_law(params)

    def task_metrics(self, params: KeyToDoorParams | None, pi: jax.Array) -> dict[str, jax.Array]:
        """``key_rate`` = π(PICK_KEY | s0) and ``treasure_rate`` = P(treasure collected) under π.

        The position advances whatever the action, so the treasure is collected iff the key is
        taken at t = 0 and the door opened at t = L-2 (holding the key):
        P = π(PICK_KEY | s0) · π(OPEN_DOOR | door cell, key), exactly.
        """
        del params  # the rates depend only on the policy
        chex.assert_shape(pi, (self.num_states, NUM_ACTIONS))
        key_rate = pi[self._index_np(0, False, False), PICK_KEY]
        door_with_key = self._index_np(self.length - 2, True, False)
        return {"key_rate": key_rate, "treasure_rate": key_rate * pi[door_with_key, OPEN_DOOR]}

    # ------------------------------------------------------------------ helpers

    def _tabular_structure(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next index [S, A], apple picked [S, A], treasure paid [S, A]) by plain enumeration."""
        num_states = self.num_states
        positions, has_key, door_open = self._decode_all()
        next_index = np.full((num_states, NUM_ACTIONS), num_states - 1, np.int32)
        apple = np.zeros((num_states, NUM_ACTIONS), bool)
        treasure = np.zeros((num_states, NUM_ACTIONS), bool)
        for s in range(num_states - 1):
            p, k, o = positions[s], has_key[s], door_open[s]
            cell = TREASURE if (p == self.length - 1 and o) else self.layout[p]
            for a in range(NUM_ACTIONS):
                apple[s, a] = (cell, a) in ((APPLE_LEFT, PICK_LEFT), (APPLE_RIGHT, PICK_RIGHT))
                treasure[s, a] = cell == TREASURE
                k2 = k or (cell == KEY and a == PICK_KEY)
                o2 = o or (cell == DOOR and k and a == OPEN_DOOR)
                next_index[s, a] = self._index_np(p + 1, k2, o2)
        return next_index, apple, treasure

    @staticmethod
    def _reward_scalars(params: KeyToDoorParams) -> tuple[jax.Array, jax.Array, jax.Array]:
        return (
            jnp.asarray(params.apple_reward_low, jnp.float32),
            jnp.asarray(params.apple_reward_high, jnp.float32),
            jnp.asarray(params.treasure_reward, jnp.float32),
        )

    def _cell(self, state: KeyToDoorState) -> jax.Array:
        cell = jnp.asarray(self._cells)[jnp.clip(state.position, 0, self.length)]
        treasure_here = (state.position == self.length - 1) & state.door_open
        return jnp.where(treasure_here, TREASURE, cell)

    def _index_np(self, position: int, has_key: bool, door_open: bool) -> int:
        last = self.length - 1
        if position >= self.length:
            return self.num_states - 1
        if position < last:
            return 2 * position + int(has_key)
        return 2 * last + int(has_key) + int(door_open)

    def _decode_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position, has_key, door_open) of every tabular index, in index order."""
        last = self.length - 1
        rows = [(p, k, False) for p in range(last) for k in (False, True)]
        rows += [(last, False, False), (last, True, False), (last, True, True)]
        rows += [(self.length, False, False)]
        positions, has_key, door_open = (np.asarray(column) for column in zip(*rows, strict=True))
        return positions.astype(np.int32), has_key.astype(bool), door_open.astype(bool)


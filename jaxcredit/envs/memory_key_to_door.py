"""Key-to-door in three phases (TVT, CCA, Synthetic Returns): pick up a key, eat apples, open
the door.

Hung et al. 2019 (TVT), ``google-deepmind/deepmind-research`` ``tvt/pycolab/key_to_door.py``:
phase 1 a key the agent picks up by walking onto it (``KeySprite``: ``the_plot['has_key'] =
True``); phase 2 apples (``common.distractor_phase``); phase 3 a room with a door that the agent
can walk into only with the key (``PlayerSprite``: the door is impassable until ``has_key``),
which pays ``final_reward`` once and uses the key up (``DoorSprite``: "The key is lost after the
first time opening the door"). Presets of TVT, CCA (Mesnard et al. 2021) and SR (Raposo et al.
2021) and the grid shared with Visual Match: :mod:`jaxcredit.envs.three_phase`. Unlike
:class:`~jaxcredit.envs.key_to_door.KeyToDoor` (COCOA's linear track, tabular ground truth),
this one is a partially observed grid: the key is not shown once taken.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.three_phase import ThreePhase, ThreePhaseParams

Array = jax.Array

# Observation channels, each a size × size plane.
AGENT, APPLE, KEY, DOOR = range(4)
NUM_CHANNELS = 4


@struct.dataclass
class MemoryKeyToDoorState(environment.EnvState):
    position: Array  # [2] (row, column)
    key_cell: Array  # [2] where the key lies in phase 1
    has_key: Array  # bool: picked up in phase 1 and not yet used on the door
    door_open: Array  # bool: the door paid its reward
    apples: Array  # [size²] bool, phase 2
    last_eaten: Array  # [size²] int32: the distractor frame an apple was eaten, −1 if none
    apple_value: Array  # this episode's apple reward
    time: int


@struct.dataclass
class MemoryKeyToDoorParams(ThreePhaseParams):
    """The three-phase reward laws (:class:`~jaxcredit.envs.three_phase.ThreePhaseParams`)."""


class MemoryKeyToDoor(ThreePhase, DiscreteEnv):
    """Pick up a key in phase 1, eat apples in phase 2, open the door with it in phase 3 (TVT's
    pycolab key-to-door on one small grid; presets ``tvt``, ``cca``, ``sr``).

    * Grid ``size`` × ``size`` (5), four moves (north, south, west, east); a move into the
      border stays put.
    * Phase 1 (``explore_steps``): the key on a uniform cell of the top two rows, the agent on
      a uniform cell of the bottom two; walking onto the key takes it (it disappears).
    * Phase 2 (``distractor_steps``): the agent at the bottom centre, ``num_apples`` = 10
      apples on distinct cells; each apple eaten pays the episode's apple reward (low or high
      with probability 1/2, drawn at reset) and comes back ``respawn_every`` + 1 frames later
      (never when 0).
    * Phase 3 (``final_steps``): the agent at the bottom centre, the door in the top centre;
      the door blocks the agent without the key; walking into it with the key pays
      ``final_reward`` once.
    * Terminates after the last step of phase 3.
    * Observation: 4 planes [agent, apple, key, door] of size × size, flattened channel-major
      (100 floats at size 5); nothing else: whether the key was taken must be remembered.
    """

    obs_size: int

    def __init__(self, preset: str = "tvt", size: int = 5, explore_steps: int | None = None,
                 distractor_steps: int | None = None, final_steps: int | None = None,
                 num_apples: int = 10):
        super().__init__()
        self._init_phases(preset, size, explore_steps, distractor_steps, final_steps,
                          num_apples)
        self.obs_size = NUM_CHANNELS * self.size * self.size

    @property
    def name(self) -> str:
        return "MemoryKeyToDoor"

    @property
    def door_cell(self) -> Array:
        return jnp.array([0, self.size // 2], jnp.int32)

    @property
    def default_params(self) -> MemoryKeyToDoorParams:
        return self.preset_params(MemoryKeyToDoorParams)

    def step_env(self, key, state, action, params):
        phase = self.phase(state.time)
        position = self.move(state.position, action)
        # Phase 3: the door is a wall without the key.
        at_door = jnp.all(position == self.door_cell)
        blocked = (phase == 2) & at_door & ~state.has_key
        position = jnp.where(blocked, state.position, position)
        # Phase 1: the key.
        takes_key = (phase == 0) & jnp.all(position == state.key_cell) & ~state.has_key
        has_key = state.has_key | takes_key
        # Phase 2: the apples.
        frame = state.time - self.explore_steps
        apples, last_eaten, apple_reward = self.eat_apples(
            state.apples, state.last_eaten, position, frame, state.apple_value, params)
        in_distractor = phase == 1
        apples = jnp.where(in_distractor, apples, state.apples)
        last_eaten = jnp.where(in_distractor, last_eaten, state.last_eaten)
        # Phase 3: the door.
        opens = (phase == 2) & at_door & has_key
        reward = jnp.where(in_distractor, apple_reward, 0.0) + jnp.where(
            opens, params.final_reward, 0.0)
        has_key = has_key & ~opens
        # Teleport to the next phase's start after its last step.
        time = state.time + 1
        position = self.enter_phase(time, position)
        new = state.replace(position=position.astype(jnp.int32), has_key=has_key,
                            door_open=state.door_open | opens, apples=apples,
                            last_eaten=last_eaten, time=time)
        done = self.is_terminated(new, params)
        return self.get_obs(new), new, jnp.asarray(reward, jnp.float32), done, {}

    def reset_env(self, key, params):
        k_explore, k_apples = jax.random.split(key)
        key_cell, position = self.draw_explore(k_explore)
        apples, value = self.draw_apples(k_apples, params)
        state = MemoryKeyToDoorState(
            position=position, key_cell=key_cell, has_key=jnp.bool_(False),
            door_open=jnp.bool_(False), apples=apples,
            last_eaten=jnp.full(apples.shape, -1, jnp.int32), apple_value=value,
            time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        phase = self.phase(state.time)
        planes = jnp.zeros((NUM_CHANNELS, self.size * self.size), jnp.float32)
        planes = planes.at[AGENT].set(self.one_hot(state.position))
        planes = planes.at[APPLE].set(jnp.where(phase == 1, state.apples, False))
        key_shown = (phase == 0) & ~state.has_key
        planes = planes.at[KEY].set(self.one_hot(state.key_cell) * key_shown)
        planes = planes.at[DOOR].set(self.one_hot(self.door_cell) * (phase == 2))
        return planes.reshape(-1)

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The door opened: a positive reward on a step taken with the door in view (phase 3,
        where nothing else pays; ``jaxcredit.envs.goals.success_fn``)."""
        del next_obs
        door = obs.reshape(obs.shape[:-1] + (NUM_CHANNELS, -1))[..., DOOR, :].any(-1)
        return door & (reward > 0)

    def is_terminated(self, state, params) -> Array:
        return state.time >= self.episode_length

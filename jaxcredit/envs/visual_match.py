"""Visual Match in three phases (TVT): see a colour, eat apples, touch the square of that colour.

Hung et al. 2019 (TVT), ``google-deepmind/deepmind-research`` ``tvt/pycolab/
active_visual_match.py``: phase 1 shows one colour of ``SYMBOLS_TO_SHUFFLE = ['b', 'c', 'e']``
(three colours; the target drawn per episode, ``self._rng.choice``); phase 2 apples
(``common.distractor_phase``); phase 3 three coloured squares in a row (``REWARD_GRID``), each
an ``objects.ObjectSprite``: touching one makes *all* of them disappear, and only the target's
pays ``final_reward`` = 10. The colours keep their places from episode to episode (TVT shuffles
the colour map once per game, ``get_shuffled_symbol_colour_map``, not per episode). The passive
variant (the default here) follows Memory-RL's ``PASSIVE_EXPLORE_GRID``
(``twni2016/Memory-RL`` ``envs/key_to_door/visual_match.py``): the colour is in view for the
whole of phase 1. ``active=1``: the square lies on a uniform cell of the top two rows and shows
its colour only once the agent has walked onto it (TVT's active task shows it when the 5×5 crop
reaches it; jaxcredit's grid is fully observed, so the colour is hidden under a grey square
instead). Presets and the shared grid: :mod:`jaxcredit.envs.three_phase`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.three_phase import ThreePhase, ThreePhaseParams

Array = jax.Array

# Observation planes: agent, apple, grey (a square whose colour is hidden), then one per colour.
AGENT, APPLE, GREY = range(3)
FIRST_COLOUR = 3


@struct.dataclass
class VisualMatchState(environment.EnvState):
    position: Array  # [2] (row, column)
    colour: Array  # the phase-1 colour, 0..num_colours−1
    cue_cell: Array  # [2] the phase-1 square
    seen: Array  # bool: the colour has been shown (always, when passive)
    chosen: Array  # bool: a phase-3 square was touched (they all disappear)
    apples: Array  # [size²] bool
    last_eaten: Array  # [size²] int32
    apple_value: Array
    time: int


@struct.dataclass
class VisualMatchParams(ThreePhaseParams):
    """The three-phase reward laws (:class:`~jaxcredit.envs.three_phase.ThreePhaseParams`)."""


class VisualMatch(ThreePhase, DiscreteEnv):
    """Remember a colour shown in phase 1 across a phase of apples and touch the square of that
    colour in phase 3 (TVT's pycolab Visual Match on one small grid; presets ``tvt``, ``cca``,
    ``sr``).

    * Grid ``size`` × ``size`` (5), four moves (north, south, west, east); a move into the
      border stays put.
    * Phase 1 (``explore_steps``): a square of colour c, uniform over ``num_colours`` = 3.
      Passive (``active=0``): in the top centre, its colour shown throughout. Active
      (``active=1``): on a uniform cell of the top two rows, grey until the agent walks onto
      it, then coloured for the rest of the phase. The agent starts on a uniform cell of the
      bottom two rows.
    * Phase 2 (``distractor_steps``): apples as in
      :class:`~jaxcredit.envs.memory_key_to_door.MemoryKeyToDoor`.
    * Phase 3 (``final_steps``): the agent at the bottom centre; colour i's square on the top
      row at column round(i·(size − 1)/(num_colours − 1)) (columns 0, 2, 4 at size 5). The first
      square touched removes them all; it pays ``final_reward`` if its colour is c, else 0.
    * Terminates after the last step of phase 3.
    * Observation: 3 + num_colours planes [agent, apple, grey, colour 0, ...] of size × size,
      flattened channel-major (150 floats at size 5). The colour is in view during phase 1
      only.
    """

    obs_size: int

    def __init__(self, preset: str = "tvt", size: int = 5, explore_steps: int | None = None,
                 distractor_steps: int | None = None, final_steps: int | None = None,
                 num_apples: int = 10, num_colours: int = 3, active: int = 0):
        super().__init__()
        self._init_phases(preset, size, explore_steps, distractor_steps, final_steps,
                          num_apples)
        if not 2 <= int(num_colours) <= self.size:
            raise ValueError(f"num_colours must be in 2..size, got {num_colours}")
        if int(active) not in (0, 1):
            raise ValueError(f"active must be 0 (passive) or 1 (active), got {active}")
        self.num_colours, self.active = int(num_colours), int(active)
        self.obs_size = (FIRST_COLOUR + self.num_colours) * self.size * self.size

    @property
    def name(self) -> str:
        return "VisualMatch-active" if self.active else "VisualMatch"

    @property
    def square_cells(self) -> Array:
        """[num_colours, 2]: the phase-3 square of each colour."""
        columns = jnp.round(jnp.arange(self.num_colours) * (self.size - 1)
                            / (self.num_colours - 1)).astype(jnp.int32)
        return jnp.stack([jnp.zeros_like(columns), columns], axis=1)

    @property
    def default_params(self) -> VisualMatchParams:
        return self.preset_params(VisualMatchParams)

    def step_env(self, key, state, action, params):
        phase = self.phase(state.time)
        position = self.move(state.position, action)
        # Phase 1: the active square shows its colour once walked onto.
        seen = state.seen | ((phase == 0) & jnp.all(position == state.cue_cell))
        # Phase 2: the apples.
        frame = state.time - self.explore_steps
        apples, last_eaten, apple_reward = self.eat_apples(
            state.apples, state.last_eaten, position, frame, state.apple_value, params)
        in_distractor = phase == 1
        apples = jnp.where(in_distractor, apples, state.apples)
        last_eaten = jnp.where(in_distractor, last_eaten, state.last_eaten)
        # Phase 3: the first square touched.
        on_square = jnp.all(position[None, :] == self.square_cells, axis=1)
        touches = (phase == 2) & ~state.chosen & on_square.any()
        right = on_square[state.colour]
        reward = jnp.where(in_distractor, apple_reward, 0.0) + jnp.where(
            touches & right, params.final_reward, 0.0)
        time = state.time + 1
        position = self.enter_phase(time, position)
        new = state.replace(position=position.astype(jnp.int32), seen=seen,
                            chosen=state.chosen | touches, apples=apples,
                            last_eaten=last_eaten, time=time)
        done = self.is_terminated(new, params)
        return self.get_obs(new), new, jnp.asarray(reward, jnp.float32), done, {}

    def reset_env(self, key, params):
        k_colour, k_explore, k_apples = jax.random.split(key, 3)
        colour = jax.random.randint(k_colour, (), 0, self.num_colours)
        cue_cell, position = self.draw_explore(k_explore)
        if not self.active:
            cue_cell = jnp.array([0, self.size // 2], jnp.int32)
        apples, value = self.draw_apples(k_apples, params)
        state = VisualMatchState(
            position=position, colour=colour.astype(jnp.int32), cue_cell=cue_cell,
            seen=jnp.bool_(not self.active), chosen=jnp.bool_(False), apples=apples,
            last_eaten=jnp.full(apples.shape, -1, jnp.int32), apple_value=value,
            time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        phase = self.phase(state.time)
        cells = self.size * self.size
        planes = jnp.zeros((FIRST_COLOUR + self.num_colours, cells), jnp.float32)
        planes = planes.at[AGENT].set(self.one_hot(state.position))
        planes = planes.at[APPLE].set(jnp.where(phase == 1, state.apples, False))
        cue = self.one_hot(state.cue_cell) * (phase == 0)
        planes = planes.at[GREY].set(cue * ~state.seen)
        colours = jnp.arange(self.num_colours)
        shown = (colours == state.colour)[:, None] * (cue * state.seen)[None, :]
        squares = jax.vmap(self.one_hot)(self.square_cells) * ((phase == 2) & ~state.chosen)
        planes = planes.at[FIRST_COLOUR:].set(shown + squares)
        return planes.reshape(-1)

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The matching square touched: a positive reward on a step taken with no apple in
        view (an apple pays only on a step whose observation shows it, in phase 2; the cue
        phase pays nothing; ``jaxcredit.envs.goals.success_fn``)."""
        del next_obs
        planes = obs.reshape(obs.shape[:-1] + (FIRST_COLOUR + self.num_colours, -1))
        return ~planes[..., APPLE, :].any(-1) & (reward > 0)

    def is_terminated(self, state, params) -> Array:
        return state.time >= self.episode_length

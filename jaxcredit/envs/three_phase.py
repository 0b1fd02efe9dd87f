"""What the three-phase memory tasks share (:mod:`~jaxcredit.envs.visual_match`,
:mod:`~jaxcredit.envs.memory_key_to_door`): the grid, the moves, the phase clock, the apples of
the distractor phase and the presets of the papers.

The tasks are TVT's pycolab games (Hung et al., "Optimizing agent behavior over long time
scales by transporting value", Nature Communications 2019, arXiv 1810.06721; code
``google-deepmind/deepmind-research``, ``tvt/pycolab/``) on one small open grid instead of
pycolab's rooms seen through a 5×5 crop. From ``tvt/pycolab/common.py``: the four actions in
the order north, south, west, east (``ACTION_NORTH = 0`` ... ``ACTION_EAST = 3``); the phase
lengths 15 / 90 / 15 (``DEFAULT_MAX_FRAMES_PER_PHASE``); 10 apples (``num_apples=10`` of the
games); an eaten apple comes back once more than ``respawn_every`` = 20 frames have passed
(``DEFAULT_APPLE_RESPAWN_TIME``, ``AppleDrape.update``: ``frame > last_pickup + respawn_every``);
with ``fix_apple_reward_in_episode=True`` the apple reward is *one of the two* ends of
``apple_reward=(1, 10)``, drawn once per episode (``np.random.choice``), not a uniform draw.

Presets (``preset=``):

* ``"tvt"``: 15 / 90 / 15 steps, apple reward 1 or 10 (one per episode), respawn 20, final
  reward 10 (``tvt/pycolab/key_to_door.py``, ``active_visual_match.py``: ``final_reward=10.``).
* ``"cca"``: Mesnard et al. 2021 (arXiv 2011.09464), key-to-door as re-created in
  ``twni2016/pomdp-baselines`` (``envs/credit_assign/__init__.py``, ``KeytoDoor-HighVar-v0``;
  ``key_to_door.py``: ``MAX_FRAMES_PER_PHASE_CCA``): 15 / 30 / 15 steps, apple reward 1 or 10
  per episode (the high-variance task; set both apple rewards to 1 for LowVar), apples never
  respawn, final reward 1.
* ``"sr"``: Raposo et al. 2021 (arXiv 2102.12425), ``KeytoDoor-SR-v0`` of the same re-creation
  (``MAX_FRAMES_PER_PHASE_SR``): 15 / 60 / 10 steps, apple reward 1, respawn 20, final reward 5.

Choices of jaxcredit (also in docs/envs.md, "Choices where the papers are ambiguous"): one
``size`` × ``size`` open grid (default 5) for every phase, fully observed, so that the only
thing hidden is the past; a move into the border stays put; the phase-1 object lies in the top
two rows and the agent starts in the bottom two (TVT's upper and lower rooms, 10 cells each at
size 5); phases 2 and 3 start the agent at the bottom centre (TVT's distractor and reward grids);
the apples lie on ``num_apples`` distinct uniform cells other than that start (TVT draws 10 of
its 22 apple cells).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

Array = jax.Array

# The four moves (row, column), in TVT's action order: north, south, west, east.
MOVES = jnp.array([[-1, 0], [1, 0], [0, -1], [0, 1]], jnp.int32)
NORTH, SOUTH, WEST, EAST = range(4)

PRESETS = {
    "tvt": dict(explore_steps=15, distractor_steps=90, final_steps=15, apple_reward_low=1.0,
                apple_reward_high=10.0, respawn_every=20, final_reward=10.0),
    "cca": dict(explore_steps=15, distractor_steps=30, final_steps=15, apple_reward_low=1.0,
                apple_reward_high=10.0, respawn_every=0, final_reward=1.0),
    "sr": dict(explore_steps=15, distractor_steps=60, final_steps=10, apple_reward_low=1.0,
               apple_reward_high=1.0, respawn_every=20, final_reward=5.0),
}


@struct.dataclass
class ThreePhaseParams(environment.EnvParams):
    """The reward laws of a three-phase task (defaults: the ``tvt`` preset; a task's
    ``default_params`` sets its preset's)."""

    apple_reward_low: float = 1.0
    apple_reward_high: float = 10.0
    respawn_every: int = 20
    final_reward: float = 10.0
    max_steps_in_episode: int = 120


class ThreePhase:
    """Structure shared by the three-phase tasks: grid ``size``, phase lengths, ``num_apples``
    (a mixin next to :class:`~jaxcredit.envs.base.DiscreteEnv`; the module docstring says what
    comes from TVT and what is jaxcredit's choice)."""

    num_actions = 4

    def preset_params(self, params_class: type) -> ThreePhaseParams:
        """``params_class`` (a :class:`ThreePhaseParams`) with the preset's reward laws and
        the episode's length as its time limit."""
        values = PRESETS[self.preset]
        return params_class(
            apple_reward_low=values["apple_reward_low"],
            apple_reward_high=values["apple_reward_high"],
            respawn_every=values["respawn_every"], final_reward=values["final_reward"],
            max_steps_in_episode=self.episode_length)

    def _init_phases(self, preset, size, explore_steps, distractor_steps, final_steps,
                     num_apples):
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
        values = PRESETS[preset]
        self.preset, self.size = preset, int(size)
        if self.size < 3:
            raise ValueError(f"size must be >= 3, got {size}")
        lengths = [values[k] if v is None else int(v) for k, v in
                   (("explore_steps", explore_steps), ("distractor_steps", distractor_steps),
                    ("final_steps", final_steps))]
        if min(lengths) < 1:
            raise ValueError(f"every phase needs >= 1 step, got {lengths}")
        self.explore_steps, self.distractor_steps, self.final_steps = lengths
        self.num_apples = int(num_apples)
        if not 0 <= self.num_apples <= self.size * self.size - 1:
            raise ValueError(f"num_apples must be in 0..size²−1, got {num_apples}")

    @property
    def episode_length(self) -> int:
        return self.explore_steps + self.distractor_steps + self.final_steps

    def enter_phase(self, time: Array, position: Array) -> Array:
        """The agent's cell at ``time``: the next phase's start cell (the bottom centre) when a
        phase has just ended, else ``position``."""
        teleport = (time == self.explore_steps) | (
            time == self.explore_steps + self.distractor_steps)
        return jnp.where(teleport, self.start_cell, position)

    @property
    def start_cell(self) -> Array:
        """Where phases 2 and 3 start: the bottom centre."""
        return jnp.array([self.size - 1, self.size // 2], jnp.int32)

    def phase(self, time) -> Array:
        """0, 1, 2 for the explore, distractor and final phases of the step taken at ``time``
        (the last observation, at time = episode_length, counts as the final phase)."""
        return ((time >= self.explore_steps).astype(jnp.int32)
                + (time >= self.explore_steps + self.distractor_steps).astype(jnp.int32))

    def move(self, position: Array, action) -> Array:
        return jnp.clip(position + MOVES[action], 0, self.size - 1)

    def one_hot(self, position: Array) -> Array:
        return (jnp.arange(self.size * self.size) == position[0] * self.size
                + position[1]).astype(jnp.float32)

    def cell_index(self, position: Array) -> Array:
        return position[0] * self.size + position[1]

    def draw_explore(self, key) -> tuple[Array, Array]:
        """The phase-1 object (top two rows) and the agent's start (bottom two rows)."""
        k_object, k_agent = jax.random.split(key)
        top = jax.random.randint(k_object, (), 0, 2 * self.size)
        bottom = jax.random.randint(k_agent, (), 0, 2 * self.size)
        object_cell = jnp.stack([top // self.size, top % self.size]).astype(jnp.int32)
        agent = jnp.stack([self.size - 2 + bottom // self.size,
                           bottom % self.size]).astype(jnp.int32)
        return object_cell, agent

    def draw_apples(self, key, params) -> tuple[Array, Array]:
        """``num_apples`` distinct cells other than the phase-2 start, and the episode's apple
        reward: low or high with probability 1/2 each (TVT's ``np.random.choice``)."""
        k_cells, k_reward = jax.random.split(key)
        cells = self.size * self.size
        scores = jax.random.uniform(k_cells, (cells,))
        scores = scores.at[self.cell_index(self.start_cell)].set(2.0)  # never chosen
        rank = jnp.argsort(jnp.argsort(scores))
        apples = rank < self.num_apples
        value = jnp.where(jax.random.bernoulli(k_reward), params.apple_reward_high,
                          params.apple_reward_low)
        return apples, jnp.asarray(value, jnp.float32)

    def eat_apples(self, apples, last_eaten, position, frame, value, params):
        """One distractor step after the move: eat the apple under the agent, then respawn
        those eaten more than ``respawn_every`` frames ago (``AppleDrape.update``; never when
        ``respawn_every`` = 0). Returns (apples, last_eaten, reward)."""
        here = jnp.arange(apples.shape[0]) == self.cell_index(position)
        eaten = here & apples
        reward = jnp.where(eaten.any(), value, 0.0)
        apples = apples & ~eaten
        last_eaten = jnp.where(eaten, frame, last_eaten)
        back = (params.respawn_every > 0) & (last_eaten >= 0) & (
            frame > last_eaten + params.respawn_every)
        apples = apples | back
        last_eaten = jnp.where(back, -1, last_eaten)
        return apples, last_eaten, reward

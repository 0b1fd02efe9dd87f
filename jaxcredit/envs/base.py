"""The gymnax methods every jaxcredit environment shares: :class:`DiscreteEnv`.

jaxcredit's environments all have discrete actions, a flat observation with entries in [0, 1]
and a time limit that only cuts an episode its own dynamics have not ended. A subclass of
:class:`DiscreteEnv` writes what is its own (``default_params``, ``step_env``, ``reset_env``,
``get_obs``, ``is_terminated``, ``num_actions`` and ``obs_size``, as attributes or properties)
and gets the rest from here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces


class DiscreteEnv(environment.Environment):
    """A gymnax environment with ``num_actions`` discrete actions and a ``[obs_size]``
    observation in [0, 1] (module docstring). ``name`` is gymnax's (the class name) unless a
    subclass names its variant."""

    num_actions: int
    obs_size: int

    def recommended_settings(self, params) -> dict:
        """Training settings that learn this task, by their flat ``TrainConfig`` / ``Hparams``
        names (``{"lr": 3e-3, "num_steps": 31, ...}``). ``jaxcredit train`` and ``sweep`` apply
        them where the user sets no flag and say so; a config built in Python never reads
        them. None here: the engine's defaults."""
        del params
        return {}

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.obs_size,), jnp.float32)

    def is_truncated(self, state, params) -> jax.Array:
        """The time limit reached on a step that did not end the episode by itself: a time-out
        that coincides with a true terminal is a termination, not a truncation (docs/design.md,
        "Termination is not truncation")."""
        return (state.time >= params.max_steps_in_episode) & ~self.is_terminated(state, params)

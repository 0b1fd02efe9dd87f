"""XLand-MiniGrid's grid worlds behind gymnax's API: ``XMiniGrid`` (default ``MiniGrid-MemoryS8``).

XLand-MiniGrid (Nikulin et al., NeurIPS 2024 Datasets & Benchmarks, arXiv 2312.12044;
``dunnolab/xland-minigrid``, pip ``xminigrid``) re-implements MiniGrid in JAX. Its memory task,
``MiniGrid-Memory{S8,S16,S32,S64,S128}`` (``xminigrid/envs/minigrid/memory.py``), is MiniGrid's
T-maze with objects: a ball or a key shown in a side room at the start, a corridor of
``width − 6`` cells, and at its end a ball and a key on the two arms; walking onto the one that
matches the first pays ``1 − 0.9 · t / max_steps`` and ends the episode, the other ends it with
0; ``max_steps = 5 · width²``. The agent sees a 3 × 3 egocentric window.

Why this suite. Of the JAX memory suites the field maintains, it is the one that installs with
jaxcredit's JAX range without changing it and has a memory task (docs/envs.md, "External
suites"): popgym-arcade's ``stable-gymnax`` dependency overwrites gymnax 1.0's files with an
older fork, and navix has no memory task.

The adapter. xminigrid's ``reset(params, key)`` / ``step(params, timestep, action)`` keep the
RNG key in the state and report ``StepType.LAST`` with ``discount`` 0 on a true terminal; here
``step_env`` returns that as ``terminated``, the time limit is gymnax's truncation, and gymnax's
``step`` adds the auto-reset and ``info["final_observation"]``. The observation is the window's
(tile, colour) pairs one-hot encoded and flattened, ``view² · (13 + 12)`` entries in {0, 1}.
Only the ``MiniGrid-*`` ids are accepted: the ``XLand-MiniGrid-*`` ones need a ruleset download.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

Array = jax.Array
NUM_TILES, NUM_COLORS = 13, 12  # xminigrid.core.constants


@struct.dataclass
class XMiniGridState(environment.EnvState):
    timestep: Any  # xminigrid's TimeStep (its state, step type, reward, discount, observation)
    time: int


@struct.dataclass
class XMiniGridParams(environment.EnvParams):
    max_steps_in_episode: int = 320


class XMiniGrid(environment.Environment):
    """An XLand-MiniGrid ``MiniGrid-*`` environment with gymnax's six-value step (module
    docstring). Success is a positive reward (the memory task pays only the matching object)."""

    def __init__(self, env_id: str = "MiniGrid-MemoryS8"):
        super().__init__()
        try:
            import xminigrid  # noqa: PLC0415 (an optional dependency, loaded where used)
        except ImportError:
            raise ValueError("XMiniGrid needs the xminigrid package: pip install "
                             "'jaxcredit[memory]'") from None
        known = [name for name in xminigrid.registered_environments()
                 if name.startswith("MiniGrid-")]
        if env_id not in known:
            raise ValueError(f"unknown xminigrid env_id {env_id!r}; choose one of "
                             f"{', '.join(known)}")
        self.env_id = env_id
        self._env, self._params = xminigrid.make(env_id)
        self._num_actions = int(self._env.num_actions(self._params))
        view = int(self._params.view_size)
        self.obs_size = view * view * (NUM_TILES + NUM_COLORS)

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def name(self) -> str:
        return f"XMiniGrid-{self.env_id}"

    @property
    def default_params(self) -> XMiniGridParams:
        return XMiniGridParams(max_steps_in_episode=int(self._params.max_steps))

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.obs_size,), jnp.float32)

    def _observe(self, timestep) -> Array:
        window = timestep.observation.astype(jnp.int32)
        tiles = jax.nn.one_hot(window[..., 0], NUM_TILES)
        colours = jax.nn.one_hot(window[..., 1], NUM_COLORS)
        return jnp.concatenate([tiles, colours], axis=-1).reshape(-1)

    def get_obs(self, state, params=None, key=None) -> Array:
        return self._observe(state.timestep)

    def reset_env(self, key, params):
        timestep = self._env.reset(self._params, key)
        return self._observe(timestep), XMiniGridState(timestep=timestep, time=0)

    def step_env(self, key, state, action, params):
        del key  # xminigrid draws from the key it keeps in its state
        timestep = self._env.step(self._params, state.timestep, action)
        new = XMiniGridState(timestep=timestep, time=state.time + 1)
        return (self._observe(timestep), new, timestep.reward.astype(jnp.float32),
                self.is_terminated(new, params), {})

    def is_terminated(self, state, params) -> Array:
        return state.timestep.last() & (state.timestep.discount == 0.0)

    def is_truncated(self, state, params) -> Array:
        return (state.time >= params.max_steps_in_episode) & ~self.is_terminated(state, params)

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        del obs, next_obs
        return reward > 0

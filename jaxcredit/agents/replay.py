"""Replay for the off-policy engine: a flashbax trajectory buffer held in the train state.

Each of the N environments writes its own time axis (``add_batch_size = N``), so a sampled
window of S consecutive steps always comes from one environment, in the order it was played, and
never straddles the buffer's write position (flashbax samples only whole valid sequences).
Windows may contain episode ends: every consumer (the n-step target, HER's goal choice) cuts at
them. Because the buffer is a leaf of the train state, checkpoints include it and a resumed run
replays exactly what the uninterrupted one would have.

What is stored per step is what a Q-learning target and relabelling need: ``obs``, ``action``,
``reward``, ``terminated``, ``truncated`` and ``next_obs`` (s'_{t+1}: the final observation when
the episode ended at t, since the auto-reset observation belongs to the next episode), and on
goal-conditioned environments ``achieved_goal`` (the goal achieved at s'_{t+1}).

Sampling. flashbax stores and adds; the windows are drawn here by the same rule as flashbax's
``sample`` (uniform over the environment streams and over the valid start positions, which never
straddle the write position; tested equal to it for the same key), because a learner that trains
on a few rows of a long window should not gather the whole window's observations: HER reads
only the episode ends and achieved goals of the window (``gather`` with ``fields``) and the full
steps of the rows it trains on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import flashbax as fbx
import jax
import jax.numpy as jnp
from flax import struct

from jaxcredit.types import Trajectory

Array = jax.Array


@struct.dataclass
class Step:
    """One stored transition (leaves ``[...]`` per step)."""

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    next_obs: Array
    achieved_goal: Optional[Array] = None


@dataclasses.dataclass(frozen=True)
class Replay:
    """A trajectory buffer of ``capacity`` transitions over ``num_envs`` environment streams.

    Attributes:
      num_envs: N, streams written side by side.
      steps_per_env: time-axis length per stream (capacity // N).
      window: S, steps per sampled window.
      batch_size: B, windows per sample.
      buffer: the flashbax ``TrajectoryBuffer``.
    """

    num_envs: int
    steps_per_env: int
    window: int
    batch_size: int
    buffer: Any

    def init(self, example: Step) -> Any:
        """An empty buffer state for steps shaped like ``example`` (one step, no batch axis)."""
        return self.buffer.init(example)

    def add(self, state: Any, steps: Step) -> Any:
        """Appends time-major ``[T, N]`` steps (flashbax is batch-major, hence the swap)."""
        return self.buffer.add(state, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps))

    def can_sample(self, state: Any) -> Array:
        return self.buffer.can_sample(state)

    def sample_indices(self, state: Any, key: Array) -> tuple[Array, Array]:
        """B windows: ``(stream [B], times [B, S])``, flashbax's sampling rule (module doc)."""
        max_time = jnp.where(state.is_full, self.steps_per_env, state.current_index)
        head = jnp.where(state.is_full, state.current_index, 0)
        max_start = max_time - self.window
        num_valid = jnp.where(max_start >= 0, max_start + 1, 0)
        key, item_key = jax.random.split(key)  # flashbax's order of keys
        _, stream_key = jax.random.split(key)
        start = (head + jax.random.randint(item_key, (self.batch_size,), 0, num_valid)) \
            % self.steps_per_env
        stream = jax.random.randint(stream_key, (self.batch_size,), 0, self.num_envs)
        times = (start[:, None] + jnp.arange(self.window)) % self.steps_per_env
        return stream, times

    def gather(self, state: Any, stream: Array, times: Array) -> Step:
        """The steps at ``(stream [B], times [B, K])``, time-major ``[K, B]``."""
        return jax.tree.map(lambda x: jnp.swapaxes(x[stream[:, None], times], 0, 1),
                            state.experience)

    def gather_fields(self, state: Any, stream: Array, times: Array,
                      fields: Sequence[str]) -> dict[str, Array]:
        """Only ``fields`` of the steps at ``(stream, times)``, time-major ``[K, B]``."""
        return {name: jnp.swapaxes(getattr(state.experience, name)[stream[:, None], times], 0, 1)
                for name in fields}

    def sample(self, state: Any, key: Array) -> Trajectory:
        """B windows of S steps as a time-major ``[S, B]`` Trajectory (no values or logits)."""
        return as_trajectory(self.gather(state, *self.sample_indices(state, key)))


def as_trajectory(steps: Step) -> Trajectory:
    """Stored steps as a Trajectory (zeros for the values, log-probabilities and logits)."""
    zeros = jnp.zeros_like(steps.reward)
    return Trajectory(obs=steps.obs, action=steps.action, reward=steps.reward,
                      terminated=steps.terminated, truncated=steps.truncated, value=zeros,
                      next_value=zeros, log_prob=zeros, logits=zeros[..., None],
                      next_obs=steps.next_obs)


def make_replay(capacity: int, num_envs: int, window: int, batch_size: int) -> Replay:
    """The buffer for ``capacity`` transitions; raises ValueError if a window cannot fit."""
    steps_per_env = capacity // num_envs
    if steps_per_env < window:
        raise ValueError(f"buffer_size={capacity} gives {steps_per_env} steps per environment, "
                         f"fewer than one sampled window of {window} steps (raise buffer_size to "
                         f"at least {window * num_envs} or use fewer environments)")
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=num_envs, sample_batch_size=batch_size, sample_sequence_length=window,
        period=1, min_length_time_axis=window, max_length_time_axis=steps_per_env)
    return Replay(num_envs=num_envs, steps_per_env=steps_per_env, window=window,
                  batch_size=batch_size, buffer=buffer)

"""Whole episodes for a sequence model: per-environment episode assembly and a lessons buffer.

A return-decomposition model (RUDDER) is trained on *whole* episodes, but the engine sees rollout
windows of T steps that cut episodes anywhere. :class:`EpisodeMemory` assembles each
environment's running episode step by step (``[N, H]`` arrays, H the longest episode kept) and,
when the episode ends, moves it into a buffer of B finished episodes.

The buffer is a *lessons buffer* in RUDDER's sense (Arjona-Medina et al. 2019, the Atari
version): it should keep the episodes the model has not learned yet, so that rare returns (the
first successes) are not forgotten while common ones stream past. Rule used here:

* every finished episode enters the buffer, with priority = its squared return-prediction error
  measured while the episode was played (free: the model runs over the stream anyway);
* it replaces the slot with the lowest priority (empty slots first);
* every priority decays by ``priority_decay`` per update, so that an old episode with a large
  error it can never lose (irreducible noise, an outdated policy) leaves the buffer eventually.

Fitting samples episodes uniformly from the filled slots (no importance weights: the buffer's
content is prioritised, the draw is not). Episodes longer than H are not stored (they are still
redistributed: the model runs over the stream, not over stored episodes); they are counted.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array


@struct.dataclass
class Episodes:
    """A batch of stored episodes, padded to H steps (batch-major: ``[B, H, ...]``).

    ``reward[b, t]`` is the environment's reward of step t; steps ``t >= length[b]`` are padding.
    """

    obs: Array
    action: Array
    reward: Array
    length: Array

    @property
    def mask(self) -> Array:
        """``[B, H]`` True on the episode's steps, False on padding (which may hold stale data)."""
        return jnp.arange(self.action.shape[1])[None, :] < self.length[:, None]

    @property
    def returns(self) -> Array:
        """``[B]`` undiscounted return of each episode."""
        return jnp.sum(jnp.where(self.mask, self.reward, 0.0), axis=1)


@struct.dataclass
class EpisodeMemory:
    """The running episodes of N environments and a lessons buffer of B finished ones.

    Attributes:
      running: ``[N, H]`` the episode each environment is in (its first ``running.length`` steps).
      lessons: ``[B, H]`` finished episodes.
      priority: ``[B]`` eviction priority (−inf for an empty slot).
      stored: int32 episodes stored so far; ``too_long``: int32 episodes longer than H (skipped).
    """

    running: Episodes
    lessons: Episodes
    priority: Array
    stored: Array
    too_long: Array


def _empty(rows: int, horizon: int, obs_shape: tuple, obs_dtype) -> Episodes:
    return Episodes(obs=jnp.zeros((rows, horizon) + obs_shape, obs_dtype),
                    action=jnp.zeros((rows, horizon), jnp.int32),
                    reward=jnp.zeros((rows, horizon), jnp.float32),
                    length=jnp.zeros((rows,), jnp.int32))


def init_memory(num_envs: int, capacity: int, horizon: int, obs_shape: tuple,
                obs_dtype: Any = jnp.float32) -> EpisodeMemory:
    """An empty memory for ``num_envs`` environments, ``capacity`` lessons of ``horizon`` steps."""
    if capacity < num_envs:
        raise ValueError(f"the lessons buffer holds {capacity} episodes, fewer than the "
                         f"{num_envs} environments that can finish an episode at the same step")
    return EpisodeMemory(running=_empty(num_envs, horizon, obs_shape, obs_dtype),
                         lessons=_empty(capacity, horizon, obs_shape, obs_dtype),
                         priority=jnp.full((capacity,), -jnp.inf, jnp.float32),
                         stored=jnp.zeros((), jnp.int32), too_long=jnp.zeros((), jnp.int32))


def record_step(memory: EpisodeMemory, obs: Array, action: Array, reward: Array, done: Array,
                error: Array) -> EpisodeMemory:
    """Appends one step of every environment; stores the episodes that end at it.

    Args:
      memory: the memory before the step.
      obs, action, reward: ``[N, ...]`` s_t, a_t and r_t of every environment.
      done: ``[N]`` bool, the episode ended at this step (terminated or truncated).
      error: ``[N]`` squared return-prediction error of the episodes that end here (their
        priority; ignored elsewhere).
    """
    running = memory.running
    num_envs, horizon = running.action.shape
    rows = jnp.arange(num_envs)
    at = running.length  # writes past H are dropped: such an episode is too long to keep
    running = running.replace(
        obs=running.obs.at[rows, at].set(obs, mode="drop"),
        action=running.action.at[rows, at].set(action, mode="drop"),
        reward=running.reward.at[rows, at].set(reward, mode="drop"),
        length=at + 1)
    fits = running.length <= horizon
    keep = jnp.logical_and(done, fits)
    # The k-th kept episode of this step goes to the k-th lowest-priority slot.
    capacity = memory.priority.shape[0]
    lowest = jax.lax.top_k(-memory.priority, num_envs)[1]
    rank = jnp.cumsum(keep) - 1
    slot = jnp.where(keep, lowest[jnp.clip(rank, 0, num_envs - 1)], capacity)  # capacity: drop
    lessons = jax.tree.map(lambda buf, new: buf.at[slot].set(new, mode="drop"),
                           memory.lessons, running)
    priority = memory.priority.at[slot].set(error.astype(jnp.float32), mode="drop")
    running = running.replace(length=jnp.where(done, 0, running.length))
    return EpisodeMemory(running=running, lessons=lessons, priority=priority,
                         stored=memory.stored + keep.sum(),
                         too_long=memory.too_long + jnp.logical_and(done, ~fits).sum())


def decay(memory: EpisodeMemory, factor: Array) -> EpisodeMemory:
    """Multiplies every stored episode's priority by ``factor`` (empty slots stay −inf)."""
    return memory.replace(priority=memory.priority * factor)


def sample(memory: EpisodeMemory, key: Array, size: int) -> tuple[Episodes, Array]:
    """``size`` episodes drawn uniformly (with replacement) from the filled slots.

    Returns ``(episodes [size, H], valid [size])``; ``valid`` is False for every draw while the
    buffer is empty (the loss then weighs nothing).
    """
    filled = jnp.isfinite(memory.priority)
    index = jax.random.categorical(key, jnp.where(filled, 0.0, -jnp.inf), shape=(size,))
    index = jnp.clip(index, 0, filled.shape[0] - 1)
    episodes = jax.tree.map(lambda x: x[index], memory.lessons)
    return episodes, filled[index]

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

Other priorities give other buffers from the same pieces (:func:`append_step`, :func:`store`):
the arrival order gives a first-in first-out buffer, the return with ``best_only`` a buffer of the
best episodes so far (the return-decomposition stages, :mod:`jaxcredit.redistribute.
return_decomposition`). Actions are stored as they come: ``[..]`` ints for discrete actions,
``[.., D]`` floats for continuous ones (``action_shape``, ``action_dtype``); the next observation
(the final one at the episode's last step) is stored too where asked (``keep_next_obs``).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array


@struct.dataclass
class Episodes:
    """A batch of stored episodes, padded to H steps (batch-major: ``[B, H, ...]``).

    ``reward[b, t]`` is the environment's reward of step t; steps ``t >= length[b]`` are padding.
    ``next_obs[b, t]`` is s_{t+1} (the final observation at the last step), or None where the
    buffer does not keep it.
    """

    obs: Array
    action: Array
    reward: Array
    length: Array
    next_obs: Optional[Array] = None

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


def empty_episodes(rows: int, horizon: int, obs_shape: tuple, obs_dtype: Any = jnp.float32,
                   action_shape: tuple = (), action_dtype: Any = jnp.int32,
                   keep_next_obs: bool = False) -> Episodes:
    """``rows`` empty episodes of ``horizon`` steps (see :func:`init_memory` for the shapes)."""
    obs = jnp.zeros((rows, horizon) + tuple(obs_shape), obs_dtype)
    return Episodes(obs=obs,
                    action=jnp.zeros((rows, horizon) + tuple(action_shape), action_dtype),
                    reward=jnp.zeros((rows, horizon), jnp.float32),
                    length=jnp.zeros((rows,), jnp.int32),
                    next_obs=jnp.zeros_like(obs) if keep_next_obs else None)


def init_memory(num_envs: int, capacity: int, horizon: int, obs_shape: tuple,
                obs_dtype: Any = jnp.float32, action_shape: tuple = (),
                action_dtype: Any = jnp.int32, keep_next_obs: bool = False) -> EpisodeMemory:
    """An empty memory for ``num_envs`` environments, ``capacity`` lessons of ``horizon`` steps.

    ``action_shape`` and ``action_dtype``: one action's (``()`` and int32 for discrete actions,
    ``(D,)`` and a float type for continuous ones); ``keep_next_obs``: store s_{t+1} as well.
    """
    if capacity < num_envs:
        raise ValueError(f"the lessons buffer holds {capacity} episodes, fewer than the "
                         f"{num_envs} environments that can finish an episode at the same step")
    shapes = (obs_shape, obs_dtype, action_shape, action_dtype, keep_next_obs)
    return EpisodeMemory(running=empty_episodes(num_envs, horizon, *shapes),
                         lessons=empty_episodes(capacity, horizon, *shapes),
                         priority=jnp.full((capacity,), -jnp.inf, jnp.float32),
                         stored=jnp.zeros((), jnp.int32), too_long=jnp.zeros((), jnp.int32))


def append_step(running: Episodes, obs: Array, action: Array, reward: Array,
                next_obs: Optional[Array] = None) -> Episodes:
    """Every environment's running episode with one more step (writes past H are dropped: such
    an episode is too long to keep, and its ``length`` exceeds H)."""
    rows = jnp.arange(running.length.shape[0])
    at = running.length

    def write(buffer, value):
        return buffer.at[rows, at].set(value, mode="drop")

    return running.replace(
        obs=write(running.obs, obs), action=write(running.action, action),
        reward=write(running.reward, reward), length=at + 1,
        next_obs=None if running.next_obs is None else write(running.next_obs, next_obs))


def store(lessons: Episodes, priority: Array, new: Episodes, new_priority: Array, keep: Array,
          best_only: bool = False) -> tuple[Episodes, Array]:
    """Writes the episodes ``new[keep]`` into the slots of lowest priority.

    Without ``best_only`` the k-th kept episode (in row order) replaces the k-th lowest slot
    (the buffer must have at least as many slots as ``new`` has rows). With ``best_only`` the
    kept episodes, best first, replace the lowest slots only while each is better than the slot
    it would replace, so the buffer keeps the highest priorities it has seen (any capacity).

    Returns ``(lessons, priority)``.
    """
    capacity, rows = priority.shape[0], keep.shape[0]
    new_priority = new_priority.astype(jnp.float32)
    if best_only:
        count = min(rows, capacity)
        lowest = jax.lax.top_k(-priority, count)[1]
        rank = jnp.argsort(jnp.argsort(-jnp.where(keep, new_priority, -jnp.inf)))
        target = lowest[jnp.clip(rank, 0, count - 1)]
        better = new_priority > priority[target]
        slot = jnp.where(keep & (rank < count) & better, target, capacity)
    else:
        lowest = jax.lax.top_k(-priority, rows)[1]
        rank = jnp.cumsum(keep) - 1
        slot = jnp.where(keep, lowest[jnp.clip(rank, 0, rows - 1)], capacity)  # capacity: drop
    lessons = jax.tree.map(lambda buf, x: buf.at[slot].set(x, mode="drop"), lessons, new)
    return lessons, priority.at[slot].set(new_priority, mode="drop")


def record_step(memory: EpisodeMemory, obs: Array, action: Array, reward: Array, done: Array,
                error: Array, next_obs: Optional[Array] = None) -> EpisodeMemory:
    """Appends one step of every environment; stores the episodes that end at it.

    Args:
      memory: the memory before the step.
      obs, action, reward: ``[N, ...]`` s_t, a_t and r_t of every environment.
      done: ``[N]`` bool, the episode ended at this step (terminated or truncated).
      error: ``[N]`` squared return-prediction error of the episodes that end here (their
        priority; ignored elsewhere).
      next_obs: ``[N, ...]`` s_{t+1}, for a memory that keeps it (else ignored).
    """
    horizon = memory.running.action.shape[1]
    running = append_step(memory.running, obs, action, reward, next_obs)
    fits = running.length <= horizon
    keep = jnp.logical_and(done, fits)
    lessons, priority = store(memory.lessons, memory.priority, running, error, keep)
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

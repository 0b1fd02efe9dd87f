"""Records shared by estimators, environments and agents.

All arrays are time-major: ``[T, *batch]`` with time first (docs/design.md, "Time-major arrays").
"""

from __future__ import annotations

from typing import Any, Optional

import chex
import jax
from flax import struct

Array = jax.Array
PyTree = Any


@struct.dataclass
class Trajectory:
    """A rollout window of ``T`` steps over a batch of environments.

    Conventions (rlax / Sutton & Barto, docs/design.md "Termination is not truncation"):

    * ``reward[t]`` is the reward of the transition s_t -> s_{t+1}.
    * ``terminated[t]``: the episode reached a true terminal state at t (no bootstrap).
    * ``truncated[t]``: the episode was cut by a time limit at t (bootstrap from the final state).
    * ``value[t] = V(s_t)``; ``next_value[t] = V(s'_{t+1})`` where s'_{t+1} is the
      *final observation* when the episode ended at t, the next observation otherwise.

    Attributes:
      obs: ``[T, *batch, *obs_shape]`` observation at s_t.
      action: ``[T, *batch]`` integer action taken at s_t.
      reward: ``[T, *batch]``.
      terminated: ``[T, *batch]`` bool.
      truncated: ``[T, *batch]`` bool.
      value: ``[T, *batch]`` V(s_t) under the behaviour-time critic.
      next_value: ``[T, *batch]`` V(s'_{t+1}).
      log_prob: ``[T, *batch]`` log pi(a_t | s_t) of the behaviour policy.
      logits: ``[T, *batch, A]`` behaviour policy logits (all-action credit needs pi(. | s_t)).
      next_obs: ``[T, *batch, *obs_shape]`` s'_{t+1} (the final observation when the episode
        ended at t), where the producer keeps it (the engine does; relabelling needs it), else None.
      state: ``[T, *batch]`` int32 tabular index of s_t on environments with exact ground truth
        (``jaxcredit.exact.tabular``), else None. Learned models never read it; exact (oracle)
        models and the ground-truth metrics do.
      extras: dict of ``[T, *batch]`` per-step ground truth from the environment
        (``env.step_extras``; CommandChain's ``label``, ``agrees``, ``instance``), else None.
        Each environment documents which entries credit stages may read; ``label`` is for
        scoring credit only.
      agent_state: ``[T, *batch, F]`` the recurrent policy's state at s_t: its core's output
        after reading ``obs[t]``, a summary of the episode so far (``--policy gru|lstm|lru``),
        recorded by the engine under ``stop_gradient`` where a stage reads it
        (``reads_agent_state``), else None. Credit stages read the agent's memory through it,
        as Synthetic Returns' ``apply_core_to_input`` and CCA's X_t do.
      memory_reads: :class:`MemoryReads` of a policy with an external memory
        (``--policy rma``), recorded with ``agent_state``, else None.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    value: Array
    next_value: Array
    log_prob: Array
    logits: Array
    next_obs: Optional[Array] = None
    state: Optional[Array] = None
    extras: Optional[dict] = None
    agent_state: Optional[Array] = None
    memory_reads: Optional["MemoryReads"] = None

    @property
    def done(self) -> Array:
        """Any episode end: terminated or truncated."""
        return jax.numpy.logical_or(self.terminated, self.truncated)


@struct.dataclass
class MemoryReads:
    """How a policy with an external memory read it at each step (``jaxcredit.rma``): row j
    of the memory holds the code written at step j of the episode.

    Attributes:
      weights: ``[T, *batch, H, R]`` the attention weight of each read head on each row.
      strengths: ``[T, *batch, H]`` each head's read strength β (the softmax's sharpness).
      rows: ``[T, *batch]`` int32, the rows written before the step: the step's index in its
        episode (rows at or after it were empty when read).
    """

    weights: Array
    strengths: Array
    rows: Array


@struct.dataclass
class Credit:
    """What a credit estimator assigns to a trajectory.

    Attributes:
      advantage: ``[T, *batch]`` credit of the action taken, or ``[T, *batch, A]`` credit of every
        action (all-action estimators such as HCA and COCOA). The policy loss accepts either.
      value_target: ``[T, *batch]`` regression target for V(s_t) (e.g. the λ-return).
      diagnostics: dict of scalar metrics reduced inside the compiled program.
    """

    advantage: Array
    value_target: Array
    diagnostics: dict = struct.field(default_factory=dict)


def assert_time_major(*arrays: Array, rank_at_least: int = 1) -> None:
    """Checks that arrays share their time axis and batch shape (chex, at trace time)."""
    chex.assert_equal_shape(arrays)
    chex.assert_rank(arrays[0], set(range(rank_at_least, 16)))

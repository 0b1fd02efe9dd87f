"""The engine's records: the train state (everything a run needs to continue) and a collected
window.

Checkpointing the train state (the agent's and the credit models' parameters and optimiser
states, the environments, the RNG keys, the update count) and restoring it later reproduces the
uninterrupted run exactly: nothing else carries information from one update to the next.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

from jaxcredit.agents.meta_gradient import MetaState
from jaxcredit.credit.transform import CreditState
from jaxcredit.agents.rollout import EnvRunner, EpisodeSummary
from jaxcredit.types import Trajectory


@struct.dataclass
class AgentState:
    """The actor-critic's parameters and its Adam state."""

    params: Any
    opt_state: Any


@struct.dataclass
class TrainState:
    """State of one run (one seed × one hyper-parameter setting).

    Attributes:
      agent: the actor-critic and its optimiser.
      credit: the credit transform's state (``jaxcredit.credit.CreditState``): the estimator's
        and the redistributor's fitted models and their count of updates.
      runner: the environments, their current observations, running episode statistics and
        the policy's memory.
      key: typed PRNG key for the next update.
      eval_key: typed PRNG key of the evaluations (``fold_in(eval_key, update)``), kept apart so
        that evaluating never changes the training run.
      update: int32 number of updates done so far (drives learning-rate annealing).
      meta: the meta-gradient's offsets of γ and λ and their optimiser (empty without
        ``meta_gradient``; ``jaxcredit.agents.meta_gradient``).
    """

    agent: AgentState
    credit: CreditState
    runner: EnvRunner
    key: jax.Array
    eval_key: jax.Array
    update: jax.Array
    meta: MetaState


@struct.dataclass
class Window:
    """One update's rollout, ready for credit assignment (``Engine.collect``).

    Attributes:
      trajectory: the ``[T, N]`` window (relabelled if a relabel stage is set) with
        behaviour-time values.
      runner: the environments after the window.
      episodes: sums over the episodes that ended in the window.
      memory: the policy's memory at the window's first step (``()`` for a memoryless policy).
      first: ``[T, N]`` bool, the steps that start an episode (where the memory is zeroed).
    """

    trajectory: Trajectory
    runner: EnvRunner
    episodes: EpisodeSummary
    memory: Any = ()
    first: Any = None

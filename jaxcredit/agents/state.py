"""The engine's records: the train state (everything a run needs to continue) and a collected batch.

Checkpointing this record (params, optimiser state, environments, RNG key, update count) and
restoring it later reproduces the uninterrupted run exactly: nothing else carries information
from one update to the next.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

from jaxcredit.agents.rollout import EnvRunner, EpisodeSummary
from jaxcredit.types import Credit, Trajectory


@struct.dataclass
class TrainState:
    """State of one run (one seed × one hyper-parameter setting).

    Attributes:
      params: ``{"agent": actor-critic params, "estimator": learned-estimator params}`` ({} if
        the estimator has no parameters).
      opt_state: Adam state over ``params`` (one optimiser for both; see ``agents.train``).
      runner: the environments, their current observations and running episode statistics.
      key: typed PRNG key for the next update.
      update: int32 number of updates done so far (drives learning-rate annealing).
    """

    params: dict
    opt_state: Any
    runner: EnvRunner
    key: jax.Array
    update: jax.Array


@struct.dataclass
class Batch:
    """One update's data, before optimisation (``Engine.collect``).

    Attributes:
      trajectory: the ``[T, N]`` window with behaviour-time values.
      credit: what the estimator assigned to it (already under stop_gradient).
      runner: the environments after the window.
      episodes: sums over the episodes that ended in the window.
    """

    trajectory: Trajectory
    credit: Credit
    runner: EnvRunner
    episodes: EpisodeSummary

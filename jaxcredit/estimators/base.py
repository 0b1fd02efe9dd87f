"""The estimator contract (DESIGN.md, "An estimator is pure").

A credit estimator is a small record of three pure functions::

    init(key, example_trajectory)          -> params      # its own model parameters ({} if none)
    assign(params, trajectory, hparams)    -> Credit      # called under stop_gradient by the engine
    loss(params, trajectory, hparams)      -> (scalar, metrics)   # added to the agent's loss

``hparams`` is the agent's sweepable hyper-parameter pytree; estimators read ``hparams.gamma`` and
``hparams.lambda_`` (and their own fields, if any) from it. Passing it explicitly, rather than
closing over it, is what lets ``jax.vmap`` sweep γ and λ with one compile: DESIGN.md writes
``assign(params, trajectory)``; the third argument is the one deviation, for that reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxcredit.types import Credit, Trajectory

InitFn = Callable[[jax.Array, Trajectory], Any]
AssignFn = Callable[[Any, Trajectory, Any], Credit]
LossFn = Callable[[Any, Trajectory, Any], tuple[jax.Array, dict]]


def no_params(key: jax.Array, example: Trajectory) -> dict:
    """``init`` of an estimator without parameters."""
    del key, example
    return {}


def no_loss(params: Any, trajectory: Trajectory, hparams: Any) -> tuple[jax.Array, dict]:
    """``loss`` of an estimator without parameters: zero, no metrics."""
    del params, trajectory, hparams
    return jnp.zeros((), jnp.float32), {}


@dataclasses.dataclass(frozen=True)
class Estimator:
    """A credit estimator: ``init`` / ``assign`` / ``loss`` (see module docstring).

    Attributes:
      name: registry name, e.g. ``"gae"``.
      init, assign, loss: the three pure functions.
      all_action: True if ``assign`` returns credit for every action ``[T, *batch, A]``.
      learned: True if it has parameters trained by ``loss``.
    """

    name: str
    assign: AssignFn
    init: InitFn = no_params
    loss: LossFn = no_loss
    all_action: bool = False
    learned: bool = False

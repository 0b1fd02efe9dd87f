"""The objective stage of the credit pipeline: ``loss(outputs, batch, credit, hparams)``.

An objective turns the network's outputs on a minibatch and the credit assigned to it into the
agent's loss (policy surrogate, value regression, entropy bonus). Every objective accepts per-step
credit ``[B]`` and all-action credit ``[B, A]`` (``jaxcredit.objectives.losses``).

Registered: ``pg`` (the policy-gradient surrogate of A2C and REINFORCE) and ``ppo`` (PPO's clipped
surrogate, with the all-action clipped form for all-action credit). A TD / Q-learning objective
arrives with the off-policy learner.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax
from flax import struct

from jaxcredit.registry import Factory, Registry
from jaxcredit.types import Credit, Trajectory


@struct.dataclass
class PolicyOutputs:
    """What the actor-critic returns on a minibatch: ``logits [B, A]`` and ``value [B]``."""

    logits: jax.Array
    value: jax.Array


LossFn = Callable[[PolicyOutputs, Trajectory, Credit, Any], tuple[jax.Array, dict]]


@dataclasses.dataclass(frozen=True)
class Objective:
    """An objective: ``loss(outputs, batch, credit, hparams) -> (scalar, metrics)``.

    ``batch`` and ``credit`` are flat (leading axis B = transitions of a minibatch); ``batch``
    carries the behaviour-time log-probabilities, logits and values.
    """

    name: str
    loss: LossFn


OBJECTIVES = Registry("objective", {
    "pg": "jaxcredit.objectives.policy_gradient:policy_gradient",
    "ppo": "jaxcredit.objectives.policy_gradient:ppo",
})


def register(name: str, factory: Factory) -> None:
    """Adds (or replaces) an objective: ``factory`` is a callable or ``"module:function"``."""
    OBJECTIVES.register(name, factory)


def registered() -> list[str]:
    return OBJECTIVES.registered()


def make_objective(name: str, context: Optional[Mapping[str, Any]] = None,
                   **options: Any) -> Objective:
    """Builds the objective ``name`` (or a ``"module:factory"`` path) with ``options``; entries
    of ``context`` (the engine's ``critic``, ``normalize_advantage``, ``clip_value_loss``)
    reach a factory that takes them (``Registry.make``)."""
    return OBJECTIVES.make(name, context=context, **options)

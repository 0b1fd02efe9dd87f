"""The relabel stage of the credit pipeline: ``relabel(trajectory, key) -> trajectory``.

A relabeller rewrites a rollout before anything is computed from it: hindsight experience replay
(Andrychowicz et al. 2017) replaces the goal in ``obs`` / ``next_obs`` by one the agent achieved
and recomputes the reward, so that a failed attempt becomes a successful attempt at another goal.
It has no parameters. The on-policy engine applies it right after acting, before the critic
evaluates the window, so values, redistribution and credit all see the relabelled data.

No relabeller ships with jaxcredit yet (goal relabelling arrives with the off-policy learner);
register one with ``register("name", "package.module:factory")``, where the factory returns a
:class:`Relabeller`, and select it with ``TrainConfig(relabel="name")`` / ``--relabel name``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from jaxcredit.registry import Factory, Registry
from jaxcredit.types import Trajectory

RelabelFn = Callable[[Trajectory, jax.Array], Trajectory]


@dataclasses.dataclass(frozen=True)
class Relabeller:
    """A relabel stage.

    Attributes:
      name: registry name.
      relabel: ``(trajectory [T, N], key) -> trajectory`` with the same shapes.
    """

    name: str
    relabel: RelabelFn


RELABELLERS = Registry("relabeller", {})


def register(name: str, factory: Factory) -> None:
    """Adds (or replaces) a relabeller: ``factory`` is a callable or ``"module:function"``."""
    RELABELLERS.register(name, factory)


def registered() -> list[str]:
    return RELABELLERS.registered()


def make_relabeller(name: str, **options: Any) -> Relabeller:
    """Builds the relabeller ``name`` (or a ``"module:factory"`` path) with ``options``."""
    return RELABELLERS.make(name, **options)

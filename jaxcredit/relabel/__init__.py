"""The relabel stage of the credit pipeline: ``relabel(trajectory, key) -> trajectory``.

A relabeller rewrites a rollout before anything is computed from it: hindsight experience replay
(Andrychowicz et al. 2017) replaces the goal in ``obs`` / ``next_obs`` by one the agent achieved
and recomputes the reward, so that a failed attempt becomes a successful attempt at another goal.
It has no parameters. The on-policy engine applies it right after acting, before the critic
evaluates the window, so values, redistribution and credit all see the relabelled data.

``her`` (:mod:`jaxcredit.relabel.her`) ships with jaxcredit. It relabels *replayed* windows and
so runs with the off-policy learner only (``--algo dqn``): a policy gradient on relabelled goals
would be off-policy without importance weights, and the on-policy engine refuses it. Register
your own with ``register("name", "package.module:factory")``, where the factory returns a
:class:`Relabeller` (a factory that takes ``env`` and ``horizon`` keywords gets the environment
and its episode length from the engine), and select it with ``--relabel name``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

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
      needs_replay: relabels replayed windows (off-policy learners only).
      past, future: for replayed windows, the steps of context the stage reads before and after
        the step a learner trains on (the engine samples windows of ``past + 1 + future`` steps
        at least and trains on row ``past``).
      relabel_rows: optional fast path for replayed windows: ``(rows [K, B], done [S, B],
        achieved_goal [S, B, G], key) -> (rows, relabelled [B] bool)`` relabels the rows
        ``past ... past + K − 1`` of each window from the whole window's episode ends and
        achieved goals, without its observations (and reports ``relabel/fraction``).
    """

    name: str
    relabel: RelabelFn
    needs_replay: bool = False
    past: int = 0
    future: int = 0
    relabel_rows: Optional[Callable] = None


RELABELLERS = Registry("relabeller", {"her": "jaxcredit.relabel.her:her"})


def register(name: str, factory: Factory) -> None:
    """Adds (or replaces) a relabeller: ``factory`` is a callable or ``"module:function"``."""
    RELABELLERS.register(name, factory)


def registered() -> list[str]:
    return RELABELLERS.registered()


def make_relabeller(name: str, context: Optional[Mapping[str, Any]] = None,
                    **options: Any) -> Relabeller:
    """Builds the relabeller ``name`` (or a ``"module:factory"`` path) with ``options``; entries
    of ``context`` (``env``, ``env_params``, ``horizon``, ``group_size``) reach a factory that
    takes them (``Registry.make``)."""
    return RELABELLERS.make(name, context=context, **options)

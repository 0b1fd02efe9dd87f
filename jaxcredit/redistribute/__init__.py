"""The redistribute stage of the credit pipeline: new per-step rewards from a (learned) model.

A redistributor moves reward in time without changing what is optimal: return decomposition
(RUDDER, Arjona-Medina et al. 2019) moves a delayed reward to the steps where a learned return
predictor jumps; a process reward model scores every step of a chain of reasoning. Contract::

    init(key, example_trajectory)                  -> params
    redistribute(params, trajectory, key, memory)  -> (trajectory with new ``reward``, memory,
                                                      metrics)
    loss(params, batch, hparams, key)              -> (scalar, metrics)  # what fitting minimises

A redistributor that needs more than one window (a sequence model whose episodes span windows,
a buffer of whole past episodes) also has a *memory*, kept in the train state between updates::

    init_memory(example_trajectory)                -> memory
    sample(memory, key)                            -> batch      # the fitting data

and its ``loss`` is fitted on batches drawn by ``sample`` instead of on the window's columns.
Without ``init_memory`` the memory is None and ``redistribute`` hands it back.

The engine fits a learned redistributor inside the compiled update (``jaxcredit.fitting``, its
own optimiser, ``redistributor_lr`` / ``redistributor_max_grad_norm`` in ``Hparams`` and
``TrainConfig.redistribute``'s fitting fields, ``--redistribute-fit-*``), then calls
``redistribute`` on the fresh window; the critic, the estimator and the objective all see the new
rewards. Its ``loss`` metrics and the
metrics ``redistribute`` returns are reported as ``redistribute/*``.

Registered: ``rudder`` (:mod:`jaxcredit.redistribute.rudder`, an LSTM return decomposition with
a lessons buffer), ``prm`` (:mod:`jaxcredit.redistribute.prm`, step rewards from a process
reward model), ``synthetic_returns`` (:mod:`jaxcredit.redistribute.synthetic_returns`, a
reward model over the episode's earlier states, Raposo et al. 2021), and ``rrd`` and ``ircr``
(:mod:`jaxcredit.redistribute.return_decomposition`: a per-step reward model fitted to the
returns of stored episodes, on random subsets of their steps (Ren et al. 2022) or on every step's
normalised episode return (Gangwani et al. 2020)), and ``tvt``
(:mod:`jaxcredit.redistribute.tvt`, Temporal Value Transport along an ``rma`` agent's memory
reads, Hung et al. 2019). Register another with
``register("name", "package.module:factory")`` and select it with
``TrainConfig(redistribute="name")`` / ``--redistribute name``. A factory is given the engine's
context (``env``, ``env_params``, ``horizon``, ``group_size``) where it takes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from jaxcredit.registry import Factory, Registry
from jaxcredit.types import Trajectory


def no_params(key: jax.Array, example: Trajectory) -> dict:
    del key, example
    return {}


def no_loss(params, trajectory, hparams, key) -> tuple[jax.Array, dict]:
    del params, trajectory, hparams, key
    return jnp.zeros((), jnp.float32), {}


@dataclasses.dataclass(frozen=True)
class Redistributor:
    """A redistribute stage (module docstring).

    Attributes:
      name: registry name.
      redistribute: ``(params, trajectory, key, memory) -> (trajectory, memory, metrics)``,
        the trajectory with new rewards; the metrics are reported as ``redistribute/*``.
      init, loss: its model's initialiser and fitting loss.
      learned: True if ``loss`` fits parameters.
      init_memory: ``example_trajectory -> memory`` for a redistributor with a memory (module
        docstring), else None (the memory ``redistribute`` gets and returns is None).
      sample: ``(memory, key) -> batch``, the fitting data of a redistributor with a memory
        (None: fit on the window's columns).
      exact_model: for an oracle redistributor, the exact quantity the engine passes as its
        ``params`` every update (``"action_values"``: ``{"q": Q^π [S, A] at γ = 1,
        "transition_reward": [S, A, S]}`` of the current policy), else None.
      continuous_actions: True when the stage also works for continuous actions (float
        ``[T, B, D]``, not int ``[T, B]``): it reads actions only through
        ``jaxcredit.policies.action_features`` (one-hot for a discrete action, the vector itself
        for a continuous one), or not at all. False: discrete actions only.
      reads_agent_state: True when the stage reads ``Trajectory.agent_state`` (the recurrent
        policy's state), which the engine then records; it needs ``--policy gru|lstm|lru``.
      reads_memory: True when the stage reads ``Trajectory.memory_reads`` (how the agent read
        its external memory, recorded with the agent state); it needs ``--policy rma``.
    """

    name: str
    redistribute: Callable[[Any, Trajectory, jax.Array, Any], tuple[Trajectory, Any, dict]]
    init: Callable[[jax.Array, Trajectory], Any] = no_params
    loss: Callable[[Any, Trajectory, Any, jax.Array], tuple[jax.Array, dict]] = no_loss
    learned: bool = False
    init_memory: Optional[Callable[[Trajectory], Any]] = None
    sample: Optional[Callable[[Any, jax.Array], Any]] = None
    exact_model: Optional[str] = None
    continuous_actions: bool = False
    reads_agent_state: bool = False
    reads_memory: bool = False


REDISTRIBUTORS = Registry("redistributor", {
    "rudder": "jaxcredit.redistribute.rudder:make_rudder",
    "prm": "jaxcredit.redistribute.prm:make_prm",
    "synthetic_returns": "jaxcredit.redistribute.synthetic_returns:make_synthetic_returns",
    "ircr": "jaxcredit.redistribute.return_decomposition:make_ircr",
    "rrd": "jaxcredit.redistribute.return_decomposition:make_rrd",
    "tvt": "jaxcredit.redistribute.tvt:make_tvt",
})


def register(name: str, factory: Factory) -> None:
    """Adds (or replaces) a redistributor: ``factory`` is a callable or ``"module:function"``."""
    REDISTRIBUTORS.register(name, factory)


def registered() -> list[str]:
    return REDISTRIBUTORS.registered()


def make_redistributor(name: str, context: Optional[Mapping[str, Any]] = None,
                       **options: Any) -> Redistributor:
    """Builds the redistributor ``name`` (or a ``"module:factory"`` path) with ``options``;
    entries of ``context`` (``env``, ``env_params``, ``horizon``, ``group_size``) reach a
    factory that takes them (``Registry.make``)."""
    return REDISTRIBUTORS.make(name, context=context, **options)

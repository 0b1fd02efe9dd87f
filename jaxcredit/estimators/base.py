"""The estimate stage of the credit pipeline (docs/design.md, "The credit pipeline").

A credit estimator is a small record of pure functions::

    init(key, example_trajectory)              -> params     # its own model ({} if none)
    assign(params, trajectory, hparams, key)   -> Credit     # called under stop_gradient
    loss(params, trajectory, hparams, key)     -> (scalar, metrics)   # what fitting minimises

``hparams`` is the run's sweepable hyper-parameter pytree; estimators read ``hparams.gamma`` and
``hparams.lambda_`` from it, so ``jax.vmap`` sweeps γ and λ under one compile. ``key`` is a PRNG
key for estimators that sample (pairs of steps, say); deterministic ones ignore it.

A *learned* estimator's parameters are fitted by the engine inside the compiled update, with
their own optimiser and schedule (``jaxcredit.fitting``), before ``assign`` is called on the fresh
batch. Two optional fields serve the ground-truth checks on tabular environments:

* ``exact_model`` names the kind of exact model the estimator approximates (``"state_hindsight"``,
  ``"return_hindsight"``, COCOA's ``"reward_hindsight"``, or one registered in
  ``jaxcredit.exact.models``) and ``oracle()`` builds the same
  estimator with that exact model in place of the learned one (its ``params`` are then the
  exact tables, recomputed for the current policy every update: ``jaxcredit.exact.ground_truth``);
* ``hindsight(params, trajectory, hparams, key) -> (log_h [..., A], weight [...])`` evaluates the
  model at the conditioning points the estimator uses, so the engine can report the KL divergence
  between the learned and the exact model there (``estimator/kl_to_exact``).

A model that is not fitted by gradient steps but revised by a rule (a Bayesian posterior over
which turns helped, ``jaxcredit.estimators.belief``) sets ``update(params, trajectory, hparams)
-> params``: the engine calls it *after* ``assign``, so a window's credit comes from the belief
held before its own outcomes are seen.

Episodic estimators (``episode_windows``: GRPO, RLOO, the belief credit) read each window column
as one whole episode; the engine then resets every environment at the start of every window, in
groups of ``TrainConfig.group_size`` that share a task instance (``jaxcredit.agents.rollout``),
and requires the window to be one episode long.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from jaxcredit.exact.models import exact_model
from jaxcredit.types import Credit, Trajectory

InitFn = Callable[[jax.Array, Trajectory], Any]
AssignFn = Callable[[Any, Trajectory, Any, jax.Array], Credit]
LossFn = Callable[[Any, Trajectory, Any, jax.Array], tuple[jax.Array, dict]]
HindsightFn = Callable[[Any, Trajectory, Any, jax.Array], tuple[jax.Array, jax.Array]]
UpdateFn = Callable[[Any, Trajectory, Any], Any]
RatioFn = Callable[[Any, Trajectory, Any], jax.Array]
DiagnoseFn = Callable[[Any, Trajectory, Any], dict]


def no_params(key: jax.Array, example: Trajectory) -> dict:
    """``init`` of an estimator without parameters."""
    del key, example
    return {}


def no_loss(params: Any, trajectory: Trajectory, hparams: Any,
            key: jax.Array) -> tuple[jax.Array, dict]:
    """``loss`` of an estimator without parameters: zero, no metrics."""
    del params, trajectory, hparams, key
    return jnp.zeros((), jnp.float32), {}


@dataclasses.dataclass(frozen=True)
class Estimator:
    """A credit estimator: ``init`` / ``assign`` / ``loss`` (see module docstring).

    Attributes:
      name: registry name, e.g. ``"gae"``.
      init, assign, loss: the pure functions.
      all_action: True if ``assign`` returns credit for every action ``[T, *batch, A]``.
      learned: True if it has parameters fitted by ``loss``.
      exact_model: the kind of exact model it approximates (``exact.models.EXACT_MODELS``), or
        None.
      oracle: builds the twin estimator that uses the exact model (needs ``exact_model``).
      hindsight: the learned model at the estimator's conditioning points (for the KL metric).
      is_oracle: True for a twin built by ``oracle()``: the engine supplies its params.
      update: the rule that revises a non-gradient model after ``assign`` (or None).
      episode_windows: True if ``assign`` reads each window column as one whole episode.
      pretrain_loss: the loss of a part fitted once, before the model is used, then frozen
        (COCOA-feature's reward features): the engine takes ``estimator_pretrain_steps`` steps
        of it on the windows of the burn-in updates.
      pretrained: ``params -> pytree of bool``, the leaves that ``pretrain_loss`` fits (frozen
        afterwards; ``loss`` does not move them).
      pretrain_data: ``burn-in trajectory -> data``, computed once before the pretraining steps,
        which then read ``data`` in place of the trajectory (COCOA-feature on a tabular
        environment: the sufficient statistics of its distinct (observation, action) pairs);
        None: the trajectory itself.
      credit_ratio: ``(params, trajectory, hparams) -> [T, *batch]`` the credit ratio
        ρ = π(a_t|s_t) / h(a_t|s_t, ·) at the actions taken, for estimators built on one
        (return hindsight): the engine reports its error against the exact model's.
      continuous_actions: True if ``assign`` (and any model) reads no actions, or reads them
        through ``jaxcredit.policies.action_features``; the engine refuses the others on
        continuous actions (hindsight models over A actions, COCOA, the exact models).
      reads_agent_state: True if the model reads ``Trajectory.agent_state`` (the recurrent
        policy's state), which the engine then records; it needs ``--policy gru|lstm|lru``.
      diagnose: ``(params, trajectory, hparams) -> {name: scalar}``, checks that cost a pass of
        their own (the credit against an exact law the environment knows, where it has no
        tabular ground truth): the engine runs it at evaluation points only, on a held-out
        window, and logs ``credit/<name>``.
    """

    name: str
    assign: AssignFn
    init: InitFn = no_params
    loss: LossFn = no_loss
    all_action: bool = False
    learned: bool = False
    exact_model: Optional[str] = None
    oracle: Optional[Callable[[], "Estimator"]] = None
    hindsight: Optional[HindsightFn] = None
    is_oracle: bool = False
    update: Optional[UpdateFn] = None
    episode_windows: bool = False
    credit_ratio: Optional[RatioFn] = None
    pretrain_loss: Optional[LossFn] = None
    pretrained: Optional[Callable[[Any], Any]] = None
    pretrain_data: Optional[Callable[[Any], Any]] = None
    continuous_actions: bool = False
    reads_agent_state: bool = False
    diagnose: Optional[DiagnoseFn] = None

    def __post_init__(self):
        if self.exact_model is not None:
            exact_model(self.exact_model)  # a one-line ValueError for an unknown kind

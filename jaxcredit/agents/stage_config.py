"""The records ``TrainConfig`` groups its fields into: the stages of the credit pipeline, the
off-policy learner's replay, and evaluation.

Each record is frozen, validates its own fields, and documents each field in the string after it,
which is the help of the field's command-line flag. Flags stay flat: ``TrainConfig.estimator``'s
``fit_steps`` is ``--estimator-fit-steps`` and its ``name`` is ``--estimator``
(``jaxcredit.agents.config.flat_fields``). Validation messages name the flag, so a record's
``validate`` takes the prefix its fields have in that flat namespace.

Where a stage's help names the stage ("the estimator's learning rate"), the record that stage
uses restates the field with its own help: the fields of :class:`StageConfig` are worded for
``relabel``, :class:`FittedStageConfig` restates them for ``redistribute`` and
:class:`EstimatorConfig` for ``estimator``.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterator, NamedTuple, Optional

import numpy as np

from jaxcredit.fitting import FitSchedule
from jaxcredit.flags import field_docs

Options = tuple[tuple[str, Any], ...]


class FlatField(NamedTuple):
    """A config field by its flag: ``estimator_fit_steps`` is ``TrainConfig.estimator.fit_steps``.

    Attributes:
      name: the flat name, the flag's (``estimator_fit_steps``; ``estimator`` for a stage's name).
      path: the attributes from the config down to the field (``("estimator", "fit_steps")``).
      hint: the field's type hint.
      default: the field's default.
      doc: the field's docstring, its flag's help.
    """

    name: str
    path: tuple[str, ...]
    hint: Any
    default: Any
    doc: str


def record_fields(cls: type, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any, Any,
                                                                       str]]:
    """``(path + (name,), hint, default, doc)`` of each field of the dataclass ``cls``, in order;
    the doc of a field a subclass restates is the subclass's."""
    hints, docs = typing.get_type_hints(cls), {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(field_docs(klass))
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        yield path + (f.name,), hints[f.name], default, docs.get(f.name, "")


def check_count(name: str, value: Any, minimum: int, kinds: tuple = (int, np.integer)) -> None:
    """Raises the one-line ValueError of a count that is not a whole number >= ``minimum``
    (1: positive, 0: non-negative)."""
    if not isinstance(value, kinds) or value < minimum:
        kind = "positive" if minimum > 0 else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, got {value!r}")


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """A stage of the credit pipeline that is built and not fitted: its name and its options."""

    name: Optional[str] = None
    """relabel stage (registry name or module:factory); none by default"""
    options: Options = ()
    """options of the relabel stage"""

    def validate(self, prefix: str) -> None:
        """Nothing to check here: the stage's registry checks its name and options when it is
        built. ``prefix`` is the flag prefix of the record's fields (``relabel_``)."""


@dataclasses.dataclass(frozen=True)
class FittedStageConfig(StageConfig):
    """A stage that may carry a learned model, and how that model is fitted each update
    (:class:`jaxcredit.fitting.FitSchedule`)."""

    name: Optional[str] = None
    """redistribute stage (registry name or module:factory); none by default"""
    options: Options = ()
    """options of the redistribute stage"""
    fit_steps: int = 4
    """optimiser steps that fit a learned redistributor per update"""
    fit_minibatches: int = 1
    """each fitting step uses N / this many environments' whole windows"""
    fit_windows: int = 1
    """fit on the fresh window plus this many − 1 earlier ones"""
    anneal_lr: bool = False
    """decay the redistributor's learning rate linearly to 0 over the run"""
    fit_until_loss: float = 0.0
    """0, or fit each update until a running average of the main loss falls to this value
    (at most redistribute_fit_steps steps; RUDDER's demonstration code: 0.15)"""

    @property
    def fit(self) -> FitSchedule:
        """The fitting schedule the engine runs (``jaxcredit.fitting.fit``)."""
        return FitSchedule(self.fit_steps, self.fit_minibatches, self.fit_windows,
                           self.anneal_lr, self.fit_until_loss)

    def validate(self, prefix: str) -> None:
        """Raises ValueError naming the flag (``prefix`` + field) of a bad fitting field; that
        ``fit_minibatches`` divides num_envs is TrainConfig's check."""
        for name in ("fit_minibatches", "fit_windows"):
            check_count(prefix + name, getattr(self, name), 1, kinds=(int,))
        check_count(prefix + "fit_steps", self.fit_steps, 0, kinds=(int,))
        if not self.fit_until_loss >= 0.0:
            raise ValueError(f"{prefix}fit_until_loss must be >= 0 (0: a fixed number of "
                             f"steps), got {self.fit_until_loss!r}")


@dataclasses.dataclass(frozen=True)
class EstimatorConfig(FittedStageConfig):
    """The estimate stage: the estimator, the fitting of its model, when its credit is assigned
    relative to that fit, and a pretraining of part of the model on the burn-in windows."""

    name: Optional[str] = None
    """estimate stage: a registered name (jaxcredit list estimators) or module:factory (default:
    gae, or mc for reinforce); for dqn the Q target: double_q | q_learning | q_lambda (Peng's
    Q(λ) over n_step stored steps); for pqn: q_lambda"""
    options: Options = ()
    """options of the estimator, e.g. n=10 or model=oracle"""
    fit_steps: int = 4
    """optimiser steps that fit a learned estimator's model per update"""
    anneal_lr: bool = False
    """decay the estimator's learning rate linearly to 0 over the run"""
    fit_until_loss: float = 0.0
    """0, or fit each update until a running average of the model's loss falls to this value
    (at most estimator_fit_steps steps; RUDDER's rule, jaxcredit.fitting.fit)"""
    assign_before_fit: bool = False
    """assign the credit with the model as it was before this update's fit (held out: the
    window's own outcomes do not shape the coefficients that weigh them); default after it, as
    COCOA's and HCA's code do"""
    pretrain_steps: int = 0
    """Adam steps of the estimator's pretraining loss on the burn-in windows, taken once after
    burn-in; the pretrained part is then frozen (COCOA-feature's features: 20 000)"""

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        check_count(prefix + "pretrain_steps", self.pretrain_steps, 0)


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """The off-policy learner's replay buffer, gradient steps, target network and Q head (dqn
    only; the on-policy learners ignore it)."""

    buffer_size: int = 100_000
    """dqn: replay capacity in transitions, split evenly over the N environments"""
    batch_size: int = 128
    """dqn: sampled transitions per gradient step"""
    learning_starts: int = 1_000
    """dqn: env steps collected before the first gradient step"""
    gradient_steps: int = 1
    """dqn: gradient steps per update"""
    target_update_every: int = 50
    """dqn: updates between target-network updates (a copy for tau = 1, else Polyak)"""
    n_step: int = 1
    """dqn: n of the n-step Q target (episode-aware: stops at every episode end); with
    --estimator q_lambda the length of the stored sequences Q(λ) runs over"""
    dueling: bool = False
    """dqn: dueling Q head, Q = V + A − mean A (Wang et al. 2016)"""
    huber: bool = False
    """dqn: Huber loss on the TD error instead of the squared error"""
    layer_norm: bool = False
    """Q-network with LayerNorm after every hidden layer (pqn's default)"""
    reward_scale: float = 1.0
    """pqn: rewards are multiplied by this for learning (returns are reported unscaled)"""

    def validate(self, prefix: str) -> None:
        """Raises ValueError naming the flag (``prefix`` + field); how the buffer compares with
        a batch and with the environments is TrainConfig's check, for dqn only."""
        for name in ("buffer_size", "batch_size", "gradient_steps", "target_update_every",
                     "n_step"):
            check_count(prefix + name, getattr(self, name), 1)
        if self.learning_starts < 0:
            raise ValueError(f"{prefix}learning_starts must be non-negative, got "
                             f"{self.learning_starts}")
        if not self.reward_scale > 0:
            raise ValueError(f"{prefix}reward_scale must be positive, got {self.reward_scale}")
        if self.layer_norm and self.dueling:
            raise ValueError(f"{prefix}layer_norm and {prefix}dueling are two different Q "
                             f"heads; choose one")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """How often and how long the policy is evaluated (``jaxcredit.agents.evaluation``)."""

    every: Optional[int] = None
    """evaluate every this many updates (default: 20 evaluations per run; 0: never)"""
    episodes: int = 16
    """episodes per evaluation, each with sampled and with greedy actions"""
    max_steps: Optional[int] = None
    """step cap of an evaluation episode (default: the env's time limit, else 1000)"""

    def validate(self, prefix: str) -> None:
        """Raises ValueError naming the flag (``prefix`` + field)."""
        check_count(prefix + "episodes", self.episodes, 1)
        if self.every is not None:
            check_count(prefix + "every", self.every, 0, kinds=(int,))
        if self.max_steps is not None and self.max_steps <= 0:
            raise ValueError(f"{prefix}max_steps must be positive, got {self.max_steps!r}")


def check_off_policy(config, q_targets) -> None:
    """The checks of an off-policy ``TrainConfig`` across its records (its Q-learning target,
    one of ``q_targets``, its replay, the stages it has not); a one-line ValueError. PQN
    (``algo="pqn"``) has no replay: its target is Peng's Q(λ) over the window."""
    off = config.off_policy
    if config.algo == "pqn":
        q_targets = ("q_lambda",)
    if config.estimator.name not in q_targets:
        raise ValueError(f"--algo {config.algo} learns Q by a Q-learning target; choose "
                         f"--estimator {' or '.join(q_targets)}, got "
                         f"{config.estimator.name!r}")
    if config.objective is not None:
        raise ValueError(f"--algo {config.algo} regresses Q on its target; it takes no "
                         f"--objective (got {config.objective!r})")
    if config.group_size > 1:
        raise ValueError(f"--algo {config.algo} learns from replayed transitions, not from "
                         f"groups of episodes; group_size must be 1, got {config.group_size}")
    if config.redistribute.name:
        raise ValueError(f"--algo {config.algo} has no redistribute stage yet (rewards are "
                         "relabelled at sample time only)")
    if config.algo == "pqn" and config.relabel.name:
        raise ValueError("--algo pqn learns from the window it acted in, without replay; "
                         "relabelling is for --algo dqn")
    if config.burn_in_updates or config.model_warmup_updates:
        raise ValueError(f"--algo {config.algo} waits with learning_starts; burn_in_updates "
                         "and model_warmup_updates are for the on-policy learners")
    if config.meta_gradient:
        raise ValueError(f"--algo {config.algo} has no meta-gradient (it adapts the on-policy "
                         "learners' γ and λ)")
    if config.policy_epsilon:
        raise ValueError(f"--algo {config.algo} explores ε-greedily by its own schedule; "
                         "policy_epsilon mixes the on-policy learners' softmax")
    if config.algo == "pqn":
        return
    if off.buffer_size < off.batch_size:
        raise ValueError(f"buffer_size={off.buffer_size} is smaller than one batch "
                         f"(batch_size={off.batch_size})")
    if off.buffer_size < config.num_envs:
        raise ValueError(f"buffer_size={off.buffer_size} holds less than one step of "
                         f"the {config.num_envs} environments")

"""The two halves of a run's settings: a frozen ``TrainConfig`` and a ``Hparams`` pytree.

``TrainConfig`` holds everything that fixes the compiled program: shapes (number of envs, rollout
length, network widths), loop counts (updates, epochs, minibatches, fitting steps) and discrete
choices (the stages of the credit pipeline, the environment). Changing any of it means a new
compile.

``Hparams`` holds the floats a researcher sweeps: learning rates, γ, λ, loss coefficients, clip
ε, the credit models' own learning rates. They are pytree leaves (float32 scalars), so
``jax.vmap`` over a stacked ``Hparams`` trains many settings in one compiled program (the rejax
idea). Estimators read ``hparams.gamma`` and ``hparams.lambda_`` from it.

``algo`` is a preset, not a code path: it fills the objective, the default estimator and the loop
counts that are left as None (:data:`ALGO_PRESETS`).

The settings of each stage, of the off-policy learner and of evaluation are records of their own
(``TrainConfig.estimator.fit_steps``, ``TrainConfig.evaluation.every``); the command line, the
learner presets and the flat form of a config name every field by one flat name, its flag
(``estimator_fit_steps``, ``eval_every``: :func:`flat_fields`). Every field's docstring is its
command-line help (``jaxcredit train --help``).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxcredit.agents.agent_network import check_policy
from jaxcredit.agents.meta_gradient import META_PARAMETERS
from jaxcredit.agents.stage_config import (EstimatorConfig, EvalConfig, FittedStageConfig,
                                           FlatField, OffPolicyConfig, Options, StageConfig,
                                           check_count, check_off_policy, record_fields)
from jaxcredit.networks import activation_fn

# Presets: what `algo` fills in for the fields left as None.
ALGO_PRESETS = {
    "ppo": dict(objective="ppo", estimator="gae", update_epochs=4, num_minibatches=4,
                critic=True, normalize_advantage=True, clip_value_loss=True, num_steps=128,
                anneal_lr=True),
    "a2c": dict(objective="pg", estimator="gae", update_epochs=1, num_minibatches=1,
                critic=True, normalize_advantage=False, clip_value_loss=False, num_steps=128,
                anneal_lr=True),
    # REINFORCE: the Monte-Carlo return (bootstrapped only at time-outs), no critic, no baseline.
    "reinforce": dict(objective="pg", estimator="mc", update_epochs=1, num_minibatches=1,
                      critic=False, normalize_advantage=False, clip_value_loss=False,
                      num_steps=128, anneal_lr=True),
    # DQN (off-policy engine, jaxcredit.agents.dqn): one env step per update, replay, a Q-learning
    # target. `estimator` names the target: double_q (Double DQN) or q_learning (DQN).
    "dqn": dict(estimator="double_q", update_epochs=1, num_minibatches=1, critic=False,
                normalize_advantage=False,
                clip_value_loss=False, num_steps=1, anneal_lr=False),
    # PQN (jaxcredit.agents.pqn): Q(λ) over vmapped environments, no replay, a LayerNorm
    # Q-network (set --layer-norm with the preset learner "PQN").
    "pqn": dict(estimator="q_lambda", update_epochs=4, num_minibatches=16, critic=False,
                normalize_advantage=False, clip_value_loss=False, num_steps=64, anneal_lr=True),
}
OFF_POLICY_ALGOS = ("dqn", "pqn")
Q_TARGETS = ("double_q", "q_learning", "q_lambda")
ALGOS = tuple(ALGO_PRESETS)

# Evaluations per run when `eval_every` is left as None.
DEFAULT_EVALUATIONS = 20

# The metadata key of a record field's flag prefix, where it is not "<field>_" (``eval_``).
FLAG_PREFIX = "flag_prefix"


def default_eval_every(num_updates: int) -> int:
    """About :data:`DEFAULT_EVALUATIONS` evaluations: U // 20 updates apart, or a divisor of U
    up to 4x that (5 to 20 evaluations), so that no partial block needs a program of its own."""
    base = max(1, num_updates // DEFAULT_EVALUATIONS)
    return next((k for k in range(base, 4 * base + 1) if num_updates % k == 0), base)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What fixes the compiled program (see module docstring).

    The settings of a stage, of the off-policy learner and of evaluation are records of their
    own (:mod:`jaxcredit.agents.stage_config`); their flags are flat (:func:`flat_fields`).
    A stage may be given by its name alone: ``TrainConfig(estimator="gae")``.
    """

    algo: str = "ppo"
    """the algorithm's preset (jaxcredit list algos; it fills the fields below left unset)"""
    objective: Optional[str] = None
    """objective stage: a registered name or module:factory (default: the algo's)"""
    estimator: EstimatorConfig = dataclasses.field(default_factory=EstimatorConfig)
    """the estimate stage, its options and the fitting of its model"""
    relabel: StageConfig = dataclasses.field(default_factory=StageConfig)
    """the relabel stage and its options (none by default)"""
    redistribute: FittedStageConfig = dataclasses.field(default_factory=FittedStageConfig)
    """the redistribute stage, its options and the fitting of its model (none by default)"""
    env: str = "CartPole-v1"
    """environment name (jaxcredit list envs)"""
    env_options: Options = ()
    """environment options, e.g. n=10 or sigma=1"""
    num_envs: int = 4
    """parallel environments N per run"""
    group_size: int = 1
    """K environments per task instance (grpo, rloo): every window then starts a fresh episode in
    each environment, consecutive groups of K sharing an instance; must divide num_envs"""
    num_steps: Optional[int] = None
    """rollout length T per update (default: 128; 1 for dqn)"""
    total_timesteps: int = 500_000
    """env steps per run; the run does total_timesteps // (N·T) updates"""
    update_epochs: Optional[int] = None
    """optimisation passes over each rollout (default: 4 for ppo, 1 otherwise)"""
    num_minibatches: Optional[int] = None
    """minibatches per pass (default: 4 for ppo, 1 otherwise); must divide N·T"""
    policy: str = "mlp"
    """the agent's network: mlp (memoryless) | gru | lstm | lru (recurrent: an embedding of
    hidden_sizes[0] units, the cell of that width, then actor and critic heads over
    hidden_sizes[1:]; minibatches of whole sequences; lru is memax's linear recurrent unit,
    run by an associative scan) | rma (the Reconstructive Memory Agent: an LSTM controller
    that writes a code of every step into a memory of one row per episode step and reads it by
    attention, with a reconstruction loss; what the tvt redistribute stage reads)"""
    action_dist: Optional[str] = None
    """the policy's law of actions (docs/continuous.md): categorical (discrete; their default) |
    gaussian (Box; their default) | gaussian_state | tanh_gaussian | tanh_gaussian_state"""
    normalize_env: Optional[bool] = None
    """normalise observations and rewards by running statistics across the environments (PureJaxRL's
    NormalizeVec*; jaxcredit.agents.normalize); default: on for continuous actions only"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """widths of the actor's and the critic's MLP towers (see policy for the recurrent layout)"""
    activation: str = "tanh"
    """tanh | relu | gelu | silu"""
    anneal_lr: Optional[bool] = None
    """decay the agent's learning rate linearly to 0 over the run (default: on; off for dqn)"""
    critic: Optional[bool] = None
    """learn V (default: False for reinforce); without a critic value = next_value = 0"""
    normalize_advantage: Optional[bool] = None
    """standardise per-step advantages per minibatch (default: ppo only)"""
    clip_value_loss: Optional[bool] = None
    """PPO-style clipped value loss (default: ppo only)"""
    policy_epsilon: float = 0.0
    """ε of the exploration mixture π_ε = (1 − ε)·softmax + ε/A, used for acting, the stored
    log-probs, the objective and the exact credit models (COCOA: 0.05); evaluation plays the
    softmax policy"""
    adam_eps: float = 1e-5
    """ε of the agent's Adam (PureJaxRL and CleanRL: 1e-5; optax's default and COCOA: 1e-8)"""
    burn_in_updates: int = 0
    """updates at the start that only act: no agent step and no model fit (COCOA-feature: 30);
    their windows are the pretraining data"""
    model_warmup_updates: int = 0
    """updates after any burn-in in which the credit models fit but the agent does not step:
    its first steps then use fitted models, and its Adam moments never hold the outsized
    gradients of an unfitted one (experiments/key_to_door, "The agent's Adam remembers")"""
    meta_gradient: tuple[str, ...] = ()
    """hyper-parameters adapted online by meta-gradient (Xu et al. 2018): gamma, lambda (one-step
    meta-gradient through the agent's Adam step; metrics meta/gamma, meta/lambda)"""
    off_policy: OffPolicyConfig = dataclasses.field(
        default_factory=OffPolicyConfig, metadata={FLAG_PREFIX: ""})
    """dqn: the replay buffer, gradient steps, target network and Q head"""
    evaluation: EvalConfig = dataclasses.field(
        default_factory=EvalConfig, metadata={FLAG_PREFIX: "eval_"})
    """how often, on how many episodes and for how long the policy is evaluated"""

    def __post_init__(self):
        # A stage named by a string (or None) is that stage with its default settings.
        for name, record in _groups().items():
            value = getattr(self, name)
            if issubclass(record, StageConfig) and (value is None or isinstance(value, str)):
                object.__setattr__(self, name, record(name=value))

    @classmethod
    def from_flat(cls, **values) -> "TrainConfig":
        """The config of flat (flag) names: ``from_flat(estimator="hca_state",
        estimator_fit_steps=8, eval_every=0)``; fields not given keep their defaults."""
        fields = {f.name: f.path for f in flat_fields()}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"TrainConfig has no field(s) {', '.join(unknown)}")
        top, grouped = {}, {}
        for name, value in values.items():
            group, *inner = fields[name]
            if inner:
                grouped.setdefault(group, {})[inner[0]] = value
            else:
                top[group] = value
        records = {group: _groups()[group](**kwargs) for group, kwargs in grouped.items()}
        return cls(**top, **records)

    def flat(self) -> dict:
        """The config by flat (flag) names; ``TrainConfig.from_flat(**c.flat()) == c``."""
        return {f.name: _get(self, f.path) for f in flat_fields()}

    def replace(self, **values) -> "TrainConfig":
        """A copy with the fields named by their flat (flag) names changed:
        ``config.replace(eval_every=0, estimator_fit_steps=8)``."""
        return TrainConfig.from_flat(**{**self.flat(), **values})

    def resolved(self) -> "TrainConfig":
        """Fills the algorithm preset, validates, and returns the concrete config."""
        if self.algo not in ALGO_PRESETS:
            raise ValueError(f"unknown algo {self.algo!r}; choose one of {list(ALGOS)}")
        values = self.flat()
        fills = {k: v for k, v in ALGO_PRESETS[self.algo].items() if values[k] is None}
        values.update(fills, total_timesteps=_whole(self.total_timesteps, "total_timesteps"),
                      hidden_sizes=tuple(int(h) for h in self.hidden_sizes),
                      **{name: _options(values[name]) for name in OPTION_FIELDS})
        cfg = TrainConfig.from_flat(**values)
        cfg.validate()
        if cfg.evaluation.every is None:
            cfg = cfg.replace(eval_every=default_eval_every(cfg.num_updates))
        return cfg

    def validate(self) -> None:
        """Raises ValueError with a one-line message on an inconsistent config: each record
        checks its own fields, this the top-level ones and those across records."""
        for name in ("num_envs", "group_size", "num_steps", "total_timesteps", "update_epochs",
                     "num_minibatches"):
            value = getattr(self, name)
            if value is not None:
                check_count(name, value, 1)
        for name in _groups():
            getattr(self, name).validate(_prefix(name))
        unknown = [n for n in self.meta_gradient if n not in META_PARAMETERS]
        if unknown or len(set(self.meta_gradient)) != len(self.meta_gradient):
            raise ValueError(f"meta_gradient takes {' and/or '.join(META_PARAMETERS)} once each, "
                             f"got {' '.join(self.meta_gradient)}")
        if self.meta_gradient and self.num_envs < 2:
            raise ValueError("meta_gradient needs num_envs >= 2: half the window's environments "
                             "take the inner step, the other half score it")
        for name in ("burn_in_updates", "model_warmup_updates"):
            check_count(name, getattr(self, name), 0)
        if self.estimator.pretrain_steps and not self.burn_in_updates:
            raise ValueError("estimator_pretrain_steps needs burn_in_updates >= 1: the burn-in "
                             "windows are the pretraining data")
        if not 0.0 <= self.policy_epsilon < 1.0:
            raise ValueError(f"policy_epsilon must lie in [0, 1), got {self.policy_epsilon!r}")
        if not self.adam_eps > 0:
            raise ValueError(f"adam_eps must be positive, got {self.adam_eps!r}")
        if any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}")
        if self.policy != "mlp" and not self.hidden_sizes:
            raise ValueError(f"--policy {self.policy} needs hidden_sizes: the first is the "
                             "width of its embedding and cell")
        activation_fn(self.activation)  # raises on an unknown name
        check_policy(self.policy, self.algo in OFF_POLICY_ALGOS, bool(self.meta_gradient),
                     self.num_envs, self.num_minibatches)
        if self.algo in OFF_POLICY_ALGOS:
            check_off_policy(self, Q_TARGETS)
        if self.num_envs % self.group_size:
            raise ValueError(f"group_size={self.group_size} does not divide "
                             f"num_envs={self.num_envs}")
        if self.total_timesteps < self.num_envs * self.num_steps:
            raise ValueError(
                f"total_timesteps={self.total_timesteps} is less than one update "
                f"(num_envs × num_steps = {self.num_envs * self.num_steps})")
        if self.num_minibatches is not None and (self.num_envs * self.num_steps) \
                % self.num_minibatches:
            raise ValueError(
                f"num_envs × num_steps = {self.num_envs * self.num_steps} is not divisible by "
                f"num_minibatches={self.num_minibatches}")
        for name in ("estimator", "redistribute"):
            minibatches = getattr(self, name).fit_minibatches
            if self.num_envs % minibatches:
                raise ValueError(f"num_envs={self.num_envs} is not divisible by "
                                 f"{_prefix(name)}fit_minibatches={minibatches}")

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // (self.num_envs * self.num_steps)

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def env_kwargs(self) -> dict:
        return dict(self.env_options)

    def to_dict(self) -> dict:
        """The nested JSON form written to ``config.json`` (options as dicts, tuples as lists)."""
        nested: dict = {}
        for f in flat_fields():
            value = _get(self, f.path)
            value = dict(value) if f.name in OPTION_FIELDS else (
                list(value) if isinstance(value, tuple) else value)
            *outer, last = f.path
            functools.reduce(lambda d, key: d.setdefault(key, {}), outer, nested)[last] = value
        return nested

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """The config of :meth:`to_dict`'s nested form, or of the flat form (flag names) that
        ``config.json`` held before the records (run directories written then still load);
        keys it does not know are ignored."""
        values = {}
        for f in flat_fields():
            found, value = _saved(d, f)
            if found:
                values[f.name] = _options(value) if f.name in OPTION_FIELDS else (
                    tuple(value) if isinstance(value, list) else value)
        return cls.from_flat(**values)


@functools.cache
def _groups() -> dict[str, type]:
    """The fields of TrainConfig that are records, with their record types."""
    hints = typing.get_type_hints(TrainConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainConfig)
            if dataclasses.is_dataclass(hints[f.name])}


def _prefix(group: str) -> str:
    """The flag prefix of a record's fields: ``estimator_``, ``eval_`` for ``evaluation``."""
    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == group)
    return field.metadata.get(FLAG_PREFIX, group + "_")


@functools.cache
def flat_fields() -> tuple[FlatField, ...]:
    """Every field of TrainConfig by its flag, the records' fields in place of the records, in
    the order of the fields: a record's field is ``<prefix><field>`` (:func:`_prefix`), and the
    ``name`` of a stage is the stage's own name (``estimator``)."""
    out = []
    for path, hint, default, doc in record_fields(TrainConfig, ()):
        group = path[0]
        if group not in _groups():
            out.append(FlatField(group, path, hint, default, doc))
            continue
        is_stage = issubclass(_groups()[group], StageConfig)
        for inner, hint, default, doc in record_fields(_groups()[group], path):
            name = group if is_stage and inner[-1] == "name" else _prefix(group) + inner[-1]
            out.append(FlatField(name, inner, hint, default, doc))
    return tuple(out)


def _get(config: Any, path: tuple[str, ...]) -> Any:
    return functools.reduce(getattr, path, config)


def _saved(d: dict, field: FlatField) -> tuple[bool, Any]:
    """``(found, value)`` of a field in a saved config dict, nested (``d["estimator"]
    ["fit_steps"]``) or flat (``d["estimator_fit_steps"]``, the form before the records)."""
    outer = d.get(field.path[0])
    if len(field.path) > 1 and isinstance(outer, dict):
        return field.path[-1] in outer, outer.get(field.path[-1])
    return field.name in d, d.get(field.name)


OPTION_FIELDS = tuple(f.name for f in flat_fields() if f.hint == Options)


def _options(options) -> Options:
    """Options as sorted ``(name, value)`` pairs (lists become tuples, so configs hash)."""
    items = options.items() if isinstance(options, dict) else options
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in items))


def _whole(value, name: str) -> int:
    if isinstance(value, float) and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {value}")
    return int(value)


@struct.dataclass
class Hparams:
    """Sweepable hyper-parameters, float32 leaves (scalars, or stacked ``[S]`` for a sweep)."""

    lr: Any = 2.5e-4
    """the agent's Adam learning rate (annealed linearly to 0 with anneal_lr)"""
    gamma: Any = 0.99
    """discount γ in [0, 1]"""
    lambda_: Any = 0.95
    """trace parameter λ in [0, 1] of λ-returns and GAE"""
    ent_coef: Any = 0.01
    """weight of the entropy bonus"""
    vf_coef: Any = 0.5
    """weight of the value loss"""
    clip_eps: Any = 0.2
    """PPO's ratio clip ε (also the value-clip range); unused by pg"""
    max_grad_norm: Any = 0.5
    """the agent's global gradient-norm clip (inf: no clipping)"""
    weight_decay: Any = 0.0
    """the agent's decoupled weight decay (> 0: AdamW; optax.adamw's default and COCOA: 1e-4)"""
    estimator_lr: Any = 1e-3
    """Adam learning rate of a learned estimator's model (its own optimiser)"""
    estimator_max_grad_norm: Any = 1.0
    """global gradient-norm clip of a learned estimator's model (inf: no clipping)"""
    estimator_weight_decay: Any = 0.0
    """decoupled weight decay of a learned estimator's model (> 0: AdamW)"""
    redistributor_lr: Any = 1e-3
    """Adam learning rate of a learned redistributor's model"""
    redistributor_max_grad_norm: Any = 1.0
    """global gradient-norm clip of a learned redistributor's model (inf: no clipping)"""
    redistributor_weight_decay: Any = 0.0
    """decoupled weight decay of a learned redistributor's model (> 0: AdamW)"""
    epsilon_start: Any = 1.0
    """dqn: ε of ε-greedy acting at the first update"""
    epsilon_end: Any = 0.05
    """dqn: ε after the decay (linear over epsilon_fraction of the run)"""
    epsilon_fraction: Any = 0.5
    """dqn: fraction of the run over which ε decays linearly"""
    tau: Any = 1.0
    """dqn: target-network update weight (1: copy; < 1: Polyak averaging)"""
    meta_lr: Any = 1e-3
    """Adam learning rate of the meta-gradient's γ and λ (with --meta-gradient)"""
    meta_gamma_reference: Any = 0.995
    """γ̄ of the meta-objective's return (Xu et al. 2018's Atari value)"""
    meta_lambda_reference: Any = 1.0
    """λ̄ of the meta-objective's return (Xu et al. 2018: 1)"""

    @classmethod
    def create(cls, **values) -> "Hparams":
        """Builds float32 leaves from Python numbers (or arrays), validating ranges."""
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown hyper-parameter(s) {sorted(unknown)}; known: {FIELDS}")
        hp = cls(**{k: jnp.asarray(v, jnp.float32) for k, v in {**DEFAULTS, **values}.items()})
        validate_hparams(hp)
        return hp

    def to_dict(self) -> dict:
        return {k: np.asarray(getattr(self, k)).tolist() for k in FIELDS}


FIELDS = tuple(f.name for f in dataclasses.fields(Hparams))
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Hparams)}
POSITIVE = ("lr", "max_grad_norm", "estimator_lr", "estimator_max_grad_norm", "redistributor_lr",
            "redistributor_max_grad_norm", "meta_lr")
NON_NEGATIVE = ("ent_coef", "vf_coef", "clip_eps", "weight_decay", "estimator_weight_decay",
                "redistributor_weight_decay")
# Gradient-norm clips may be +inf: no clipping.
MAY_BE_INFINITE = ("max_grad_norm", "estimator_max_grad_norm", "redistributor_max_grad_norm")
UNIT_INTERVAL = {"gamma": "gamma", "lambda_": "lambda", "epsilon_start": "epsilon_start",
                 "epsilon_end": "epsilon_end", "meta_gamma_reference": "meta_gamma_reference",
                 "meta_lambda_reference": "meta_lambda_reference"}
UNIT_INTERVAL_POSITIVE = ("epsilon_fraction", "tau")


def _shown(values: np.ndarray) -> str:
    """Values as the user typed them (float32 leaves print as 1.2000000476837158 otherwise)."""
    return ", ".join(f"{float(v):.6g}" for v in values)


def validate_hparams(hp: Hparams) -> None:
    """Checks ranges on concrete values; raises ValueError with a one-line message."""
    def values(name):
        return np.atleast_1d(np.asarray(jax.device_get(getattr(hp, name)), np.float64))

    for name in FIELDS:
        v = values(name)
        if not np.all(np.isfinite(v) | ((v == np.inf) & (name in MAY_BE_INFINITE))):
            raise ValueError(f"{name} must be finite, got {_shown(v)}")
    for name, shown in UNIT_INTERVAL.items():
        v = values(name)
        if np.any((v < 0) | (v > 1)):
            raise ValueError(f"{shown} must lie in [0, 1], got {_shown(v)}")
    for name in UNIT_INTERVAL_POSITIVE:
        v = values(name)
        if np.any((v <= 0) | (v > 1)):
            raise ValueError(f"{name} must lie in (0, 1], got {_shown(v)}")
    for name in POSITIVE:
        if np.any(values(name) <= 0):
            raise ValueError(f"{name} must be positive, got {_shown(values(name))}")
    for name in NON_NEGATIVE:
        if np.any(values(name) < 0):
            raise ValueError(f"{name} must be non-negative, got {_shown(values(name))}")


def stack_hparams(settings: list[Hparams]) -> Hparams:
    """Stacks scalar settings into one ``Hparams`` with a leading sweep axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *settings)


def num_settings(hp: Hparams) -> int:
    """Length of the leading sweep axis (1 for scalar hparams)."""
    shapes = {np.shape(getattr(hp, k)) for k in FIELDS}
    if shapes == {()}:
        return 1
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"hparams leaves must all be scalars or all [S]; got shapes {shapes}")
    return next(iter(shapes))[0]

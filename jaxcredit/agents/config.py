"""The two halves of a run's settings: a frozen ``TrainConfig`` and a ``Hparams`` pytree.

``TrainConfig`` holds everything that fixes the compiled program: shapes (number of envs, rollout
length, network widths), loop counts (updates, epochs, minibatches) and discrete choices
(algorithm, estimator, environment). Changing any of it means a new compile.

``Hparams`` holds the floats a researcher sweeps: learning rate, γ, λ, loss coefficients, clip ε.
They are pytree leaves (float32 scalars), so ``jax.vmap`` over a stacked ``Hparams`` trains many
settings in one compiled program (the rejax idea). Estimators read ``hparams.gamma`` and
``hparams.lambda_`` from it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxcredit.networks import activation_fn

ALGOS = ("ppo", "a2c", "reinforce")

# Per-algorithm defaults for the fields left as None in TrainConfig.
_ALGO_DEFAULTS = {
    "ppo": dict(update_epochs=4, num_minibatches=4, critic=True, normalize_advantage=True,
                clip_value_loss=True),
    "a2c": dict(update_epochs=1, num_minibatches=1, critic=True, normalize_advantage=False,
                clip_value_loss=False),
    "reinforce": dict(update_epochs=1, num_minibatches=1, critic=False,
                      normalize_advantage=False, clip_value_loss=False),
}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What fixes the compiled program (see module docstring).

    Attributes:
      algo: "ppo" (clipped surrogate, epochs × minibatches), "a2c" (one synchronous policy-gradient
        step per rollout with a learned critic) or "reinforce" (like a2c without a critic: the
        trajectory's values are zero, so the credit is the plain return).
      estimator: credit estimator name for ``jaxcredit.estimators.make_estimator``.
      estimator_options: ``(name, value)`` pairs for ``make_estimator``, e.g. ``(("n", 5),)``.
      env: environment name for ``jaxcredit.envs.make``.
      env_options: ``(name, value)`` pairs passed to the environment constructor.
      num_envs: parallel environments N per run.
      num_steps: rollout length T per update.
      total_timesteps: env steps per run; the run does total_timesteps // (N·T) updates.
      update_epochs, num_minibatches: optimisation passes per rollout; None = algorithm default.
      hidden_sizes, activation: the actor and critic MLP towers.
      anneal_lr: decay the learning rate linearly to 0 over the updates.
      critic: learn V (None = algorithm default). Without a critic ``value = next_value = 0``.
      normalize_advantage: standardise per-step advantages per minibatch (None = algo default).
      clip_value_loss: PPO-style clipped value loss (None = algo default).
    """

    algo: str = "ppo"
    estimator: str = "gae"
    estimator_options: tuple[tuple[str, Any], ...] = ()
    env: str = "CartPole-v1"
    env_options: tuple[tuple[str, Any], ...] = ()
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    update_epochs: int | None = None
    num_minibatches: int | None = None
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    anneal_lr: bool = True
    critic: bool | None = None
    normalize_advantage: bool | None = None
    clip_value_loss: bool | None = None

    def resolved(self) -> "TrainConfig":
        """Fills algorithm defaults, validates, and returns the concrete config."""
        if self.algo not in ALGOS:
            raise ValueError(f"unknown algo {self.algo!r}; choose one of {list(ALGOS)}")
        fills = {k: v for k, v in _ALGO_DEFAULTS[self.algo].items() if getattr(self, k) is None}
        cfg = dataclasses.replace(
            self, total_timesteps=int(self.total_timesteps),
            hidden_sizes=tuple(int(h) for h in self.hidden_sizes),
            estimator_options=tuple(sorted(dict(self.estimator_options).items())),
            env_options=tuple(sorted(dict(self.env_options).items())), **fills,
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raises ValueError with a one-line message on an inconsistent config."""
        for name in ("num_envs", "num_steps", "total_timesteps", "update_epochs",
                     "num_minibatches"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, np.integer)) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}")
        activation_fn(self.activation)  # raises on an unknown name
        if self.total_timesteps < self.num_envs * self.num_steps:
            raise ValueError(
                f"total_timesteps={self.total_timesteps} is less than one update "
                f"(num_envs × num_steps = {self.num_envs * self.num_steps})")
        if self.num_minibatches is not None and self.num_envs % self.num_minibatches:
            raise ValueError(
                f"num_envs={self.num_envs} is not divisible by num_minibatches="
                f"{self.num_minibatches} (minibatches split the environments)")

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // (self.num_envs * self.num_steps)

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def estimator_kwargs(self) -> dict:
        return dict(self.estimator_options)

    @property
    def env_kwargs(self) -> dict:
        return dict(self.env_options)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["estimator_options"] = dict(self.estimator_options)
        d["env_options"] = dict(self.env_options)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["estimator_options"] = tuple(sorted(d.get("estimator_options", {}).items()))
        d["env_options"] = tuple(sorted(d.get("env_options", {}).items()))
        d["hidden_sizes"] = tuple(d.get("hidden_sizes", (64, 64)))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@struct.dataclass
class Hparams:
    """Sweepable hyper-parameters, float32 leaves (scalars, or stacked ``[S]`` for a sweep).

    Attributes:
      lr: Adam learning rate (annealed linearly to 0 when ``config.anneal_lr``).
      gamma: discount γ ∈ [0, 1].
      lambda_: trace parameter λ ∈ [0, 1] of λ-returns / GAE.
      ent_coef: weight of the entropy bonus.
      vf_coef: weight of the value loss.
      clip_eps: PPO ratio clip ε (also the value-clip range); unused by a2c / reinforce.
      max_grad_norm: global gradient-norm clip.
      est_coef: weight of a learned estimator's loss (it shares the agent's optimiser).
    """

    lr: Any = 2.5e-4
    gamma: Any = 0.99
    lambda_: Any = 0.95
    ent_coef: Any = 0.01
    vf_coef: Any = 0.5
    clip_eps: Any = 0.2
    max_grad_norm: Any = 0.5
    est_coef: Any = 1.0

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


def validate_hparams(hp: Hparams) -> None:
    """Checks ranges on concrete values; raises ValueError with a one-line message."""
    def values(name):
        return np.atleast_1d(np.asarray(jax.device_get(getattr(hp, name)), np.float64))

    for name in FIELDS:
        if not np.all(np.isfinite(values(name))):
            raise ValueError(f"{name} must be finite, got {values(name).tolist()}")
    for name in ("gamma", "lambda_"):
        v = values(name)
        if np.any((v < 0) | (v > 1)):
            shown = "lambda" if name == "lambda_" else name
            raise ValueError(f"{shown} must lie in [0, 1], got {v.tolist()}")
    for name in ("lr", "max_grad_norm"):
        if np.any(values(name) <= 0):
            raise ValueError(f"{name} must be positive, got {values(name).tolist()}")
    for name in ("ent_coef", "vf_coef", "clip_eps", "est_coef"):
        if np.any(values(name) < 0):
            raise ValueError(f"{name} must be non-negative, got {values(name).tolist()}")


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

"""Action distributions: what the actor's outputs mean, for discrete and continuous actions.

The actor's head outputs the parameters of π(· | s). Through the whole engine they keep one name,
``logits`` (``Trajectory.logits``, ``PolicyOutputs.logits``), whatever the action space:

* ``categorical`` (a ``Discrete(A)`` space): logits z ``[..., A]``; the action is an int32 index.
* the diagonal Gaussians (a ``Box`` space of D dimensions): ``[..., 2D]``, the mean μ and the log
  standard deviation log σ side by side; the action is a float32 vector ``[..., D]``.

  - ``gaussian``: log σ is a learned vector, the same in every state (PureJaxRL's and CleanRL's
    ``ppo_continuous_action.py``: initialised at 0). The environment gets the sample clipped to
    the space's bounds (PureJaxRL's ``ClipAction``); the stored action, its log-density and the
    objective are those of the unclipped sample, so the ratio of PPO stays exact.
  - ``gaussian_state``: log σ is a second output of the actor's head (state-dependent), clipped
    to [−5, 2] as in Brax's and SAC's implementations, so σ neither vanishes nor explodes.
  - ``tanh_gaussian`` / ``tanh_gaussian_state``: the sample u is squashed, and the environment
    gets low + (tanh(u) + 1)(high − low)/2 (SAC, Haarnoja et al. 2018, appendix C; Brax's
    ``NormalTanhDistribution``). As Brax does, the stored action is the *pre-squash* u: its
    log-density log π(u) − Σ_d log(1 − tanh²(u_d)) (distrax's ``Tanh`` bijector) stays finite
    where tanh(u) saturates, while the squashed action's atanh would not. The affine map onto
    the bounds adds a constant to log π, which cancels in every ratio and gradient and is left
    out. Entropy has no closed form under tanh; the entropy bonus uses the Gaussian's.

Every distribution has ``sample(key, logits)``, ``log_prob(logits, action)``,
``entropy(logits)``, ``mode(logits)`` (what greedy evaluation plays) and ``to_env(action)``
(what the environment is given). :func:`action_features` is the float encoding of an action that
learned credit models read (one-hot for a discrete action, the vector itself for a continuous
one).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import distrax
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

LOG_STD_RANGE = (-5.0, 2.0)
"""Where a state-dependent log σ is clipped (Brax's PPO and SAC networks use this range)."""

DISTRIBUTIONS = ("categorical", "gaussian", "gaussian_state", "tanh_gaussian",
                 "tanh_gaussian_state")


@dataclasses.dataclass(frozen=True)
class ActionDistribution:
    """The law of actions given the actor's outputs (module docstring).

    Attributes:
      name: one of ``DISTRIBUTIONS``.
      action_dim: A (the number of actions) for ``categorical``; D for the Gaussians.
      low, high: the bounds of a ``Box`` space, per dimension (continuous only).
    """

    name: str
    action_dim: int
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    def __post_init__(self):
        if self.name not in DISTRIBUTIONS:
            raise ValueError(f"unknown action distribution {self.name!r}; choose one of "
                             f"{', '.join(DISTRIBUTIONS)}")

    @property
    def continuous(self) -> bool:
        return self.name != "categorical"

    @property
    def squashed(self) -> bool:
        return self.name.startswith("tanh_")

    @property
    def state_dependent_std(self) -> bool:
        return self.name.endswith("_state")

    @property
    def head_size(self) -> int:
        """Outputs of the actor's last layer: A logits, D means, or D means and D log σ."""
        if not self.continuous:
            return self.action_dim
        return 2 * self.action_dim if self.state_dependent_std else self.action_dim

    @property
    def logits_size(self) -> int:
        """The trailing size of ``logits``: A, or 2D (μ and log σ)."""
        return self.action_dim if not self.continuous else 2 * self.action_dim

    def action_shape(self) -> tuple[int, ...]:
        """Trailing shape of one action: () for a discrete index, (D,) for a vector."""
        return (self.action_dim,) if self.continuous else ()

    def action_dtype(self):
        return jnp.float32 if self.continuous else jnp.int32

    def _gaussian(self, logits: Array):
        mean, log_std = jnp.split(logits.astype(jnp.float32), 2, axis=-1)
        return distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))

    def sample(self, key: Array, logits: Array) -> Array:
        if not self.continuous:
            return jax.random.categorical(key, logits)
        return self._gaussian(logits).sample(seed=key)

    def log_prob(self, logits: Array, action: Array) -> Array:
        """log π(a | s) ``[...]`` (for the squashed ones, of the pre-squash u: docstring)."""
        if not self.continuous:
            log_pi = jax.nn.log_softmax(logits, axis=-1)
            return jnp.take_along_axis(log_pi, action[..., None].astype(jnp.int32), -1)[..., 0]
        log_density = self._gaussian(logits).log_prob(action)
        if self.squashed:
            log_density -= distrax.Tanh().forward_log_det_jacobian(action).sum(-1)
        return log_density

    def entropy(self, logits: Array) -> Array:
        """H(π(· | s)) ``[...]`` (the Gaussian's before any squashing)."""
        if not self.continuous:
            log_pi = jax.nn.log_softmax(logits, axis=-1)
            return -(jnp.exp(log_pi) * log_pi).sum(-1)
        return self._gaussian(logits).entropy()

    def mode(self, logits: Array) -> Array:
        """The most likely action: argmax of the logits, the Gaussian's mean."""
        if not self.continuous:
            return jnp.argmax(logits, axis=-1)
        return jnp.split(logits.astype(jnp.float32), 2, axis=-1)[0]

    def to_env(self, action: Array) -> Array:
        """What the environment is given for a stored action (module docstring)."""
        if not self.continuous:
            return action
        low, high = jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32)
        if self.squashed:
            return low + 0.5 * (jnp.tanh(action) + 1.0) * (high - low)
        return jnp.clip(action, low, high)

    def logits(self, head: Array, log_std: Optional[Array] = None) -> Array:
        """The distribution's parameters from the actor's head ``[..., head_size]`` and, for
        ``gaussian``, the learned state-independent ``log_std [D]``."""
        if not self.continuous:
            return head
        if self.state_dependent_std:
            mean, raw = jnp.split(head, 2, axis=-1)
            return jnp.concatenate([mean, jnp.clip(raw, *LOG_STD_RANGE)], axis=-1)
        return jnp.concatenate([head, jnp.broadcast_to(log_std, head.shape)], axis=-1)


def for_space(space, name: Optional[str] = None) -> ActionDistribution:
    """The action distribution of a gymnax action space: ``name``, or by default ``categorical``
    for a ``Discrete`` space and ``gaussian`` for a ``Box``; a one-line ValueError for a name that
    does not fit the space or a space of another kind."""
    if hasattr(space, "n"):
        if name not in (None, "categorical"):
            raise ValueError(f"action distribution {name!r} is for continuous actions; this "
                             f"environment's actions are discrete ({int(space.n)} of them)")
        return ActionDistribution("categorical", int(space.n))
    if hasattr(space, "low") and hasattr(space, "high"):
        shape = tuple(space.shape) if space.shape else (1,)
        if len(shape) != 1:
            raise ValueError(f"continuous actions must be a vector; this space has shape {shape}")
        name = name or "gaussian"
        if name == "categorical":
            raise ValueError("action distribution 'categorical' needs discrete actions; this "
                             f"environment's are continuous ({shape[0]} dimensions)")
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        if name.startswith("tanh_") and not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(f"action distribution {name!r} squashes onto the action bounds, and "
                             "this space has infinite ones")
        return ActionDistribution(name, shape[0], tuple(map(float, low)),
                                  tuple(map(float, high)))
    raise ValueError(f"unsupported action space {type(space).__name__}; jaxcredit's policies "
                     "need Discrete or Box actions")


def action_features(action: Array, num_actions: int) -> Array:
    """The float encoding of actions ``[...]`` that learned credit models read:
    ``one_hot(action, num_actions)`` ``[..., A]`` for discrete actions; a continuous action
    ``[..., D]`` (any float dtype) as it is, ``num_actions`` unused."""
    if jnp.issubdtype(action.dtype, jnp.integer):
        return jax.nn.one_hot(action, num_actions, dtype=jnp.float32)
    return action.astype(jnp.float32)

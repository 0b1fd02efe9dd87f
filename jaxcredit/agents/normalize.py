"""Running normalisation of observations and rewards, across the run's environments.

Continuous-control policy gradients learn on a scale the environments do not share: Pendulum's
reward is about −16 a step and its observations mix an angle's cosine with a velocity up to 8.
PureJaxRL's ``ppo_continuous_action.py`` therefore wraps its environments in
``NormalizeVecObservation`` and ``NormalizeVecReward`` (as CleanRL's and Stable-Baselines3's
``VecNormalize`` do); jaxcredit keeps the same statistics in the runner (``EnvRunner.normalizer``):

* observations: o ↦ (o − μ) / √(σ² + 10⁻⁸), with μ and σ² the running mean and variance of every
  observation the run's environments have produced, updated with each step's batch (Chan et al.'s
  parallel combination of moments; the count starts at 10⁻⁴, the mean at 0 and the variance at 1,
  PureJaxRL's values);
* rewards: r ↦ r / √(σ_G² + 10⁻⁸), with σ_G² the running variance of each environment's discounted
  return so far, G ← γ G + r, set back to 0 where an episode ends (Gymnasium's
  ``NormalizeReward``). The sign and the ordering of returns are kept; the scale is not.

The statistics are part of the train state (checkpointed, one set per seed of a sweep). The
credit pipeline sees the normalised rewards and observations; the episode returns reported and
evaluation's returns are the environment's own. Evaluation reads observations through the same
statistics, frozen.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array

EPSILON = 1e-8
INITIAL_COUNT = 1e-4


@struct.dataclass
class RunningMoments:
    """Mean and variance of a stream of batches, and how many samples they hold."""

    mean: Array
    var: Array
    count: Array

    @classmethod
    def zeros(cls, shape=()) -> "RunningMoments":
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32),
                   jnp.asarray(INITIAL_COUNT, jnp.float32))

    def update(self, batch: Array) -> "RunningMoments":
        """The moments with ``batch [B, *shape]`` added (Chan, Golub & LeVeque 1979)."""
        batch = batch.astype(jnp.float32)
        n = jnp.asarray(batch.shape[0], jnp.float32)
        batch_mean, batch_var = batch.mean(0), batch.var(0)
        total = self.count + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + jnp.square(delta) * self.count * n / total
        return RunningMoments(mean, m2 / total, total)


@struct.dataclass
class Normalizer:
    """The running statistics of one run (module docstring); None entries are not normalised.

    Attributes:
      obs: moments of the observations ``[*obs_shape]``, or None.
      returns: moments of the discounted returns (scalars), or None.
      discounted: ``[N]`` each environment's discounted return so far.
    """

    obs: RunningMoments | None
    returns: RunningMoments | None
    discounted: Array

    def observation(self, obs: Array) -> Array:
        """Observations as the policy sees them."""
        if self.obs is None:
            return obs
        return (obs - self.obs.mean) / jnp.sqrt(self.obs.var + EPSILON)

    def observe(self, obs: Array) -> "Normalizer":
        """The statistics with a batch of observations ``[N, *obs_shape]`` added."""
        return self if self.obs is None else self.replace(obs=self.obs.update(obs))

    def reward(self, reward: Array, done: Array, gamma) -> tuple["Normalizer", Array]:
        """``(statistics, scaled reward [N])`` after one step of every environment."""
        if self.returns is None:
            return self, reward
        discounted = gamma * self.discounted + reward
        returns = self.returns.update(discounted)
        scaled = reward / jnp.sqrt(returns.var + EPSILON)
        return (self.replace(returns=returns, discounted=jnp.where(done, 0.0, discounted)),
                scaled)


def make_normalizer(obs_shape: tuple[int, ...], num_envs: int, observations: bool,
                    rewards: bool) -> Normalizer | None:
    """Fresh statistics, or None when neither observations nor rewards are normalised."""
    if not (observations or rewards):
        return None
    return Normalizer(obs=RunningMoments.zeros(obs_shape) if observations else None,
                      returns=RunningMoments.zeros() if rewards else None,
                      discounted=jnp.zeros((num_envs,), jnp.float32))

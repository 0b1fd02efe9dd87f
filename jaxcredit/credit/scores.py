"""Scoring the credit a run assigns against the environment's per-step ground truth.

Environments that label every step (``Trajectory.extras["label"]``: CommandChain's 0 irrelevant,
1 necessary, 2 fatal, 3 after-fatal) let the engine say, inside the compiled update, how often the
credit of the action taken has the right sign, and where the learning signal comes from:

* ``sign_necessary``: fraction of necessary steps with credit > 0;
* ``sign_fatal``: fraction of fatal steps with credit < 0;
* ``failed_sign_necessary``: ``sign_necessary`` over the steps of failed episodes only (do failed
  episodes teach the steps that were right?);
* ``failed_share``: Σ|credit| over the steps of failed episodes / Σ|credit| (how much of the
  learning signal comes from failed episodes);
* ``after_fatal_share``: Σ|credit| on steps after a fatal one (true credit 0) / Σ|credit|.

Structural labels rather than A^π of the current policy score the signs: under a risky policy an
irrelevant step can have positive A^π (it skips the fatal lottery), but a necessary step is always
good for a policy that finishes and a fatal one always bad. A failed episode is one whose return
(within the window) is ≤ 0. Fractions with no eligible step are NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcredit.estimators.group import first_episode_mask
from jaxcredit.types import Trajectory

Array = jax.Array
NECESSARY, FATAL, AFTER_FATAL = 1, 2, 3


def episode_returns(reward: Array, done: Array) -> Array:
    """``[T, N]``: the undiscounted return of the episode each step belongs to (the part of it
    inside the window)."""
    def backward(carry, x):
        r, d = x
        carry = jnp.where(d, 0.0, carry) + r
        return carry, carry

    def forward(carry, x):
        r, d = x
        carry = carry + r
        return jnp.where(d, 0.0, carry), carry

    zeros = jnp.zeros(reward.shape[1:], reward.dtype)
    _, to_go = jax.lax.scan(backward, zeros, (reward, done), reverse=True)
    _, so_far = jax.lax.scan(forward, zeros, (reward, done))
    return to_go + so_far - reward


def _fraction(hit: Array, eligible: Array) -> Array:
    count = eligible.sum()
    return jnp.where(count > 0, (hit & eligible).sum() / jnp.maximum(count, 1), jnp.nan)


def _share(weight: Array, part: Array) -> Array:
    total = weight.sum()
    return jnp.where(total > 0, jnp.where(part, weight, 0.0).sum() / total, jnp.nan)


def step_label_scores(trajectory: Trajectory, advantage: Array, episodic: bool) -> dict:
    """The scores of the module docstring for credit ``advantage`` (``[T, N]`` for the action
    taken, or ``[T, N, A]`` for every action). ``episodic``: only each column's first episode
    counts (the engine's episode windows)."""
    if advantage.ndim == trajectory.action.ndim + 1:
        advantage = jnp.take_along_axis(advantage, trajectory.action[..., None], axis=-1)[..., 0]
    label = trajectory.extras["label"]
    counted = (first_episode_mask(trajectory.done) if episodic
               else jnp.ones_like(label, bool))
    failed = episode_returns(trajectory.reward, trajectory.done) <= 0
    necessary, fatal = counted & (label == NECESSARY), counted & (label == FATAL)
    weight = jnp.where(counted, jnp.abs(advantage), 0.0)
    return {
        "sign_necessary": _fraction(advantage > 0, necessary),
        "sign_fatal": _fraction(advantage < 0, fatal),
        "failed_sign_necessary": _fraction(advantage > 0, necessary & failed),
        "failed_share": _share(weight, failed),
        "after_fatal_share": _share(weight, label == AFTER_FATAL),
    }

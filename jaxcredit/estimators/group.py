"""Outcome-only group baselines of RL post-training: GRPO, Dr. GRPO and RLOO.

K episodes of the same task instance form a group (``TrainConfig.group_size``; the engine resets
environments ``g·K … g·K + K − 1`` to one instance at the start of every window, and the window
covers one whole episode). Each episode n gets one outcome R_n, its undiscounted return, and every
step of the episode the same advantage A_n, built from the group alone, with no critic:

* GRPO (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300):
  A_n = (R_n − mean_g R) / (std_g R + ε), 0 where the group's outcomes are all equal;
* Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): A_n = R_n − mean_g R (no std: the std divisor
  up-weights instances that are nearly always or nearly never solved);
* RLOO (Ahmadian et al. 2024, arXiv 2402.14740): A_n = R_n − (Σ_g R − R_n)/(K − 1), the mean of
  the *other* episodes, a baseline independent of episode n, hence unbiased.

A group whose episodes all failed (or all passed) gives A ≡ 0 under every one of them: outcome-only
methods learn nothing from it. With reward only at the end, γ = 1 and a per-instance constant
baseline, these are GAE with λ = 1 and V(s_t) := b_g at every t: all steps of an episode get the
same credit, and necessary, irrelevant and fatal steps are told apart only across episodes.

Steps after the first episode end in a window column get zero advantage (the engine's group
windows hold exactly one episode, so there are none there). The std is Bessel's (ddof = 1, as
TRL and verl compute it) unless ``ddof=0``; K = 1 is rejected (no group to compare with).
"""

from __future__ import annotations

from typing import Any, Optional

import chex
import jax
import jax.numpy as jnp

from jaxcredit.estimators.base import Estimator
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

# Groups whose outcome std is below this count as all equal (A = 0 there, not 0 / ε).
EQUAL_TOL = 1e-6


def first_episode_mask(done: Array) -> Array:
    """``[T, N]`` True for the steps of each column's first episode (up to its first end)."""
    done = done.astype(jnp.int32)
    return (jnp.cumsum(done, axis=0) - done) == 0


def episode_outcome(reward: Array, done: Array) -> Array:
    """``[N]`` undiscounted return of each column's first episode."""
    chex.assert_equal_shape([reward, done])
    return jnp.sum(jnp.where(first_episode_mask(done), reward, 0.0), axis=0)


def group_relative_advantages(outcome: Array, group_size: int, std_normalize: bool = True,
                              ddof: int = 1, eps: float = 1e-6) -> Array:
    """GRPO's (``std_normalize``) or Dr. GRPO's per-episode advantage, ``[N]`` with N = G·K in
    group-major order (episode g·K + k is member k of group g)."""
    chex.assert_rank(outcome, 1)
    grouped = outcome.reshape(-1, group_size)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    if std_normalize:
        std = grouped.std(axis=1, ddof=ddof, keepdims=True)
        centred = jnp.where(std < EQUAL_TOL, 0.0, centred / (std + eps))
    return centred.reshape(-1)


def leave_one_out_advantages(outcome: Array, group_size: int) -> Array:
    """RLOO's per-episode advantage R_n − mean of the other K − 1 outcomes of its group, ``[N]``."""
    chex.assert_rank(outcome, 1)
    grouped = outcome.reshape(-1, group_size)
    others = (grouped.sum(axis=1, keepdims=True) - grouped) / (group_size - 1)
    return (grouped - others).reshape(-1)


def _check_group_size(name: str, group_size: Optional[int]) -> int:
    if group_size is None:
        raise ValueError(f"estimator {name!r} compares the episodes of a group that shares a task "
                         "instance; set group_size (e.g. --group-size 8)")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"estimator {name!r} needs group_size >= 2 (a group of one episode has no "
                         f"baseline), got {group_size!r}")
    return group_size


def broadcast_episode_credit(per_episode: Array, trajectory: Trajectory,
                             diagnostics: dict) -> Credit:
    """Every step of an episode gets its episode's advantage (0 after the first episode end)."""
    mask = first_episode_mask(trajectory.done)
    outcome = episode_outcome(trajectory.reward, trajectory.done)
    advantage = jnp.where(mask, per_episode[None, :], 0.0)
    return Credit(advantage=advantage,
                  value_target=jnp.where(mask, outcome[None, :], 0.0),
                  diagnostics={"advantage_mean": advantage.mean(),
                               "advantage_std": advantage.std(), **diagnostics})


def _equal_share(outcome: Array, group_size: int) -> Array:
    """Fraction of groups whose episodes all had the same outcome (they teach nothing)."""
    grouped = outcome.reshape(-1, group_size)
    return jnp.mean(jnp.all(grouped == grouped[:, :1], axis=1).astype(jnp.float32))


def grpo(group_size: Optional[int] = None, std_normalize: bool = True, ddof: int = 1,
         eps: float = 1e-6) -> Estimator:
    """GRPO's group-relative advantage (``std_normalize=False``: Dr. GRPO's)."""
    K = _check_group_size("grpo", group_size)
    if ddof not in (0, 1):
        raise ValueError(f"grpo: ddof must be 0 or 1, got {ddof!r}")

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, hparams, key
        outcome = episode_outcome(trajectory.reward, trajectory.done)
        per_episode = group_relative_advantages(outcome, K, std_normalize, ddof, eps)
        return broadcast_episode_credit(per_episode, trajectory,
                                        {"equal_groups": _equal_share(outcome, K)})

    return Estimator(name="grpo" if std_normalize else "dr_grpo", assign=assign,
                     episode_windows=True, continuous_actions=True)


def dr_grpo(group_size: Optional[int] = None) -> Estimator:
    """Dr. GRPO: GRPO without the std divisor, A_n = R_n − mean_g R."""
    return grpo(group_size, std_normalize=False)


def rloo(group_size: Optional[int] = None) -> Estimator:
    """REINFORCE leave-one-out: A_n = R_n − mean of the group's other outcomes."""
    K = _check_group_size("rloo", group_size)

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, hparams, key
        outcome = episode_outcome(trajectory.reward, trajectory.done)
        per_episode = leave_one_out_advantages(outcome, K)
        return broadcast_episode_credit(per_episode, trajectory,
                                        {"equal_groups": _equal_share(outcome, K)})

    return Estimator(name="rloo", assign=assign, episode_windows=True, continuous_actions=True)

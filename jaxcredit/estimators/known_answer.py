"""Hindsight from a known answer: the steps of failed episodes that agree with the reference
solution get positive credit, so a failed episode still teaches the steps that were right.

For tasks whose solution is known at training time (a reference patch, a verified answer, a
planner's path), a checker can say after the fact which steps of an episode agree with it:
CommandChain's ``agrees`` extra marks the step that the known solution calls for next, judged from
the commands issued so far. The estimator adds a bonus to those steps of failed episodes::

    A_t = A^base_t + b · agrees_t · [R_n ≤ 0]

on top of an outcome-only group baseline A^base (``rloo`` by default; ``grpo``, ``dr_grpo``).
Under the policy gradient the bonus is a weighted imitation term b ∇log π(a_t | s_t) on the
agreeing steps of failed episodes: what SWEET-RL (a critic that sees the reference solution) and
DeSA (search steps scored against the gold answer) do with a learned or rule-based judge, here with
the exact checker. In a group where every episode failed the base is 0 and the bonus is the only
signal.

What it cannot see: which commands are fatal (the answer says what to do, not what breaks the
task). A solution command issued after a fatal one still "agrees" and gets the bonus although its
true credit is 0; a fatal step gets only the base's (negative) credit.
"""

from __future__ import annotations

from typing import Any, Optional

import jax.numpy as jnp

from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.group import episode_outcome, first_episode_mask
from jaxcredit.types import Credit, Trajectory

BASES = ("rloo", "grpo", "dr_grpo")


def known_answer(group_size: Optional[int] = None, base: str = "rloo", bonus: float = 1.0,
                 failed_only: bool = True) -> Estimator:
    """Group baseline plus ``bonus`` on the answer-agreeing steps of failed episodes
    (``failed_only=False``: of every episode)."""
    if base not in BASES:
        raise ValueError(f"known_answer: base must be one of {BASES}, got {base!r}")
    if not bonus >= 0:
        raise ValueError(f"known_answer: bonus must be non-negative, got {bonus!r}")
    from jaxcredit.estimators.registry import make_estimator  # noqa: PLC0415

    inner = make_estimator(base, context={"group_size": group_size})

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        if trajectory.extras is None or "agrees" not in trajectory.extras:
            raise ValueError("the known_answer estimator needs the environment's per-step "
                             "'agrees' check (Trajectory.extras), e.g. CommandChain's")
        credit = inner.assign(params, trajectory, hparams, key)
        mask = first_episode_mask(trajectory.done)
        outcome = episode_outcome(trajectory.reward, trajectory.done)
        eligible = jnp.ones_like(outcome, bool) if not failed_only else outcome <= 0
        hint = trajectory.extras["agrees"] & eligible[None, :] & mask
        advantage = credit.advantage + bonus * hint.astype(jnp.float32)
        return credit.replace(advantage=advantage, diagnostics={
            **credit.diagnostics, "advantage_mean": advantage.mean(),
            "advantage_std": advantage.std(), "hinted_steps": hint.mean()})

    return Estimator(name="known_answer", assign=assign, episode_windows=True)

"""Best-of-N selection: pick one of N sampled solutions by a grader's score or by majority vote.

For each problem a pool of S solutions is sampled once; the accuracy at N ≤ S is estimated as in
Lightman et al. (2023, Sec. 3.3): draw random subsets of N solutions from the pool (without
replacement), select one per subset, and average the selected solutions' correctness over the
subsets. Selection rules:

* by score: the solution with the highest score (ties broken uniformly at random: the subsets are
  in random order and the first maximum is taken);
* ``majority``: the most frequent final answer among the N (ties broken uniformly at random),
  correct if that answer is the right one;
* ``pass@N`` (reported alongside, not a selection): some solution in the subset is correct, the
  ceiling every selection rule is under.

:func:`auroc` says how well a grader's scores separate right from wrong solutions over a whole
pool, independently of N.

At N = S (the whole pool) the expectation over the random tie-breaks is computed exactly (the
mean correctness of the solutions, or answers, tied at the top) instead of sampled. Confidence
intervals are bootstrap intervals over problems, the independent unit.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scipy_stats

Array = jax.Array


def subsets(key: Array, problems: int, pool: int, n: int, repeats: int) -> Array:
    """``[P, R, n]`` indices of random size-n subsets of each problem's pool (in random order)."""
    keys = jax.random.split(key, problems * repeats)
    perms = jax.vmap(lambda k: jax.random.permutation(k, pool)[:n])(keys)
    return perms.reshape(problems, repeats, n)


def select_by_score(scores: Array, index: Array) -> Array:
    """``[P, R]`` pool index of the highest-scoring solution of each subset ``index [P, R, n]``."""
    picked = jnp.take_along_axis(scores[:, None, :], index, axis=-1)
    best = jnp.argmax(picked, axis=-1)
    return jnp.take_along_axis(index, best[..., None], axis=-1)[..., 0]


def majority_answer(key: Array, answers: Array, index: Array, num_answers: int) -> Array:
    """``[P, R]`` the most frequent answer of each subset (ties broken uniformly at random)."""
    picked = jnp.take_along_axis(answers[:, None, :], index, axis=-1)
    counts = jax.nn.one_hot(picked, num_answers).sum(axis=-2)
    # Counts are integers: noise below 1 only reorders ties.
    noise = jax.random.uniform(key, counts.shape, maxval=0.5)
    return jnp.argmax(counts + noise, axis=-1)


def whole_pool_by_score(scores: Array, correct: Array) -> Array:
    """``[P]`` expected correctness of the top-scoring solution of each whole pool, ties broken
    uniformly at random (the mean correctness of the solutions tied at the top)."""
    top = scores >= scores.max(axis=-1, keepdims=True)
    return (correct & top).sum(-1) / top.sum(-1)


def whole_pool_majority(answers: Array, true_answer: Array, num_answers: int) -> Array:
    """``[P]`` probability that the majority answer of each whole pool is right, ties between
    the most frequent answers broken uniformly at random."""
    counts = jax.nn.one_hot(answers, num_answers).sum(axis=-2)
    top = counts >= counts.max(axis=-1, keepdims=True)
    right = jax.nn.one_hot(true_answer, num_answers) > 0
    return (top & right).sum(-1) / top.sum(-1)


def accuracy_curves(key: Array, correct: Array, answers: Array, true_answer: Array,
                    scores: Mapping[str, Array], ns: Sequence[int], num_answers: int,
                    repeats: int = 32) -> dict[str, np.ndarray]:
    """Per-problem best-of-N accuracy for every N, method by method.

    Args:
      correct: ``[P, S]`` whether each pooled solution's final answer is right.
      answers: ``[P, S]`` each solution's final answer; ``true_answer``: ``[P]``.
      scores: ``{name: [P, S]}`` the graders' scores.
      ns: the values of N (each at most S); at N = S the whole pool, tie-breaks in expectation.
      num_answers: the number of possible answers (for majority voting).
      repeats: subsets per problem and N.

    Returns:
      ``{method: [len(ns), P]}`` mean correctness of the selected solution per problem, for
      every score, ``majority`` and ``pass@N``.
    """
    problems, pool = correct.shape
    out: dict[str, list] = {name: [] for name in list(scores) + ["majority", "pass@N"]}
    for i, n in enumerate(ns):
        if not 1 <= n <= pool:
            raise ValueError(f"N must lie in [1, {pool}] (the pool size), got {n}")
        if n == pool:
            for name, score in scores.items():
                out[name].append(np.asarray(whole_pool_by_score(score, correct)))
            out["majority"].append(np.asarray(
                whole_pool_majority(answers, true_answer, num_answers)))
            out["pass@N"].append(np.asarray(correct.any(-1), np.float64))
            continue
        k_sub, k_vote = jax.random.split(jax.random.fold_in(key, i))
        index = subsets(k_sub, problems, pool, n, repeats)
        for name, score in scores.items():
            chosen = select_by_score(score, index)
            out[name].append(np.asarray(jnp.take_along_axis(correct, chosen, -1).mean(-1)))
        vote = majority_answer(k_vote, answers, index, num_answers)
        out["majority"].append(np.asarray((vote == true_answer[:, None]).mean(-1)))
        hit = jnp.take_along_axis(correct[:, None, :], index, -1).any(-1)
        out["pass@N"].append(np.asarray(hit.mean(-1)))
    return {name: np.stack(rows) for name, rows in out.items()}


def bootstrap_over_problems(per_problem: np.ndarray, reps: int = 2000, seed: int = 0
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, low, high)`` over the last axis (problems) with 95 % percentile bootstrap CIs."""
    rng = np.random.default_rng(seed)
    problems = per_problem.shape[-1]
    draws = rng.integers(0, problems, size=(reps, problems))
    means = per_problem[..., draws].mean(-1)  # [..., reps]
    return (per_problem.mean(-1), np.percentile(means, 2.5, axis=-1),
            np.percentile(means, 97.5, axis=-1))


def auroc(scores: np.ndarray, correct: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for telling right solutions from wrong ones:
    P(score of a right solution > score of a wrong one), ties counting one half (the
    Mann–Whitney statistic). 0.5: no better than chance; NaN if either class is empty."""
    scores, correct = np.asarray(scores, np.float64).ravel(), np.asarray(correct, bool).ravel()
    positives, negatives = int(correct.sum()), int((~correct).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = scipy_stats.rankdata(scores)
    return float((ranks[correct].sum() - positives * (positives + 1) / 2)
                 / (positives * negatives))

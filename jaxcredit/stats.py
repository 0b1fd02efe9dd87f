"""Statistics across seeds: the intervals every jaxcredit table and plot reports.

* :func:`mean_ci` — mean ± Student-t 95% half-width (the classic table entry).
* :func:`bootstrap_mean_ci` / :func:`bootstrap_band` — percentile-bootstrap 95% interval of the
  mean. It never leaves the range of the data (a Student-t band over 2 seeds of CartPole spanned
  −2000…+2500 for returns in 0…500), so the plots use it.
* :func:`aggregate` — rliable's (Agarwal et al. 2021, "Deep RL at the edge of the statistical
  precipice") interquartile mean and mean with stratified-bootstrap 95% CIs over runs × tasks,
  and :func:`probability_of_improvement` P(X > Y). rliable is imported only here, and only when
  called (the ``experiments`` extra installs it).

* :func:`headline_metric`, :func:`ranking_metric`, :func:`setting_ranking` — the return a run
  reports and how a sweep ranks its settings (by the exact J(π) where there is one).

All functions ignore NaN (a seed with no value yet).
"""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np

# Two-sided 95% Student-t critical values t_{0.975, df} for df = 1..30; 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_critical(df: int) -> float:
    """t_{0.975, df}."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def mean_ci(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and Student-t 95% half-width over ``axis`` (NaN ignored; half-width 0 for n < 2)."""
    x = np.asarray(x, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        n = np.sum(np.isfinite(x), axis=axis)
        mean = np.nanmean(x, axis=axis)
        sd = np.nanstd(x, axis=axis, ddof=1) if x.shape[axis] > 1 else np.zeros_like(mean)
    crit = np.vectorize(lambda k: t_critical(int(k) - 1) if k > 1 else 0.0)(n)
    half = np.where(n > 1, crit * np.nan_to_num(sd) / np.sqrt(np.maximum(n, 1)), 0.0)
    return mean, half


def bootstrap_band(curves: np.ndarray, reps: int = 1000, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and its percentile-bootstrap 95% interval, per column of ``[S, U]``.

    Seeds are resampled with replacement (the same resample for every column, so a band is a
    band of curves); NaN seeds of a column are left out of that column.
    """
    curves = np.asarray(curves, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(curves, axis=0)
        if curves.shape[0] < 2:
            return mean, mean.copy(), mean.copy()
        rng = np.random.default_rng(seed)
        index = rng.integers(0, curves.shape[0], (reps, curves.shape[0]))
        means = np.nanmean(curves[index], axis=1)  # [reps, U]
        low, high = np.nanpercentile(means, [2.5, 97.5], axis=0)
    return mean, low, high


def bootstrap_mean_ci(x: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: percentile-bootstrap 95% interval of the mean of 1-D ``x``."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean, low, high = bootstrap_band(x[:, None], reps, seed)
    return float(mean[0]), float(low[0]), float(high[0])


def bootstrap_ci_halfwidth(x: np.ndarray, reps: int = 2000, seed: int = 0) -> float:
    """Half the width of :func:`bootstrap_mean_ci` (0 for fewer than two values)."""
    _, low, high = bootstrap_mean_ci(x, reps, seed)
    return 0.0 if not np.isfinite(low) else (high - low) / 2


def iqm(x: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of the values (NaN ignored)."""
    x = np.sort(np.asarray(x, np.float64).ravel())
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan")
    cut = int(np.floor(0.25 * x.size))
    return float(x[cut:x.size - cut].mean())


def _rliable():
    try:
        from rliable import library, metrics  # noqa: PLC0415
    except ImportError:
        raise ValueError("cross-seed aggregates need rliable: pip install 'jaxcredit[experiments]'"
                         ) from None
    return library, metrics


def aggregate(scores: Mapping[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict:
    """IQM and mean with stratified-bootstrap 95% CIs (rliable), per learner.

    Args:
      scores: ``{learner: [runs, tasks]}`` normalised scores (tasks = columns; one column for a
        single task).
      reps: bootstrap replications.

    Returns:
      ``{learner: {"iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high", "runs"}}``.
    """
    library, metrics = _rliable()
    np.random.seed(seed)  # rliable draws from numpy's global generator
    arrays = {k: np.atleast_2d(np.asarray(v, np.float64).T).T for k, v in scores.items()}
    fn = lambda s: np.array([metrics.aggregate_iqm(s), metrics.aggregate_mean(s)])  # noqa: E731
    point, interval = library.get_interval_estimates(arrays, fn, reps=reps)
    return {k: {"iqm": float(point[k][0]), "iqm_low": float(interval[k][0, 0]),
                "iqm_high": float(interval[k][1, 0]), "mean": float(point[k][1]),
                "mean_low": float(interval[k][0, 1]), "mean_high": float(interval[k][1, 1]),
                "runs": int(arrays[k].shape[0])} for k in arrays}


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0
                               ) -> tuple[float, float, float]:
    """P(X > Y) over runs of two learners (rliable), with its stratified-bootstrap 95% CI.

    ``x``, ``y``: ``[runs, tasks]`` (or ``[runs]``) scores. Returns ``(p, low, high)``.
    """
    library, metrics = _rliable()
    np.random.seed(seed)
    x = np.atleast_2d(np.asarray(x, np.float64).T).T
    y = np.atleast_2d(np.asarray(y, np.float64).T).T
    point, interval = library.get_interval_estimates(
        {"x,y": (x, y)}, metrics.probability_of_improvement, reps=reps)
    return float(point["x,y"]), float(interval["x,y"][0, 0]), float(interval["x,y"][1, 0])


def oracle_gain_share(fitted: np.ndarray, oracle: np.ndarray, baseline: np.ndarray,
                      reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The share of the oracle's gain over a baseline that a fitted model recovers, with a
    percentile-bootstrap 95% interval: ``(share, low, high)``,

        share = (mean fitted − mean baseline) / (mean oracle − mean baseline).

    1 means the fitted model does as well as the exact one, 0 no better than the baseline,
    below 0 worse. The three learners' seeds are resampled independently (each is its own run).
    NaN when the oracle does not beat the baseline (there is no gain to recover).
    """
    samples = [np.asarray(x, np.float64)[np.isfinite(x)] for x in (fitted, oracle, baseline)]
    f, o, b = (s.mean() for s in samples)
    if not o > b:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = [s[rng.integers(0, s.size, (reps, s.size))].mean(1) for s in samples]
    gain = means[1] - means[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        shares = np.where(gain > 0, (means[0] - means[2]) / np.where(gain > 0, gain, 1.0),
                          np.nan)
    low, high = np.nanpercentile(shares, [2.5, 97.5])
    return float((f - b) / (o - b)), float(low), float(high)


def headline_metric(metric_names) -> str:
    """The return a run reports: the evaluation return when the run evaluates, else the mean
    return of the training episodes."""
    return "eval/return" if "eval/return" in metric_names else "episode_return"


def ranking_metric(metric_names) -> str:
    """What a sweep ranks its settings by: the exact J(π) where the environment has one (no
    sampling noise, and settings that share evaluation keys cannot tie by luck), else the
    headline return."""
    return "eval/exact_return" if "eval/exact_return" in metric_names else headline_metric(
        metric_names)


def setting_ranking(curves: dict, settings, swept, metric: str) -> list[str]:
    """One line per hyper-parameter setting, best final ``metric`` first (sweeps only)."""
    if len(curves) < 2:
        return []
    rows = []
    for h, (_, values) in curves.items():
        final = values[:, -1]
        final = final[np.isfinite(final)]
        mean = float(final.mean()) if final.size else float("nan")
        half = bootstrap_ci_halfwidth(final)
        label = " ".join(f"{k}={settings[h][k]:.4g}" for k in swept) or f"setting {h}"
        rows.append((mean, f"  {label}: final {metric} {mean:.4g} ± {half:.2g} "
                           f"(95% bootstrap CI, {final.size} seeds)"))
    rows.sort(key=lambda r: -np.inf if np.isnan(r[0]) else -r[0])
    return [f"settings ranked by final {metric}:"] + [line for _, line in rows]

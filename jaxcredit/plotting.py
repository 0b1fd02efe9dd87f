"""Learning curves from run directories: mean ± 95% confidence interval across seeds.

Per seed, updates in which no episode ended (``nan``) carry the last finished episode's value
forward, so every seed has a value at every update after its first finished episode. The band is
the Student-t 95% interval of the mean across seeds, ``mean ± t_{0.975, S−1} · sd / √S``.
"""

from __future__ import annotations

import pathlib
import warnings
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jaxcredit import runlog  # noqa: E402

# Two-sided 95% Student-t critical values t_{0.975, df} for df = 1..30; 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_critical(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def forward_fill(x: np.ndarray) -> np.ndarray:
    """Replaces NaNs along the last axis by the last finite value before them."""
    x = np.array(x, np.float64)
    index = np.where(np.isfinite(x), np.arange(x.shape[-1]), 0)
    np.maximum.accumulate(index, axis=-1, out=index)
    return np.take_along_axis(x, index, axis=-1)


def mean_ci(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and 95% CI bounds over axis 0 (seeds) of ``[S, U]``, ignoring NaNs."""
    with warnings.catch_warnings():  # all-NaN columns (no episode finished yet) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(curves, axis=0)
        n = np.sum(np.isfinite(curves), axis=0)
        sd = np.nanstd(curves, axis=0, ddof=1) if curves.shape[0] > 1 else np.zeros_like(mean)
    half = np.array([t_critical(int(k) - 1) if k > 1 else 0.0 for k in n]) * sd / np.sqrt(
        np.maximum(n, 1))
    return mean, mean - half, mean + half


def curves_by_setting(columns: dict, metric: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{hparam_index: (env_steps [U], values [S, U])}`` from ``read_metrics`` columns."""
    if metric not in columns:
        raise ValueError(f"metric {metric!r} not in metrics.csv; have "
                         f"{sorted(k for k in columns if k not in runlog.KEY_COLUMNS)}")
    out = {}
    for h in np.unique(columns["hparam_index"]):
        rows = columns["hparam_index"] == h
        seeds = np.unique(columns["seed"][rows])
        updates = np.unique(columns["update"][rows])
        values = np.full((len(seeds), len(updates)), np.nan)
        seed_pos = np.searchsorted(seeds, columns["seed"][rows])
        update_pos = np.searchsorted(updates, columns["update"][rows])
        values[seed_pos, update_pos] = columns[metric][rows]
        steps = np.zeros(len(updates))
        steps[update_pos] = columns["env_steps"][rows]
        out[int(h)] = (steps, forward_fill(values))
    return out


def _setting_label(config: dict, h: int, multiple: bool) -> str:
    settings = config.get("settings", [])
    swept = config.get("swept", [])
    if not multiple or h >= len(settings):
        return ""
    return " ".join(f"{k}={settings[h][k]:.3g}" for k in swept) or f"setting {h}"


def plot_runs(run_dirs: Sequence[str | pathlib.Path], out_path: str | pathlib.Path,
              metric: str = "episode_return") -> pathlib.Path:
    """Overlays mean ± 95% CI curves of ``metric`` for every run and hyper-parameter setting."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run_dir in run_dirs:
        run_dir = pathlib.Path(run_dir)
        if not (run_dir / "metrics.csv").exists():
            raise ValueError(f"{run_dir} is not a run directory (no metrics.csv)")
        config = runlog.read_json(run_dir / "config.json") if (run_dir / "config.json").exists() \
            else {}
        columns = runlog.read_metrics(run_dir / "metrics.csv")
        if not columns:
            raise ValueError(f"{run_dir / 'metrics.csv'} has no rows yet")
        per_setting = curves_by_setting(columns, metric)
        for h, (steps, values) in per_setting.items():
            mean, low, high = mean_ci(values)
            label = " ".join(x for x in (run_dir.name,
                                         _setting_label(config, h, len(per_setting) > 1)) if x)
            label += f" (n={values.shape[0]})"
            line, = ax.plot(steps, mean, lw=1.5, label=label)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric.replace('_', ' ')}: mean ± 95% CI across seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_path = pathlib.Path(out_path)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path

"""Learning curves from run directories: mean and 95% bootstrap interval across seeds.

Per seed, updates without a value (``nan``: no episode ended; no evaluation at that update)
carry the last value forward, and updates where no seed has a value are dropped, so evaluation
metrics plot at their evaluation points. The band is the percentile-bootstrap 95% interval of
the mean across seeds (``jaxcredit.stats.bootstrap_band``): it stays inside the range of the
data even with two seeds. ``per_seed`` draws every seed's curve too; ``smooth`` averages over a
window of that many points first.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jaxcredit import runlog  # noqa: E402
from jaxcredit.stats import bootstrap_band  # noqa: E402


def forward_fill(x: np.ndarray) -> np.ndarray:
    """Replaces NaNs along the last axis by the last finite value before them."""
    x = np.array(x, np.float64)
    index = np.where(np.isfinite(x), np.arange(x.shape[-1]), 0)
    np.maximum.accumulate(index, axis=-1, out=index)
    return np.take_along_axis(x, index, axis=-1)


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points along the last axis (NaN ignored)."""
    if window <= 1:
        return np.asarray(x, np.float64)
    x = np.asarray(x, np.float64)
    finite = np.isfinite(x)
    zero = np.zeros(x.shape[:-1] + (1,))
    sums = np.concatenate([zero, np.cumsum(np.where(finite, x, 0.0), axis=-1)], axis=-1)
    counts = np.concatenate([zero, np.cumsum(finite, axis=-1)], axis=-1)
    start = np.maximum(np.arange(1, x.shape[-1] + 1) - window, 0)
    total = sums[..., 1:] - sums[..., start]
    count = counts[..., 1:] - counts[..., start]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def curves_by_setting(columns: dict, metric: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{hparam_index: (env_steps [U], values [S, U])}`` from ``read_metrics`` columns."""
    if metric not in columns:
        raise ValueError(f"metric {metric!r} not in the run's metrics; have "
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
        # Metrics measured only at some updates (evaluations) are NaN at all the others.
        measured = np.isfinite(values).any(axis=0)
        out[int(h)] = (steps[measured], forward_fill(values[:, measured]))
    return out


def _setting_label(config: dict, h: int, multiple: bool) -> str:
    settings = config.get("settings", [])
    swept = config.get("swept", [])
    if not multiple or h >= len(settings):
        return ""
    return " ".join(f"{k}={settings[h][k]:.3g}" for k in swept) or f"setting {h}"


def plot_runs(run_dirs: Sequence[str | pathlib.Path], out_path: str | pathlib.Path,
              metric: str | None = None, per_seed: bool = False,
              smooth_window: int = 1) -> pathlib.Path:
    """Overlays mean and 95% bootstrap band of ``metric`` for every run and setting.

    ``metric`` None: ``eval/return`` where the runs evaluate, else ``episode_return``.
    """
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run_dir in run_dirs:
        run_dir = pathlib.Path(run_dir)
        if not runlog.has_metrics(run_dir):
            raise ValueError(f"{run_dir} is not a run directory (no metrics)")
        config = runlog.read_json(run_dir / "config.json") if (run_dir / "config.json").exists() \
            else {}
        columns = runlog.read_metrics(run_dir)
        if not columns:
            raise ValueError(f"{run_dir} has no metric rows yet")
        if metric is None:
            metric = "eval/return" if "eval/return" in columns else "episode_return"
        per_setting = curves_by_setting(columns, metric)
        for h, (steps, values) in per_setting.items():
            values = smooth(values, smooth_window)
            mean, low, high = bootstrap_band(values)
            label = " ".join(x for x in (run_dir.name,
                                         _setting_label(config, h, len(per_setting) > 1)) if x)
            label += f" (n={values.shape[0]})"
            line, = ax.plot(steps, mean, lw=1.5, label=label)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
            if per_seed:
                for row in values:
                    ax.plot(steps, row, color=line.get_color(), lw=0.5, alpha=0.35)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric.replace('_', ' ')}: mean and 95% bootstrap CI across seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_path = pathlib.Path(out_path)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path

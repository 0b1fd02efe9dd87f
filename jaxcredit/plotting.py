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
from typing import Callable, Optional, Sequence

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


# Which way is better, for the axis label: the first matching fragment of the metric's name.
_LOWER_IS_BETTER = ("error", "loss", "kl", "regret", "bias", "variance", "length")
_HIGHER_IS_BETTER = ("return", "p_optimal", "rate", "success", "accuracy", "agreement", "cosine",
                     "snr", "share")


def better(metric: str) -> str:
    """``"↑ better"``, ``"↓ better"`` or ``""`` for a metric's name."""
    name = metric.lower()
    if any(word in name for word in _LOWER_IS_BETTER):
        return "↓ better"
    if any(word in name for word in _HIGHER_IS_BETTER):
        return "↑ better"
    return ""


def task_title(config: dict) -> str:
    """``"DelayedEffect n=30 sigma=1, a2c"``: the environment with its options and the
    algorithm, from a run's ``config.json``."""
    train = config.get("config", {})
    env = train.get("env", "")
    options = " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in (train.get("env_options") or {}).items())
    return ", ".join(x for x in (f"{env} {options}".strip(), train.get("algo", "")) if x)


def credit_label(config: dict) -> str:
    """``"hca_return, fitted"`` / ``"hca_return, exact model"`` / ``"gae"``: the estimator and
    whether its model was the exact one (``model=oracle``) or fitted, where it has one."""
    estimator = config.get("config", {}).get("estimator") or {}
    name = estimator.get("name") if isinstance(estimator, dict) else estimator
    if not name:
        return ""
    options = (estimator.get("options") or {}) if isinstance(estimator, dict) else {}
    model = options.get("model")
    if model == "oracle":
        return f"{name}, exact model"
    return f"{name}, fitted" if model is not None or name in _FITTED else name


# Estimators whose credit comes from a learned model by default (their "model" option unset).
_FITTED = ("hca_return", "hca_state", "hca_dice", "c2a2c", "cocoa_reward", "cocoa_feature",
           "cca")


def plot_runs(run_dirs: Sequence[str | pathlib.Path], out_path: str | pathlib.Path,
              metric: str | None = None, per_seed: bool = False,
              smooth_window: int = 1,
              chance: Optional[Callable[[dict, str], Optional[float]]] = None) -> pathlib.Path:
    """Overlays mean and 95% bootstrap band of ``metric`` for every run and setting.

    ``metric`` None: ``eval/return`` where the runs evaluate, else ``episode_return``. The
    title names the task (environment, its options, the algorithm) when the runs share it; each
    legend entry names the run, its estimator and whether the credit model was fitted or exact,
    and its number of seeds; the y axis says which way is better; a probability of the optimal
    action gets its chance line: ``chance(config, metric)`` gives its level from a run's
    ``config.json`` (the command line's reads the environment's number of actions), or None. The
    legend sits below the axes, over no data. The format
    follows ``out_path``'s suffix: ``.png``, ``.pdf`` or ``.svg``.
    """
    fig, ax = plt.subplots(figsize=(7, 4.8))
    titles, chance_line = set(), None
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
        titles.add(task_title(config))
        if chance_line is None and chance is not None:
            chance_line = chance(config, metric)
        credit = credit_label(config)
        per_setting = curves_by_setting(columns, metric)
        for h, (steps, values) in per_setting.items():
            values = smooth(values, smooth_window)
            mean, low, high = bootstrap_band(values)
            label = " ".join(x for x in (run_dir.name,
                                         _setting_label(config, h, len(per_setting) > 1)) if x)
            if credit and credit not in label:
                label += f" [{credit}]"
            label += f" (n={values.shape[0]})"
            line, = ax.plot(steps, mean, lw=1.5, label=label)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
            if per_seed:
                for row in values:
                    ax.plot(steps, row, color=line.get_color(), lw=0.5, alpha=0.35)
    if chance_line is not None:
        ax.axhline(chance_line, color="gray", lw=0.8, ls=":", label=f"chance ({chance_line:g})")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(" ".join(x for x in (metric.replace("_", " "), f"({better(metric)})"
                                       if better(metric) else "") if x))
    task = titles.pop() if len(titles) == 1 and "" not in titles else ""
    ax.set_title((f"{task}\n" if task else "")
                 + f"{metric.replace('_', ' ')}: mean and 95% bootstrap CI across seeds",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2,
              frameon=False)
    fig.tight_layout()
    out_path = pathlib.Path(out_path)
    fig.savefig(out_path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out_path

"""An experiment's report: numbers per (task, learner) from the run directories, markdown
tables with confidence intervals, the credit-error and gain-share tables, and curve figures."""

from __future__ import annotations

import pathlib
from typing import Callable, Sequence

import numpy as np

from jaxcredit.experiment.runs import Case, area, curves, final


def case_results(out: pathlib.Path, cases: Sequence[Case], metric: str, last: int = 2,
                 solved_above: float = 0.9) -> tuple[list[str], list[str], dict]:
    """The report's raw numbers of cases labelled ``task`` and ``learner``: ``(tasks,
    learners, {"task|learner": {...}})`` in the cases' order, each entry with ``metric``'s
    ``env_steps`` and per-seed ``curve``, its ``final`` (mean of the last ``last`` points),
    ``area`` and ``solved`` (the last point ≥ ``solved_above``), per seed, as lists. A
    script adds its own entries to them."""
    tasks = list(dict.fromkeys(c.labels["task"] for c in cases))
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    results = {}
    for c in cases:
        run_dir = pathlib.Path(out) / c.name
        steps, curve = curves(run_dir, metric)
        results[f"{c.labels['task']}|{c.labels['learner']}"] = {
            "env_steps": steps.tolist(), "curve": curve.tolist(),
            "final": final(run_dir, metric, last=last).tolist(),
            "area": area(run_dir, metric).tolist(),
            "solved": (final(run_dir, metric, last=1) >= solved_above).astype(float).tolist()}
    return tasks, learners, results


def result_cell(results: dict, key: str, digits: int = 3) -> Callable[[str, str], str]:
    """The :func:`markdown_table` cell ``(learner, task) -> "mean ± CI"`` of entry ``key`` of
    :func:`case_results`' numbers (empty where the pair was not run)."""
    def cell(learner: str, task: str) -> str:
        entry = results.get(f"{task}|{learner}")
        return "" if entry is None else mean_ci_cell(np.asarray(entry[key]), digits)
    return cell


def mean_ci_cell(values: np.ndarray, digits: int = 3) -> str:
    """``"m ± h"``: mean and Student-t 95% half-width over seeds."""
    from jaxcredit.stats import mean_ci  # noqa: PLC0415

    mean, half = mean_ci(np.asarray(values, np.float64))
    return f"{float(mean):.{digits}f} ± {float(half):.{digits}f}"


def markdown_table(rows: Sequence[str], columns: Sequence[str], cell: Callable[[str, str], str],
                   corner: str = "") -> list[str]:
    """Markdown lines of a table with ``cell(row, column)`` entries ("" for a missing one)."""
    lines = [f"| {corner} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in rows:
        lines.append(f"| {row} | " + " | ".join(cell(row, col) for col in columns) + " |")
    return lines


def aggregate_table(scores: dict, baseline: str | None = None, digits: int = 3
                    ) -> tuple[list[str], dict]:
    """Cross-seed (and cross-task) summary of each learner, as markdown lines and a dict.

    ``scores``: ``{learner: [seeds, tasks]}`` scores on a common scale. Each learner gets its IQM
    and mean with rliable's stratified-bootstrap 95% CIs and, when ``baseline`` names one of the
    learners, P(learner > baseline): the probability that a run of the learner scores higher
    than a run of the baseline on the same task (rliable's probability of improvement, with
    its CI). Seeds of two learners are not paired: each learner is its own compiled program.
    """
    from jaxcredit import stats  # noqa: PLC0415

    agg = stats.aggregate(scores)
    columns = ["IQM", "mean"]
    if baseline is not None:
        columns.append(f"P(> {baseline})")
        for label in scores:
            if label != baseline:
                p, low, high = stats.probability_of_improvement(scores[label], scores[baseline])
                agg[label].update(p_improvement=p, p_improvement_low=low,
                                  p_improvement_high=high)
    f = f".{digits}f"
    lines = ["| learner | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, a in agg.items():
        cells = [f"{a['iqm']:{f}} [{a['iqm_low']:{f}}, {a['iqm_high']:{f}}]",
                 f"{a['mean']:{f}} [{a['mean_low']:{f}}, {a['mean_high']:{f}}]"]
        if baseline is not None:
            cells.append("" if label == baseline else
                         f"{a['p_improvement']:.2f} [{a['p_improvement_low']:.2f}, "
                         f"{a['p_improvement_high']:.2f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines, agg


# The fitted model's credit against its exact twin's (jaxcredit.credit.error), with the
# titles the experiment tables give them.
CREDIT_ERROR_METRICS = {
    "estimator/kl_to_exact": "KL(exact ‖ fitted hindsight model)",
    "credit/rmse_to_exact": "credit RMSE against the exact model (same window and key)",
    "credit/rmse_decisive": "credit RMSE at the decisive steps",
    "credit/sign_agreement": "sign agreement with the exact model's credit at the decisive "
                             "steps",
    "credit/sign_zero": "share of those steps where the fitted credit is 0",
    "credit/ratio_rmse_to_exact": "RMSE of the credit ratio π/h at the actions taken",
    "credit/grad_cos_fitted": "cos(policy gradient of the fitted credit, exact ∇J)",
    "credit/grad_cos_oracle": "cos(policy gradient of the exact model's credit, exact ∇J), "
                              "same windows",
    # The decisive steps' credit error split by the reward value that carries it
    # (credit.error.reward_value_errors; the environment's values in its own order).
    **{f"credit/rmse_decisive_reward{i}": f"credit RMSE at the decisive steps carried by the "
                                          f"rewards of value {i}" for i in range(8)},
}


def credit_error_entries(run_dir: pathlib.Path, last: int = 4) -> dict:
    """``{metric + "/final": per-seed values}`` of each credit-error metric the run recorded
    (mean over its last ``last`` evaluations); empty for a learner without an exact twin."""
    out = {}
    for metric in CREDIT_ERROR_METRICS:
        try:
            out[metric + "/final"] = final(run_dir, metric, last=last).tolist()
        except (KeyError, ValueError):
            pass
    return out


def credit_error_tables(rows: Sequence[str], learners: Sequence[str],
                        entry: Callable[[str, str], dict | None], last: int = 4) -> list[str]:
    """Markdown tables of the credit-error metrics (one per metric) for the learners that
    report them; ``entry(row, learner)`` is a results dict with ``metric + "/final"`` keys."""
    lines = []
    for metric, title in CREDIT_ERROR_METRICS.items():
        key = metric + "/final"
        columns = [label for label in learners
                   if any(key in (entry(row, label) or {}) for row in rows)]
        if not columns:
            continue

        def cell(row, col, key=key):
            values = (entry(row, col) or {}).get(key)
            return "" if values is None else mean_ci_cell(values, 4)

        lines += [f"### {title}, mean over the last {last} evaluations", ""]
        lines += markdown_table(rows, columns, cell) + [""]
    return lines


def oracle_of(label: str, learners: Sequence[str]) -> str | None:
    """The learner with the exact model that ``label``'s fitted model approximates: "<label>
    oracle", else the base estimator's ("hca_return grid" -> "hca_return oracle")."""
    if label.endswith("oracle"):
        return None
    for candidate in (f"{label} oracle", f"{label.split()[0]} oracle"):
        if candidate in learners:
            return candidate
    return None


def gain_share_table(rows: Sequence[str], learners: Sequence[str],
                     scores: Callable[[str, str], Sequence[float]], what: str,
                     baseline: str = "A2C+GAE") -> list[str]:
    """The share of the oracle's gain over ``baseline`` that each fitted learner recovers,
    (fitted − baseline) / (oracle − baseline) of the seed means with a bootstrap 95% interval
    (``stats.oracle_gain_share``); ``scores(row, learner)`` gives the per-seed values."""
    from jaxcredit.stats import oracle_gain_share  # noqa: PLC0415

    pairs = [(label, oracle_of(label, learners)) for label in learners]
    pairs = [(label, oracle) for label, oracle in pairs if oracle is not None]
    if baseline not in learners or not pairs:
        return []

    def cell(row, col):
        oracle = dict(pairs)[col]
        share, low, high = oracle_gain_share(scores(row, col), scores(row, oracle),
                                             scores(row, baseline))
        return f"{share:.2f} [{low:.2f}, {high:.2f}]"

    return [f"### Share of the oracle's gain over {baseline} recovered ({what})", "",
            f"(fitted − {baseline}) / (oracle − {baseline}) of the means over seeds, "
            "percentile-bootstrap 95% interval; NaN where the oracle does not beat "
            f"{baseline}.", ""] + markdown_table(rows, [label for label, _ in pairs], cell) + [""]


def line_style(label: str) -> str:
    """Dashed for the exact-model (``oracle``) ablation, dotted for ``1-step``, else solid."""
    return "--" if "oracle" in label else (":" if "1-step" in label else "-")


def plot_curve_panels(path: pathlib.Path, panels: dict, ylabel: str, title: str = "",
                      hline: float | None = None, cols: int = 3,
                      xlabel: str = "env steps per seed") -> None:
    """One panel per task of mean learning curves with 95% bootstrap bands over seeds.

    Args:
      path: the image file to write.
      panels: ``{panel title: {learner label: (env_steps [P], curves [seeds, P])}}``.
      ylabel: the metric's name for the y axes.
      title: a figure title.
      hline: a reference level drawn in grey on every panel (chance, for example).
      xlabel: the x axes' label.

    A learner keeps its colour in every panel, and the legend lists every learner.
    """
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import EngFormatter  # noqa: PLC0415

    from jaxcredit.stats import bootstrap_band  # noqa: PLC0415

    cols = min(cols, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 3.3 * rows), squeeze=False)
    labels = list(dict.fromkeys(label for lines in panels.values() for label in lines))
    colour = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, (name, lines) in zip(axes.flat, panels.items()):
        for label, (steps, values) in lines.items():
            mean, low, high = bootstrap_band(np.asarray(values))
            ax.plot(steps, mean, ls=line_style(label), color=colour[label])
            ax.fill_between(steps, low, high, color=colour[label], alpha=0.15, lw=0)
        if hline is not None:
            ax.axhline(hline, color="grey", lw=0.8, ls="--")
        ax.set_title(name, fontsize=9)
        ax.xaxis.set_major_formatter(EngFormatter())  # 200k, not 200000 running into 175000
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    list(axes.flat)[0].legend(
        [plt.Line2D([], [], color=colour[label], ls=line_style(label)) for label in labels],
        labels, fontsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Experiments on the engine: a list of runs, each a run directory, and readers for the report.

An experiment script (``experiments/*/run.py``) is a list of :class:`Case` objects (a run
directory name, a ``TrainConfig``, hyper-parameter settings) and a report. :func:`run_cases`
trains each case with the host loop (``agents.host_loop.run_experiment``: one compiled program
per case, all seeds vmapped, checkpoints between chunks) into ``<out>/<case.name>/``, so every
run can be plotted and inspected with the command line (``jaxcredit plot <out>/<case>``). A case
whose run directory is complete is skipped and a partial one is resumed: an interrupted
experiment continues where it stopped.

Outputs never overwrite results: by default an experiment writes into a new folder under
``runs/experiments/``; :func:`publish` copies the report files into the experiment's committed
``results/`` folder only when asked (and refuses to replace files there without ``force``).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from jaxcredit import runlog
from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.host_loop import RunSpec, run_experiment


@dataclasses.dataclass(frozen=True)
class Case:
    """One run of an experiment.

    Attributes:
      name: its run directory below the experiment's output folder (may contain ``/``).
      config: the train config.
      settings: hyper-parameter settings (dicts of ``Hparams`` fields), seeds vmapped for each.
      labels: what the report groups by (e.g. ``{"task": "L23", "learner": "hca_return"}``).
    """

    name: str
    config: TrainConfig
    settings: tuple = ({},)
    labels: dict = dataclasses.field(default_factory=dict)


def default_out(experiment: str) -> pathlib.Path:
    """A fresh output folder, ``runs/experiments/<experiment>-<time>``."""
    return pathlib.Path("runs") / "experiments" / f"{experiment}-{time.strftime('%Y%m%d-%H%M%S')}"


def is_complete(run_dir: pathlib.Path) -> bool:
    """The run directory holds a finished run."""
    try:
        saved = runlog.read_json(run_dir / "config.json")
        rows = runlog.read_metrics(run_dir)
    except ValueError:
        return False
    return bool(rows) and int(rows["update"].max()) == int(saved["num_updates"])


TIMING_FILE = "case_seconds.json"  # wall clock of a case's training, compile included


def run_cases(cases: Sequence[Case], out: pathlib.Path, num_seeds: int, seed: int = 0,
              num_chunks: int = 4, progress: bool = False,
              log: Callable[[str], Any] = print) -> dict[str, dict]:
    """Trains every case into ``out/<case.name>`` (skipping complete runs, resuming partial
    ones) and returns ``{case.name: {"seconds", "summary"}}`` (a skipped run's seconds are those
    it took when it was trained, ``None`` if unknown)."""
    out = pathlib.Path(out)
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError("case names must be unique")
    done = {}
    for i, case in enumerate(cases):
        run_dir = out / case.name
        start = time.perf_counter()
        if is_complete(run_dir):
            log(f"[{i + 1}/{len(cases)}] {case.name}: complete, skipped")
            # A report rebuilt from finished runs keeps the time they took to train.
            timing = run_dir / TIMING_FILE
            seconds = json.loads(timing.read_text())["seconds"] if timing.exists() else None
            done[case.name] = {"seconds": seconds, "summary": None}
            continue
        resume = (run_dir / "config.json").exists()
        spec = RunSpec(settings=tuple(case.settings), num_seeds=num_seeds, seed=seed,
                       num_chunks=num_chunks)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        summary = run_experiment(None if resume else case.config, None if resume else spec,
                                 run_dir, resume=resume, progress=progress, plot=False)
        seconds = time.perf_counter() - start
        (run_dir / TIMING_FILE).write_text(json.dumps(
            {"seconds": seconds, "compile_seconds": summary["compile_seconds"]}))
        log(f"[{i + 1}/{len(cases)}] {case.name}: {seconds:.0f} s "
            f"(compile {summary['compile_seconds']:.0f} s), final {summary['metric']} "
            f"{summary['final_return']:.4g}")
        done[case.name] = {"seconds": seconds, "summary": summary}
    return done


def curves(run_dir: pathlib.Path, metric: str, setting: int = 0
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(env_steps [K], values [S, K])`` of ``metric`` at the updates where it was measured
    (evaluation points for ``eval/*``), for one hyper-parameter setting."""
    columns = runlog.read_metrics(pathlib.Path(run_dir))
    if metric not in columns:
        raise ValueError(f"{run_dir}: no metric {metric!r}")
    rows = columns["hparam_index"] == setting
    seeds = np.unique(columns["seed"][rows])
    updates = np.unique(columns["update"][rows])
    values = np.full((len(seeds), len(updates)), np.nan)
    values[np.searchsorted(seeds, columns["seed"][rows]),
           np.searchsorted(updates, columns["update"][rows])] = columns[metric][rows]
    steps = np.zeros(len(updates))
    steps[np.searchsorted(updates, columns["update"][rows])] = columns["env_steps"][rows]
    measured = np.isfinite(values).any(axis=0)
    return steps[measured], values[:, measured]


def final(run_dir: pathlib.Path, metric: str, last: int = 1, setting: int = 0) -> np.ndarray:
    """Per seed: the mean of ``metric`` over its last ``last`` measured points ``[S]``."""
    _, values = curves(run_dir, metric, setting)
    return np.nanmean(values[:, -last:], axis=1)


def area(run_dir: pathlib.Path, metric: str, setting: int = 0) -> np.ndarray:
    """Per seed: the mean of ``metric`` over all its measured points (area under the curve)."""
    _, values = curves(run_dir, metric, setting)
    return np.nanmean(values, axis=1)


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


def publish(out: pathlib.Path, results: pathlib.Path, files: Sequence[str],
            force: bool = False) -> list[pathlib.Path]:
    """Copies report ``files`` from ``out`` into the committed ``results`` folder.

    Refuses (one-line ValueError, nothing copied) if a file would be replaced and not ``force``.
    """
    out, results = pathlib.Path(out), pathlib.Path(results)
    clashes = [name for name in files if (results / name).exists()]
    if clashes and not force:
        raise ValueError(f"{results} already holds {', '.join(clashes)}; pass --force to "
                         "replace the published results")
    results.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in files:
        shutil.copy2(out / name, results / name)
        copied.append(results / name)
    return copied


# ----------------------------------------------------------------------------------------------
# Report helpers
# ----------------------------------------------------------------------------------------------


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


# The fitted model's credit against its exact twin's (jaxcredit.agents.credit_error), with the
# titles the experiment tables give them.
CREDIT_ERROR_METRICS = {
    "estimator/kl_to_exact": "KL(exact ‖ fitted hindsight model)",
    "credit/rmse_to_exact": "credit RMSE against the exact model (same window and key)",
    "credit/rmse_decisive": "credit RMSE at the decisive steps",
    "credit/sign_agreement": "sign agreement with the exact model's credit at the decisive "
                             "steps",
    "credit/ratio_rmse_to_exact": "RMSE of the credit ratio π/h at the actions taken",
    "credit/grad_cos_fitted": "cos(policy gradient of the fitted credit, exact ∇J)",
    "credit/grad_cos_oracle": "cos(policy gradient of the exact model's credit, exact ∇J), "
                              "same windows",
    # The decisive steps' credit error split by the reward value that carries it
    # (agents.credit_error.reward_value_errors; the environment's values in its own order).
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


@dataclasses.dataclass
class OutputArgs:
    """Where an experiment script writes (the flags every ``experiments/*/run.py`` shares)."""

    out: str | None = None
    """output folder (default: a new one under runs/experiments/); rerun with the same folder to
    resume an interrupted experiment"""
    publish: bool = False
    """copy the report into the experiment's committed results/ folder"""
    force: bool = False
    """with --publish: replace the published report"""
    seed: Optional[int] = None
    """base seed of the runs (default: the experiment's own, that of its published results);
    another seed gives a held-out replicate, e.g. for a setting chosen on the published seeds"""


def chosen_size(sizes: dict, args: Any) -> dict:
    """The settings of the size ``args.size``, with the script's ``--seeds`` and ``--updates``
    (where it has them) overriding the size's; a ValueError for an unknown size or fewer than
    2 seeds (no confidence interval)."""
    if args.size not in sizes:
        raise ValueError(f"--size must be one of {', '.join(sizes)}")
    size = dict(sizes[args.size])
    for name in ("seeds", "updates"):
        if getattr(args, name, None):
            size[name] = getattr(args, name)
    if size["seeds"] < 2:
        raise ValueError("need at least 2 seeds")
    return size


def run_and_report(name: str, here: pathlib.Path, args: OutputArgs, cases: Sequence[Case],
                   meta: dict, report: Callable, num_seeds: int, seed: int,
                   argv: Sequence[str] | None = None, num_chunks: int = 4) -> int:
    """An experiment script's second half: train ``cases`` into ``args.out`` (or a new folder),
    write ``report(out, cases, meta) -> files`` with the timings and the command added to
    ``meta``, and publish into ``here/results`` if asked. Returns the exit status (2 when the
    published results would be replaced without ``--force``)."""
    import sys  # noqa: PLC0415

    out = pathlib.Path(args.out) if args.out else default_out(name)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    seed = seed if args.seed is None else args.seed
    timings = run_cases(cases, out, num_seeds=num_seeds, seed=seed, num_chunks=num_chunks)
    meta = dict(meta, seed=seed, seconds={k: v["seconds"] for k, v in timings.items()},
                train_seconds=sum(v["seconds"] or 0.0 for v in timings.values()),
                wall_seconds=time.time() - start,
                command=f"python experiments/{name}/run.py " + " ".join(
                    sys.argv[1:] if argv is None else argv))
    files = report(out, cases, meta)
    print(f"report in {out}: {', '.join(files)}")
    return publish_if_asked(args, out, here, files)


def publish_if_asked(args: OutputArgs, out: pathlib.Path, here: pathlib.Path,
                     files: Sequence[str], script: str = "run.py") -> int:
    """A script's last step: with ``--publish``, copy ``files`` into ``here/results``
    (:func:`publish`). Returns the exit status: 2 with one line on stderr when published results
    would be replaced without ``--force``, else 0."""
    if not args.publish:
        return 0
    try:
        publish(out, pathlib.Path(here) / "results", files, args.force)
    except ValueError as err:
        print(f"{script}: error: {err}", file=sys.stderr)
        return 2
    print(f"published to {pathlib.Path(here) / 'results'}")
    return 0


def print_report(make_lines: Callable[[], Sequence[str]], out: Optional[str] = None,
                 errors: tuple = (ValueError, OSError, KeyError)) -> int:
    """The ``main`` of a script that reads finished runs and prints a markdown report: the
    lines ``make_lines()`` builds, printed and, with ``out``, written there; a user's mistake
    (a missing run, a run without the metric) is one ``error:`` line and exit status 2."""
    try:
        text = "\n".join(make_lines())
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    if out:
        pathlib.Path(out).write_text(text)
    return 0

"""An experiment's runs: :class:`Case` records trained into run directories, and the readers of
their metrics (curves, final values, areas over training)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any, Callable, Sequence

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


def last_state(run_dir: pathlib.Path) -> tuple[Any, Any, int]:
    """``(engine, state, num_seeds)`` of a run of one setting: its engine rebuilt from
    ``config.json`` and the state of its last checkpoint, seeds on the leading axis (the report
    scripts that read a finished run's parameters). Raises OSError, KeyError or ValueError for
    a folder that holds no such run."""
    import jax  # noqa: PLC0415

    from jaxcredit.agents import make_engine  # noqa: PLC0415
    from jaxcredit.checkpoint import Checkpointer  # noqa: PLC0415

    saved = runlog.read_json(pathlib.Path(run_dir) / "config.json")
    engine = make_engine(TrainConfig.from_dict(saved["config"]))
    seeds = int(saved["num_seeds"])
    template = jax.vmap(engine.init)(jax.random.split(jax.random.key(0), seeds))
    checkpoints = Checkpointer(pathlib.Path(run_dir) / "checkpoints")
    try:
        state, _ = checkpoints.restore(template)
    finally:
        checkpoints.close()
    return engine, state, seeds


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

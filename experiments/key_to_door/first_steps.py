"""The first agent updates of KeyToDoor runs, side by side: the agent's gradient norm per update
and the exact return and key rate after it, counted from the agent's first step (after any
burn-in and model warm-up, read from each run's config.json).

A fitted model that starts wrong gives the agent gradients far larger than the exact model's;
the agent's Adam (COCOA's regime: no clipping, β₂ = 0.999) keeps them in its second moment for
about a thousand updates, so every later step is shorter ("The agent's Adam remembers" in this
folder's README). Evaluate often to see it:

    python experiments/key_to_door/run.py --size cocoa --lengths 103 --updates 400 \\
        --eval-every 10 --learners "cocoa_reward oracle" "cocoa_reward floor" \\
        "cocoa_reward floor warm-up" --out runs/experiments/key_to_door-first
    python experiments/key_to_door/first_steps.py runs/experiments/key_to_door-first/cocoa/L103/*
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Optional

import numpy as np
import tyro

from jaxcredit import experiment as X
from jaxcredit import runlog


@dataclasses.dataclass
class Args:
    """The agent's first updates of finished runs: gradient norms, return and key rate."""

    runs: tyro.conf.Positional[tuple[str, ...]]
    """run directories of experiments/key_to_door/run.py"""
    grad_points: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
    """agent updates at which to show the gradient norm (mean over seeds)"""
    eval_points: tuple[int, ...] = (10, 30, 50, 100, 150, 200, 300)
    """agent updates at which to show the evaluation (mean over seeds; must be evaluated)"""
    parts: tuple[int, ...] = (100, 1000, 2500, 5000, 10000)
    """agent-update edges of the parts over which the gradient norms' tails are summarised"""
    out: Optional[str] = None
    """also write the markdown here"""


def agent_start(run: pathlib.Path) -> int:
    """Updates before the agent's first step: burn-in plus model warm-up."""
    config = runlog.read_json(run / "config.json")["config"]
    return int(config.get("burn_in_updates", 0)) + int(config.get("model_warmup_updates", 0))


def label(run: pathlib.Path) -> str:
    """The run's name with its experiment folder (``<out>/cocoa/L103/<learner>``)."""
    return "/".join(run.parts[-4:-3] + (run.name,))


def at(metrics: dict, name: str, updates: list[int]) -> list[str]:
    cells = []
    for u in updates:
        values = metrics[name][metrics["update"] == u]
        values = values[np.isfinite(values)]
        cells.append(f"{values.mean():.4g}" if values.size else "–")
    return cells


def report(runs: list[pathlib.Path], grad_points, eval_points) -> list[str]:
    lines = []
    for title, name, points in (("the agent's gradient norm", "grad_norm", grad_points),
                                ("the exact return J(π)", "eval/exact_return", eval_points),
                                ("π(KEY | s₀)", "eval/key_rate", eval_points)):
        lines += [f"### {title}, by agent update", "",
                  "| run | start | " + " | ".join(str(p) for p in points) + " |",
                  "|" + "---|" * (len(points) + 2)]
        for run in runs:
            metrics, start = runlog.read_metrics(run), agent_start(run)
            if name not in metrics:
                raise ValueError(f"{run} has no {name} metrics")
            cells = at(metrics, name, [start + p for p in points])
            lines.append(f"| {label(run)} | {start} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def tails(runs: list[pathlib.Path], edges) -> list[str]:
    """The agent's gradient norm over parts of training (all seeds' updates pooled): median,
    99th percentile, maximum, and the share of updates above 10× the median."""
    lines = ["### the agent's gradient norm, by part of training (agent updates): median / p99 / "
             "max / share > 10× median", "",
             "| run | " + " | ".join(f"{lo + 1}–{hi}" for lo, hi in zip(edges[:-1], edges[1:]))
             + " |", "|" + "---|" * len(edges)]
    for run in runs:
        metrics, start = runlog.read_metrics(run), agent_start(run)
        norm, update = metrics["grad_norm"], metrics["update"] - start
        cells = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            x = norm[(update > lo) & (update <= hi) & np.isfinite(norm)]
            if not x.size:
                cells.append("–")
                continue
            med = np.median(x)
            cells.append(f"{med:.2g} / {np.percentile(x, 99):.2g} / {x.max():.2g} / "
                         f"{np.mean(x > 10 * med):.3f}")
        lines.append(f"| {label(run)} | " + " | ".join(cells) + " |")
    return lines + [""]


def main(argv: Optional[list[str]] = None) -> int:
    args = tyro.cli(Args, args=argv)
    runs = [pathlib.Path(r) for r in args.runs]
    return X.print_report(lambda: report(runs, args.grad_points, args.eval_points)
                          + tails(runs, args.parts), args.out)


if __name__ == "__main__":
    sys.exit(main())

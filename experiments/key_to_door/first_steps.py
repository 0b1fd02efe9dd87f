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
    out: Optional[str] = None
    """also write the markdown here"""


def agent_start(run: pathlib.Path) -> int:
    """Updates before the agent's first step: burn-in plus model warm-up."""
    config = runlog.read_json(run / "config.json")["config"]
    return int(config.get("burn_in_updates", 0)) + int(config.get("model_warmup_updates", 0))


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
            lines.append(f"| {run.name} | {start} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    args = tyro.cli(Args, args=argv)
    try:
        lines = report([pathlib.Path(r) for r in args.runs], args.grad_points, args.eval_points)
    except (ValueError, FileNotFoundError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = "\n".join(lines)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

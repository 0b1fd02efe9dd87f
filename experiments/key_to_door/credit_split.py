"""Which coefficient a fitted COCOA model gets wrong: the decisive steps' credit error split by the
reward value that carries it, read from finished KeyToDoor runs.

``cocoa_reward``'s credit is linear in the later rewards and its immediate term is the same for the
fitted and the exact model, so at every evaluation the engine splits the error of the credit at the
decisive steps (the key at s₀, the door) exactly over KeyToDoor's reward values
(``credit/rmse_decisive_reward{i}``, ``jaxcredit.credit.error.reward_value_errors``): 0, the
low apple (0.1·23/L), the high apple (0.9·23/L) and the treasure (0.2·23/L). This script averages
them over quarters of training and per seed, beside the final treasure rate.

    python experiments/key_to_door/run.py --size cocoa --lengths 103 --learners cocoa_reward \\
        --out runs/experiments/key_to_door-split
    python experiments/key_to_door/credit_split.py \\
        runs/experiments/key_to_door-split/cocoa/L103/cocoa_reward [more run dirs] \\
        [--out results/credit_split_L103.md]
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

# KeyToDoor's reward values in the order of its reward law (envs/key_to_door.py).
GROUPS = (("reward1", "low apple"), ("reward2", "high apple"), ("reward3", "treasure"))
COLUMNS = (("eval/treasure_rate", "treasure rate"), ("credit/rmse_decisive", "RMSE, decisive"),
           *((f"credit/rmse_decisive_{key}", f"… from the {name}") for key, name in GROUPS),
           ("credit/sign_agreement", "sign agreement"),
           ("credit/sign_zero", "fitted credit 0"),
           ("credit/grad_cos_fitted", "cos(∇ fitted, ∇J)"),
           ("credit/grad_cos_oracle", "cos(∇ exact model, ∇J)"),
           ("credit/grad_norm_ratio", "‖∇ fitted‖ / ‖∇ exact model‖"))
# The fitted credit's exact ascent relative to the exact model's: a ratio of means.
ASCENT = ("credit/grad_ascent_fitted", "credit/grad_ascent_oracle")


@dataclasses.dataclass
class Args:
    """The decisive steps' credit error of finished runs, split by reward value."""

    runs: tyro.conf.Positional[tuple[str, ...]]
    """run directories (one per learner / setting) of experiments/key_to_door/run.py"""
    quarters: int = 4
    """rows per run: the updates split into this many equal parts"""
    out: Optional[str] = None
    """also write the markdown here"""


def evaluated(run: pathlib.Path) -> dict[str, np.ndarray]:
    metrics = runlog.read_metrics(run)
    if "credit/rmse_decisive_reward2" not in metrics:
        raise ValueError(f"{run} has no credit/rmse_decisive_reward* metrics (cocoa_reward on "
                         f"KeyToDoor, jaxcredit at 70c18be or later)")
    rows = np.isfinite(metrics["credit/rmse_decisive"])
    return {k: v[rows] for k, v in metrics.items()}


def cell(m: dict, key: str, rows: np.ndarray) -> str:
    """The mean of ``key`` over ``rows``, skipping evaluations where it is undefined (the sign
    agreement of a window with no decisive step of non-zero exact credit); "–" where the run
    predates the metric."""
    if key not in m:
        return "–"
    values = m[key][rows]
    return f"{np.nanmean(values):.4f}" if np.isfinite(values).any() else "nan"


def ratio(m: dict, rows: np.ndarray) -> str:
    fitted, oracle = (np.mean(m[k][rows]) for k in ASCENT)
    return f"{fitted / oracle:.3f}"


def report(run: pathlib.Path, quarters: int) -> list[str]:
    m = evaluated(run)
    ascent = int(all(k in m for k in ASCENT))
    update, seed = m["update"], m["seed"]
    edges = np.linspace(0, update.max(), quarters + 1)
    columns = [title for _, title in COLUMNS] + ["ascent, fitted / exact model"] * ascent
    head = "| updates | " + " | ".join(columns) + " |"
    lines = [f"### {run}", "", "Means over seeds and the evaluations in each part:", "", head,
             "|" + "---|" * (len(columns) + 1)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        part = (update > lo) & (update <= hi)
        cells = [cell(m, k, part) for k, _ in COLUMNS] + ([ratio(m, part)] if ascent else [])
        lines.append(f"| {int(lo) + 1}–{int(hi)} | " + " | ".join(cells) + " |")
    first = update <= edges[1]
    lines += ["", f"Per seed, updates 1–{int(edges[1])}, and the final treasure rate:", "",
              "| seed | " + " | ".join(columns) + " | final rate |",
              "|" + "---|" * (len(columns) + 2)]
    for s in np.unique(seed):
        rows = first & (seed == s)
        last = np.flatnonzero(seed == s)[np.argmax(update[seed == s])]
        cells = [cell(m, k, rows) for k, _ in COLUMNS] + ([ratio(m, rows)] if ascent else [])
        lines.append(f"| {s} | " + " | ".join(cells) + f" | {m['eval/treasure_rate'][last]:.3f} |")
    return lines + [""]


def main(argv: Optional[list[str]] = None) -> int:
    args = tyro.cli(Args, args=argv)
    return X.print_report(lambda: [line for run in args.runs
                                   for line in report(pathlib.Path(run), args.quarters)],
                          args.out)


if __name__ == "__main__":
    sys.exit(main())

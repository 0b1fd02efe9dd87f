"""The loop of docs/credit.md ("A loop of your own") at the showcase's size: does a reader's own
actor-critic, with credit from ``jaxcredit.credit``, learn DelayedEffect (n = 30, σ = 1) as the
engine's showcase does?

Runs the documentation's block as written, with ``NUM_SEEDS`` set to ``--seeds``, and writes
``summary.md`` (area under P(optimal first action) over the 150 updates and its final value, mean
± 95 % CI over seeds, and rliable's probability of improvement) into ``--out``::

    python experiments/credit_in_your_loop/measure.py --seeds 32 --out runs/credit-loop
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import sys

import numpy as np
import tyro

from jaxcredit import stats

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "credit.md"


@dataclasses.dataclass(frozen=True)
class Args:
    seeds: int = 32
    """seeds per learner (the doc's block runs 4)"""
    out: pathlib.Path = pathlib.Path("runs/credit-loop")
    """folder for summary.md"""


def loop_block() -> str:
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
                 if "def make_train" in b)
    return block.replace("print(", "(lambda *a, **k: None)(")


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    scope = {"__name__": "credit_loop"}
    code = re.sub(r"NUM_SEEDS, LR, ENT_COEF = 150, \d+,",
                  f"NUM_SEEDS, LR, ENT_COEF = 150, {args.seeds},", loop_block())
    assert f", {args.seeds}, " in code, "the doc's loop no longer sets NUM_SEEDS as expected"
    exec(compile(code, "docs/credit.md loop", "exec"), scope)
    curves = {name: np.asarray(p) for name, p in scope["curves"].items()}
    lines = [f"P(optimal first action) on DelayedEffect n=30 σ=1, the loop of docs/credit.md: "
             f"{args.seeds} seeds, 150 updates of 4 episodes, linear softmax policy; mean ± 95% "
             f"CI over seeds.", "", "| credit | area under the curve | final |", "|---|---|---|"]
    for name, p in curves.items():
        (area, area_h), (final, final_h) = (stats.mean_ci(x) for x in (p.mean(1), p[:, -1]))
        lines.append(f"| {name} | {float(area):.3f} ± {float(area_h):.3f} | "
                     f"{float(final):.3f} ± {float(final_h):.3f} |")
    names = list(curves)
    fitted, gae = curves[names[1]].mean(1), curves[names[0]].mean(1)
    p, low, high = stats.probability_of_improvement(fitted, gae)
    lines += ["", f"P(fitted hca_return's area > A2C+GAE's) = {p:.2f} [{low:.2f}, {high:.2f}] "
              f"(rliable, stratified bootstrap)", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

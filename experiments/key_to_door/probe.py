"""Where a fitted credit model's credit goes wrong on KeyToDoor: the engine's credit-error metrics
at every update of a short run.

One engine run (``jaxcredit.experiment.Case``, all seeds vmapped) of a learner of ``run.py``
(default: A2C with the fitted ``cocoa_reward``) with an evaluation after every update. Each
evaluation assigns the credit of a held-out window twice, with the fitted model and with the same
estimator's exact model (same window and key; ``jaxcredit.credit.error``), and records

* π(KEY | s₀) (``eval/key_rate``) and the KL from the exact to the fitted model;
* the credit's RMSE against the exact model's, overall and for the action taken at the decisive
  steps (the key at s₀ and the door), and the sign agreement there;
* the cosine between the policy gradient of each credit and the exact gradient ∇J.

    python experiments/key_to_door/probe.py [--length 23] [--updates 96] [--seeds 4]
    python experiments/key_to_door/probe.py --learner hca_return
    python experiments/key_to_door/probe.py --regime cocoa --length 103 --updates 400

Writes the run directory, ``probe.json`` and ``probe.md`` into ``--out`` (default: a new folder
under runs/); ``--publish`` copies the report into ``results/`` as ``probe_<learner>.md``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np
import tyro

from jaxcredit import experiment as X

HERE = pathlib.Path(__file__).resolve().parent
COLUMNS = (("eval/key_rate", "π(KEY\\|s₀)"), ("estimator/kl_to_exact", "KL"),
           ("credit/rmse_to_exact", "credit RMSE"), ("credit/rmse_decisive", "RMSE, decisive"),
           ("credit/sign_agreement", "sign agreement, decisive"),
           ("credit/sign_zero", "fitted credit 0, decisive"),
           ("credit/corr_to_exact", "corr"),
           ("credit/grad_cos_fitted", "cos(∇ fitted, ∇J)"),
           ("credit/grad_cos_oracle", "cos(∇ exact model, ∇J)"))


@dataclasses.dataclass
class Args:
    """The fitted model's credit against the exact model's, update by update (module doc)."""

    length: int = 23
    """track length L"""
    learner: str = "cocoa_reward"
    """a learner of run.py with a fitted model and an exact twin (cocoa_reward, hca_return,
    hca_state, c2a2c)"""
    regime: str = "jaxcredit"
    """jaxcredit | cocoa (run.py's --regime)"""
    updates: int = 96
    """updates per seed (an evaluation after each)"""
    seeds: int = 4
    """seeds (vmapped)"""
    out: Optional[str] = None
    """output folder (default: a new one under runs/experiments/)"""
    publish: bool = False
    """copy probe.md into results/ as probe_<learner>.md (--force replaces it)"""
    force: bool = False
    """with --publish: replace the published file"""


def load_run_module():
    sys.path.insert(0, str(HERE))
    import run  # noqa: PLC0415 (the experiment's own settings)

    return run


def probe_case(args: Args) -> X.Case:
    run = load_run_module()
    if args.regime not in run.REGIMES:
        raise ValueError(f"--regime must be one of {', '.join(run.REGIMES)}")
    if args.updates < 4 or args.length < 4:
        raise ValueError("need --updates >= 4 and --length >= 4")
    case = run.case(args.length, args.learner, args.updates, regime=args.regime)
    config = case.config.replace(eval_every=1, eval_episodes=2)
    return dataclasses.replace(case, name=f"probe_{case.name.replace('/', '_')}", config=config)


def report(folder: pathlib.Path, case: X.Case, args: Args) -> list[str]:
    run_dir = folder / case.name
    curves = {}
    for metric, _ in COLUMNS:
        try:
            curves[metric] = X.curves(run_dir, metric)[1]  # [S, U]
        except (KeyError, ValueError):
            raise ValueError(f"{args.learner!r} reports no {metric}: it needs a fitted model "
                             f"with an exact twin") from None
    (folder / "probe.json").write_text(json.dumps({k: v.tolist() for k, v in curves.items()}))
    blocks = np.array_split(np.arange(args.updates), 4)
    lines = [f"KeyToDoor L={args.length}, {args.learner} ({args.regime} regime), {args.seeds} "
             f"seeds, {args.updates} updates; each row averages a quarter of the updates, then "
             "the seeds. Every number is the engine's evaluation metric on a held-out window: "
             "the fitted model's credit against the exact model's on the same window and key "
             "(`python experiments/key_to_door/probe.py "
             f"--length {args.length} --learner {args.learner} --regime {args.regime} "
             f"--updates {args.updates} --seeds {args.seeds}`).", "",
             "| updates | " + " | ".join(title for _, title in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    for i, block in enumerate(blocks):
        # Every metric is measured at every update (an evaluation after each).
        row = [np.nanmean(np.array_split(curves[metric], 4, axis=1)[i]) for metric, _ in COLUMNS]
        lines.append(f"| {block[0] + 1}–{block[-1] + 1} | " + " | ".join(
            f"{x:.4f}" for x in row) + " |")
    (folder / "probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return lines


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    try:
        case = probe_case(args)
    except ValueError as err:
        print(f"probe.py: error: {err}", file=sys.stderr)
        return 2
    folder = pathlib.Path(args.out) if args.out else X.default_out("key_to_door_probe")
    X.run_cases([case], folder, num_seeds=args.seeds, seed=7, num_chunks=1)
    try:
        report(folder, case, args)
    except ValueError as err:
        print(f"probe.py: error: {err}", file=sys.stderr)
        return 2
    if args.publish:
        target = HERE / "results" / f"probe_{args.learner.replace(' ', '_')}.md"
        if target.exists() and not args.force:
            print(f"probe.py: error: {target} exists; add --force to replace it",
                  file=sys.stderr)
            return 2
        target.write_text((folder / "probe.md").read_text())
        print(f"published {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

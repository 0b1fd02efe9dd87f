"""The credit ratio ρ = π/h learned directly (Hindsight-DICE, ``hca_dice``) against ρ divided from a
fitted classifier (``hca_return``), both against the exact ratio of dynamic programming.

Each (task, estimator, model learning rate) is one engine run with the policy held still (agent
learning rate 1e-7, no entropy), so the exact ratio does not move and the error measures the fit
alone; an evaluation every 20 updates reports ``credit/ratio_rmse_to_exact`` (the RMSE of ρ at the
actions taken on a held-out window) and ``credit/rmse_to_exact`` (the credit's). The unfitted
model (learning rate 1e-12: ν = 1, or h = π) is the floor to beat.

    python experiments/hca_tasks/ratio_error.py --out runs/experiments/ratio_error
    python experiments/hca_tasks/ratio_error.py --seeds 2 --updates 20     # a quick check

Writes ``ratio_error.md`` and ``ratio_error.json`` into ``--out``; ``--publish`` copies them into
``results/`` (``--force`` replaces them).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import tyro

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.flags import flat, parse_options

HERE = pathlib.Path(__file__).resolve().parent
# label -> (env, env options, num_envs, num_steps)
TASKS = {
    "DelayedEffect n=3 σ=0.1": ("DelayedEffect", (("n", 3), ("sigma", 0.1)), 64, 4),
    "DelayedEffect n=3 σ=1": ("DelayedEffect", (("n", 3), ("sigma", 1.0)), 64, 4),
    "AmbiguousBandit": ("AmbiguousBandit", (), 256, 1),
    "KeyToDoor L=8": ("KeyToDoor", (("length", 8),), 32, 8),
}
MODELS = (("hca_dice", 1e-12), ("hca_dice", 1e-3), ("hca_dice", 3e-3), ("hca_return", 1e-3),
          ("hca_return", 3e-3))
METRICS = ("credit/ratio_rmse_to_exact", "credit/rmse_to_exact")


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Learned against divided credit ratios, policy held still (module docstring)."""

    seeds: int = 4
    """seeds per run (vmapped)"""
    updates: int = 80
    """updates per run (4 model steps each)"""


def cases(updates: int) -> list[X.Case]:
    out = []
    for task, (env, options, num_envs, num_steps) in TASKS.items():
        for estimator, lr in MODELS:
            config = TrainConfig.from_flat(algo="a2c", estimator=estimator, env=env,
                                           env_options=options, num_envs=num_envs,
                                           num_steps=num_steps,
                                           total_timesteps=num_envs * num_steps * updates,
                                           eval_every=max(1, updates // 4), eval_episodes=2,
                                           anneal_lr=False)
            slug = task.replace(" ", "_").replace("=", "").replace("σ", "sigma")
            out.append(X.Case(name=f"{slug}/{estimator}_elr{lr:g}", config=config,
                              settings=(dict(lr=1e-7, gamma=1.0, ent_coef=0.0,
                                             estimator_lr=lr),),
                              labels={"task": task, "model": f"{estimator} @ {lr:g}"}))
    return out


def report(out: pathlib.Path, runs: list[X.Case], meta: dict) -> list[str]:
    results = {}
    for case in runs:
        entry = {}
        for metric in METRICS:
            entry[metric] = X.final(out / case.name, metric, last=2).tolist()
        results[f"{case.labels['task']}/{case.labels['model']}"] = entry
    tasks = list(TASKS)
    models = [f"{e} @ {lr:g}" for e, lr in MODELS]
    lines = [f"Policy held still, {meta['seeds']} seeds, {meta['updates']} updates of 4 model "
             "steps; mean ± 95% CI over seeds of the last two evaluations. "
             "`@ 1e-12` is the unfitted model (ν = 1 for hca_dice).", ""]
    for metric, title in zip(METRICS, ("RMSE of the credit ratio ρ = π/h at the actions taken",
                                       "RMSE of the credit")):
        lines += [f"### {title}", ""] + X.markdown_table(
            tasks, models, lambda row, col: X.mean_ci_cell(results[f"{row}/{col}"][metric])) \
            + [""]
    (out / "ratio_error.md").write_text("\n".join(lines) + "\n")
    (out / "ratio_error.json").write_text(json.dumps({"meta": meta, "results": results},
                                                     indent=1))
    print("\n".join(lines))
    return ["ratio_error.md", "ratio_error.json"]


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.seeds < 2 or args.updates < 4:
        print("ratio_error.py: error: need --seeds >= 2 and --updates >= 4", file=sys.stderr)
        return 2
    try:
        runs = X.with_overrides(cases(args.updates), parse_options(flat(args.set), "--set"),
                                parse_options(flat(args.hparam), "--hparam"))
    except ValueError as err:
        print(f"ratio_error.py: error: {err}", file=sys.stderr)
        return 2
    meta = {"seeds": args.seeds, "updates": args.updates}
    if args.set or args.hparam:
        meta["overrides"] = {"set": list(flat(args.set)), "hparam": list(flat(args.hparam))}
    return X.run_and_report("ratio_error", HERE, args, runs, meta, report, args.seeds, 3, argv,
                            num_chunks=1)


if __name__ == "__main__":
    sys.exit(main())

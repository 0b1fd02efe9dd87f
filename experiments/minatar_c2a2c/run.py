"""C2A2C against A2C on MinAtar, with and without delayed rewards, learned on the engine.

Alipov et al. ("Towards Practical Credit Assignment for Deep RL", arXiv 2106.04499) report that
C2A2C, A2C whose policy update is switched off for actions that hindsight says did not matter,
beats A2C on Atari. Their text was not available: ``c2a2c`` is a reconstruction (docs/hca.md).
This is the stand-in comparison on MinAtar (Young & Tian 2019; gymnax) and the ``DelayedReward-``
variants of its games, where the whole episode return is paid at the last step.

Learners (``jaxcredit.presets``), all on the engine's A2C (16 envs × 5 steps, as openai/baselines'
Atari A2C): ``A2C+GAE``; ``c2a2c`` (hard gate 1[|1 − c| ≥ δ], δ = 0.1) and ``c2a2c soft``
(min(1, |1 − c|/δ)) with the hindsight model fitted inside each update (4 Adam steps at 1e-3);
``c2a2c 1-step`` with one step at the agent's learning rate, as before the model had its own
optimiser. MinAtar has no tabular MDP, so there is no oracle here.

Metric: ``eval/return``, the mean return of 16 evaluation episodes of the current stochastic
policy, run inside the program every ``updates / 8`` updates (the delayed variant pays the same
total, so the columns compare); also the gate's open fraction (``credit/gate_open``).

    python experiments/minatar_c2a2c/run.py --size smoke
    python experiments/minatar_c2a2c/run.py --size cpu            # the committed results
    python experiments/minatar_c2a2c/run.py --size gpu            # 10M steps per seed, all games
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit import stats
from jaxcredit.agents import TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
GAMES = ("Breakout", "Asterix", "SpaceInvaders", "Freeway", "Seaquest")
VARIANTS = {"plain": "", "delayed": "DelayedReward-"}
ALL_LEARNERS = ("A2C+GAE", "c2a2c", "c2a2c soft", "c2a2c 1-step")
NUM_ENVS, NUM_STEPS = 16, 5
SIZES = {
    "smoke": dict(steps=4_000, seeds=2, games=("Breakout",), variants=("plain",),
                  learners=("A2C+GAE", "c2a2c"), hidden=(64, 64)),
    # The two games A2C learns within a CPU budget; Asterix (flat at this budget), Seaquest (about
    # 20× slower per step on XLA:CPU) and Freeway (2 500-step episodes) are left to the gpu size.
    "cpu": dict(steps=200_000, seeds=8, games=("Breakout", "SpaceInvaders"),
                variants=tuple(VARIANTS), learners=ALL_LEARNERS, hidden=(64, 64)),
    "gpu": dict(steps=10_000_000, seeds=8, games=GAMES, variants=tuple(VARIANTS),
                learners=ALL_LEARNERS, hidden=(256, 256)),
}
# openai/baselines' Atari A2C where it carries over; Adam instead of RMSProp, GAE λ = 0.95.
HPARAMS = dict(lr=7e-4, gamma=0.99, lambda_=0.95, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
               estimator_lr=1e-3)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """C2A2C against A2C on MinAtar (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | gpu"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    games: tuple[str, ...] = ()
    """MinAtar games (default: the size's): """ + ", ".join(GAMES)
    variants: tuple[str, ...] = ()
    """plain and/or delayed (default: both)"""
    learners: tuple[str, ...] = ()
    """learner presets (default: the size's): """ + ", ".join(ALL_LEARNERS)
    steps: Optional[int] = None
    """env steps per seed (default: the size's)"""


def case(game: str, variant: str, label: str, steps: int, hidden) -> X.Case:
    updates = steps // (NUM_ENVS * NUM_STEPS)
    hp = dict(HPARAMS)
    if label.endswith("1-step"):
        hp["estimator_lr"] = hp["lr"]
    config = TrainConfig.from_flat(
        **learner_fields(label), env=f"{VARIANTS[variant]}{game}-MinAtar", num_envs=NUM_ENVS,
        num_steps=NUM_STEPS, total_timesteps=NUM_ENVS * NUM_STEPS * updates,
        hidden_sizes=tuple(hidden), anneal_lr=False, eval_every=max(1, updates // 8),
        eval_episodes=16)
    return X.Case(name=f"{game}-{variant}/{label.replace(' ', '_')}", config=config,
                  settings=(hp,), labels={"task": f"{game} {variant}", "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks = list(dict.fromkeys(c.labels["task"] for c in cases))
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    results = {}
    for c in cases:
        run_dir = out / c.name
        steps, curve = X.curves(run_dir, "eval/return")
        entry = {"env_steps": steps.tolist(), "curve": curve.tolist(),
                 "final": X.final(run_dir, "eval/return", last=2).tolist()}
        try:
            entry["gate_open"] = X.final(run_dir, "credit/gate_open", last=50).tolist()
        except ValueError:
            pass
        results[f"{c.labels['task']}|{c.labels['learner']}"] = entry

    def cell(key, digits=2):
        def fn(task, learner):
            entry = results.get(f"{task}|{learner}")
            return "" if entry is None or key not in entry else X.mean_ci_cell(entry[key], digits)
        return fn

    lines = [f"MinAtar, size '{meta['size']}': {meta['seeds']} seeds per cell, {meta['steps']:,} "
             "env steps per seed; mean ± 95% CI (Student t) over seeds.", "",
             "### Final evaluation return (mean of the last 2 evaluations, 16 episodes each)", ""]
    lines += X.markdown_table(tasks, learners, cell("final")) + [""]
    if "A2C+GAE" in learners:
        def improvement(task, learner):
            if learner == "A2C+GAE":
                return ""
            p, low, high = stats.probability_of_improvement(
                np.asarray(results[f"{task}|{learner}"]["final"]),
                np.asarray(results[f"{task}|A2C+GAE"]["final"]))
            results[f"{task}|{learner}"]["p_improvement"] = [p, low, high]
            return f"{p:.2f} [{low:.2f}, {high:.2f}]"
        lines += ["### P(final return > A2C+GAE's) (rliable's probability of improvement, "
                  "stratified bootstrap 95% CI)", ""]
        lines += X.markdown_table(tasks, [label for label in learners if label != "A2C+GAE"],
                                  improvement) + [""]
    gated = [label for label in learners if "c2a2c" in label]
    lines += ["### Fraction of the gate open (mean over the last 50 updates)", ""]
    lines += X.markdown_table(tasks, gated, cell("gate_open", 3)) + [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    X.plot_curve_panels(out / "curves.png", {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                        results[f"{t}|{label}"]["curve"])
                                                for label in learners} for t in tasks},
                        "evaluation return")
    return ["table.md", "results.json", "curves.png"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    games = args.games or size["games"]
    variants = args.variants or size["variants"]
    learners = args.learners or size["learners"]
    bad = [g for g in games if g not in GAMES] + [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"unknown game(s)/variant(s) {bad}")
    steps = args.steps or size["steps"]
    cases = [case(g, v, label, steps, size["hidden"]) for g in games for v in variants
             for label in learners]
    return cases, {"steps": steps, "games": list(games), "variants": list(variants),
                   "learners": list(learners), "hparams": HPARAMS, "num_envs": NUM_ENVS,
                   "num_steps": NUM_STEPS, "hidden": list(size["hidden"])}


def main(argv=None) -> int:
    return X.main("minatar_c2a2c", HERE, Args, SIZES, plan, report, 2106, argv)


if __name__ == "__main__":
    sys.exit(main())

"""The HCA paper's illustrative tasks, learned on the engine, with fitted and exact hindsight.

Tasks (Harutyunyan et al. 2019, Fig. 2; ``jaxcredit.envs.hca_tasks``): Shortcut, DelayedEffect
(chain length n, reward noise σ) and AmbiguousBandit. Learners (``jaxcredit.presets``):
REINFORCE, A2C+GAE, and A2C with the credit of hca_return, hca_state and c2a2c, each with its
model fitted inside the update, with the exact model of the current policy (``oracle``), and
fitted the way it was before it had its own optimiser (``1-step``).

Each (task, learner) pair is one engine run: all seeds vmapped in one compiled program, written
as a run directory. The metric is the task metric ``eval/p_optimal_first_action``, the exact
probability π(a* | start state) of the decisive first action (a* = 0 in all three tasks),
computed inside the run at each evaluation: the learning curve carries no sampling noise.
DelayedEffect windows hold whole episodes (T = n + 1), so the Monte-Carlo return that
return-conditioned hindsight reads is the episode's return, which the exact model is of.

    python experiments/hca_tasks/run.py --size smoke        # a 1-minute check
    python experiments/hca_tasks/run.py --size cpu          # the committed results
    python experiments/hca_tasks/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/hca_tasks/results/`` (``--force`` to replace it).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import envs
from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/p_optimal_first_action"
ALL_LEARNERS = ("REINFORCE", "A2C+GAE", "hca_return", "hca_return grid", "hca_return tabular",
                "hca_return oracle",
                "hca_return 1-step",
                "hca_state", "hca_state oracle", "hca_state 1-step", "c2a2c", "c2a2c oracle",
                "c2a2c 1-step", "cca")

# task label -> (env, env options, num_envs, num_steps)
TASKS = {
    "Shortcut": ("Shortcut", (), 16, 8),
    "AmbiguousBandit": ("AmbiguousBandit", (), 16, 4),
    **{f"DelayedEffect n={n} σ={s:g}": ("DelayedEffect", (("n", n), ("sigma", s)), envs, n + 1)
       for n, envs in ((3, 32), (10, 16), (30, 8)) for s in (0.0, 0.1, 1.0)},
}
SIZES = {
    "smoke": dict(updates=6, seeds=2, tasks=("AmbiguousBandit", "DelayedEffect n=3 σ=0.1"),
                  learners=("A2C+GAE", "hca_return", "hca_return oracle")),
    "cpu": dict(updates=150, seeds=32, learners=ALL_LEARNERS,
                tasks=("Shortcut", "AmbiguousBandit", "DelayedEffect n=10 σ=0.1",
                       "DelayedEffect n=10 σ=1", "DelayedEffect n=30 σ=0.1",
                       "DelayedEffect n=30 σ=1")),
    "paper": dict(updates=600, seeds=64, learners=ALL_LEARNERS, tasks=tuple(TASKS)),
}
# γ = 1 (episodic); a small entropy bonus; the credit models' own learning rate.
HPARAMS = dict(lr=3e-3, gamma=1.0, lambda_=0.95, ent_coef=0.003, vf_coef=0.5, max_grad_norm=1.0,
               estimator_lr=1e-3)
TABLE_LR = 3e-2  # the tabular hindsight model's rate (case below)
WARMUP_UPDATES = 5  # "hca_return tabular warm-up": updates that fit the table first (README)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """P(optimal first action) on the HCA tasks for each learner (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | paper"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    tasks: tuple[str, ...] = ()
    """task labels (default: the size's): """ + "; ".join(TASKS)
    learners: tuple[str, ...] = ()
    """learner presets (default: the size's): """ + ", ".join(ALL_LEARNERS)
    updates: Optional[int] = None
    """updates per run (default: the size's)"""
    warmup_updates: int = WARMUP_UPDATES
    """model warm-up of the learner "hca_return tabular warm-up" (updates inside the budget)"""


def case(task: str, label: str, updates: int, warmup: int = WARMUP_UPDATES) -> X.Case:
    env, env_options, num_envs, num_steps = TASKS[task]
    overrides = {}
    if label.startswith("hca_state") and env == "DelayedEffect" and "oracle" not in label:
        # The engine's DelayedEffect observations alias the chain: the reward r_k carries the
        # evidence (docs/hca.md, "hca_state on aliased states").
        overrides["estimator_options"] = (("condition_on_reward", True),)
    hp = dict(HPARAMS)
    preset = label.removesuffix(" warm-up")
    if label == "hca_return tabular warm-up":
        # The table starts at h = π, where the credit is 0; the warm-up fits it for a few
        # updates (inside the budget) before the agent's first step, as KeyToDoor's learner.
        overrides["model_warmup_updates"] = warmup
    if preset == "hca_return tabular":
        # One logit per (observation, return bin, action), the observations one-hot. A table
        # entry moves by about the rate per Adam step, so the MLP's 1e-3 would leave it near
        # h = π after 150 updates: 3e-2 (1e-2 and 1e-1 measured worse, README).
        env_obj, env_params = envs.make(env, **dict(env_options))
        num_states = int(np.prod(env_obj.observation_space(env_params).shape))
        overrides["estimator_options"] = (("model", "tabular"), ("num_states", num_states))
        hp["estimator_lr"] = TABLE_LR
    if label.endswith("1-step"):
        hp["estimator_lr"] = hp["lr"]
    config = TrainConfig.from_flat(
        **learner_fields(preset, **overrides), env=env, env_options=env_options,
        num_envs=num_envs, num_steps=num_steps, total_timesteps=num_envs * num_steps * updates,
        hidden_sizes=(64, 64), anneal_lr=False, eval_every=max(1, updates // 15),
        eval_episodes=32)
    slug = task.replace(" ", "_").replace("=", "").replace("σ", "sigma")
    return X.Case(name=f"{slug}/{label.replace(' ', '_')}", config=config, settings=(hp,),
                  labels={"task": task, "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks = list(dict.fromkeys(c.labels["task"] for c in cases))
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    results = {}
    for c in cases:
        run_dir = out / c.name
        steps, curve = X.curves(run_dir, METRIC)
        entry = {"env_steps": steps.tolist(), "curve": curve.tolist(),
                 "final": X.final(run_dir, METRIC, last=2).tolist(),
                 "area": X.area(run_dir, METRIC).tolist()}
        entry.update(X.credit_error_entries(run_dir, last=3))
        results[f"{c.labels['task']}|{c.labels['learner']}"] = entry

    def cell(key, digits=3):
        def fn(task, learner):
            entry = results.get(f"{task}|{learner}")
            return "" if entry is None or key not in entry else X.mean_ci_cell(entry[key], digits)
        return fn

    lines = [f"HCA tasks, size '{meta['size']}': {meta['seeds']} seeds per cell, "
             f"{meta['updates']} updates per run; mean ± 95% CI (Student t) over seeds of the "
             "exact P(optimal first action) of the policy network.", ""]
    for key, title in (("area", "Mean P(optimal first action) over training (area under the "
                                "curve; higher = faster)"),
                       ("final", "Final P(optimal first action) (mean of the last 2 "
                                 "evaluations)")):
        lines += [f"### {title}", ""] + X.markdown_table(tasks, learners, cell(key)) + [""]
    for key in ("area", "final"):
        lines += X.gain_share_table(tasks, learners,
                                    lambda t, label, key=key: results[f"{t}|{label}"][key], key)
    lines += X.credit_error_tables(tasks, learners,
                                   lambda t, label: results.get(f"{t}|{label}"), last=3)
    scores = {label: np.stack([results[f"{t}|{label}"]["area"] for t in tasks], axis=1)
              for label in learners}
    table, agg = X.aggregate_table(
        scores, baseline="A2C+GAE" if "A2C+GAE" in learners else None)
    lines += ["### Across tasks: the area's IQM and mean (rliable, stratified bootstrap 95% CI), "
              "and the probability that a run beats A2C+GAE on the same task", ""] + table
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results,
                                                  "aggregate": agg}, indent=1))
    X.plot_curve_panels(out / "curves.png", {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                        results[f"{t}|{label}"]["curve"])
                                                for label in learners} for t in tasks},
                        "P(optimal first action)")
    return ["table.md", "results.json", "curves.png"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    tasks = args.tasks or size["tasks"]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; known: {'; '.join(TASKS)}")
    learners = args.learners or size["learners"]
    cases = [case(t, label, size["updates"], args.warmup_updates) for t in tasks
             for label in learners]
    return cases, {"updates": size["updates"], "tasks": list(tasks), "learners": list(learners),
                   "hparams": HPARAMS, "shapes": {t: TASKS[t][2:] for t in tasks}}


def main(argv=None) -> int:
    return X.main("hca_tasks", HERE, Args, SIZES, plan, report, 2019, argv)


if __name__ == "__main__":
    sys.exit(main())

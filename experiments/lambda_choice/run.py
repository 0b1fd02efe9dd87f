"""Which λ: Chunked-TD against every fixed λ on Chain-and-Split.

Chunked-TD (Ramesh et al., ICML 2024; ``jaxcredit.estimators.chunked``) sets λ per step from a
transition model: the return continues through predictable steps and bootstraps at surprises.
The paper's claim (abstract; its Fig. on Chain-and-Split): the chunked learner finds the optimal
first action faster than TD(λ) at any fixed λ. Here the learner is A2C on the engine (an MLP
policy and critic), not the paper's tabular SARSA under a uniform behaviour policy, and the
metric is the exact probability of the optimal first action, π(0 | s_0), computed inside the run
(``eval/p_optimal_first_action``), not the Q-gap of a fixed behaviour's SARSA.

Learners: GAE at λ ∈ {0, 0.5, 0.8, 0.9, 0.95, 1}; ``chunked`` in its expected form (λ from
Σ_a π(a|s) p̂(s′|s, a)) with counted transitions and with the exact model; and the sampled form
with counts, whose λ also carries π of the action taken where the action does not matter.

    python experiments/lambda_choice/run.py --size smoke     # a 1-minute check
    python experiments/lambda_choice/run.py --size cpu       # the committed results
    python experiments/lambda_choice/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/lambda_choice/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import EstimatorConfig, EvalConfig, TrainConfig

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/p_optimal_first_action"
LAMBDAS = (0.0, 0.5, 0.8, 0.9, 0.95, 1.0)
CHUNKED = {"chunked expected": (("form", "expected"),),
           "chunked expected oracle": (("form", "expected"), ("model", "oracle")),
           "chunked sampled": (("form", "sampled"),),
           # The official categorical network per feature, for tasks without a table: the
           # scalar λ (the paper's C-default) and one λ per reward feature (C-factored).
           "chunked features": (("form", "expected"), ("model", "features")),
           "chunked features, vector λ": (("form", "expected"), ("model", "features"),
                                          ("lambdas", "vector")),
           # The environment's exact per-feature law in the model's place (the oracle).
           "chunked feature oracle": (("form", "expected"), ("model", "feature_oracle")),
           "chunked feature oracle, vector λ": (("form", "expected"),
                                                ("model", "feature_oracle"),
                                                ("lambdas", "vector")),
           # The feature model fitted for 32 updates (512 episodes) before the agent's first
           # step: the official runs act ε-greedily with ε decaying from 1 over their first
           # 10 % of episodes (train_keytodoor.py: 500), while the model trains from the start.
           "chunked features, vector λ, warm-up": (("form", "expected"), ("model", "features"),
                                                   ("lambdas", "vector"))}
WARMUP = {"chunked features, vector λ, warm-up": 32}
# The meta-gradient's λ (Xu et al. 2018; --meta-gradient lambda): (start, meta rate). The rate
# 1e-2 was set before the runs; at it λ hardly moves in 150 updates, so 0.1 was run after.
META = {"meta λ from 0.5": (0.5, 1e-2), "meta λ from 0.95": (0.95, 1e-2),
        "meta λ from 0.5, rate 0.1": (0.5, 0.1), "meta λ from 0.95, rate 0.1": (0.95, 0.1)}
# The meta-gradient's γ (--meta-gradient gamma, reference γ̄ = 0.995): label -> (start γ, meta
# rate), at λ = 0.95; and both adapted at once from (γ, λ) = (0.97, 0.95). A start below 1 is
# needed: γ = sigmoid(logit(h) + δ) and logit(1) is infinite.
META_GAMMA = {"meta γ from 0.97, rate 0.1": (0.97, 0.1)}
META_BOTH = {"meta γ,λ from 0.97,0.95, rate 0.1": (0.97, 0.95, 0.1)}
GAMMAS = (0.9, 0.97, 0.99)
CHAIN_LEARNERS = tuple(f"GAE λ={lam:g}" for lam in LAMBDAS) + tuple(CHUNKED)
FIXED_GAMMA = tuple(f"GAE γ={g:g}" for g in GAMMAS)
ALL_LEARNERS = CHAIN_LEARNERS + tuple(META) + FIXED_GAMMA + tuple(META_GAMMA) + tuple(META_BOTH)

# task label -> (env, env options, num_envs, num_steps): whole 20-step episodes per window. The
# one-hot variant gives the networks tabular features, as the paper's tabular learners.
TASKS = {"ChainAndSplit": ("ChainAndSplit", (), 16, 20),
         "ChainAndSplit one-hot": ("ChainAndSplit", (("one_hot", 1),), 16, 20),
         # The HCA task where GAE's trace decides the credit of the first action (../hca_tasks).
         "DelayedEffect n=30 σ=1": ("DelayedEffect", (("n", 30), ("sigma", 1.0)), 8, 31),
         # COCOA's key-to-door at its shortest length (../key_to_door, the jaxcredit regime):
         # the key's value arrives 20 steps after it is taken, past apples of random reward.
         "KeyToDoor L=23": ("KeyToDoor", (("length", 23),), 8, 23),
         # Chunked-TD's other two tasks at the official scripts' sizes (whole episodes).
         "AccumulatedCharge": ("AccumulatedCharge", (), 16, 201),
         "KeyToDoorDistractors": ("KeyToDoorDistractors", (), 16, 100)}
# The metric each task is scored by (exact, computed inside the run), and its name in the report.
TASK_METRICS = {"KeyToDoor L=23": ("eval/treasure_rate", "treasure rate"),
                # The paper's regret: the share of episodes whose choice was not regretted.
                "AccumulatedCharge": ("eval/success_rate", "share without regret"),
                "KeyToDoorDistractors": ("eval/success_rate", "share without regret")}
TASK_EVAL_EPISODES = {"AccumulatedCharge": 64, "KeyToDoorDistractors": 64}
TASK_HPARAMS = {"KeyToDoor L=23": dict(ent_coef=0.03)}  # COCOA's entropy weight at L = 23
SIZES = {
    "smoke": dict(updates=20, seeds=2, learners=("GAE λ=0", "GAE λ=1", "chunked expected"),
                  tasks=("ChainAndSplit",)),
    "cpu": dict(updates=3000, seeds=32, learners=CHAIN_LEARNERS,
                tasks=("ChainAndSplit", "ChainAndSplit one-hot")),
    # Fixed λ against the meta-gradient's λ, at the HCA tasks' budget.
    "meta": dict(updates=150, seeds=32, tasks=("DelayedEffect n=30 σ=1",),
                 learners=("GAE λ=0", "GAE λ=0.5", "GAE λ=0.9", "GAE λ=0.95", "GAE λ=1",
                           *META)),
    # The same comparison on KeyToDoor (the key_to_door experiment's jaxcredit regime: 1 024
    # updates × 8 episodes), with γ adapted as well against a sweep of fixed γ.
    "meta-ktd": dict(updates=1024, seeds=8, tasks=("KeyToDoor L=23",),
                     learners=("GAE λ=0", "GAE λ=0.5", "GAE λ=0.9", "GAE λ=0.95", "GAE λ=1",
                               "meta λ from 0.5, rate 0.1", "meta λ from 0.95, rate 0.1",
                               *FIXED_GAMMA, *META_GAMMA, *META_BOTH)),
    # Chunked-TD's Accumulated-Charge and key-to-door with distractors, the feature model's λ
    # (scalar and, where the reward is a sum over features, vector) against fixed λ.
    "chunktd-tasks": dict(updates=400, seeds=16, tasks=("AccumulatedCharge",
                                                        "KeyToDoorDistractors"),
                          learners=("GAE λ=0", "GAE λ=0.5", "GAE λ=0.9", "GAE λ=1",
                                    "chunked features", "chunked features, vector λ",
                                    "chunked feature oracle",
                                    "chunked feature oracle, vector λ",
                                    "chunked features, vector λ, warm-up")),
    "chunktd-smoke": dict(updates=4, seeds=2, tasks=("AccumulatedCharge", "KeyToDoorDistractors"),
                          learners=("GAE λ=1", "chunked features", "chunked features, vector λ")),
}
# γ = 1 as the paper; no entropy bonus (it would outweigh the 0.01 the first action decides).
HPARAMS = dict(lr=3e-3, gamma=1.0, lambda_=0.95, ent_coef=0.0, vf_coef=0.5, max_grad_norm=1.0)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """P(optimal first action) on Chain-and-Split for each way of choosing λ (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | meta | meta-ktd | chunktd-tasks | chunktd-smoke"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    learners: tuple[str, ...] = ()
    """learners (default: the size's): """ + ", ".join(ALL_LEARNERS)
    tasks: tuple[str, ...] = ()
    """tasks (default: the size's): """ + "; ".join(TASKS)
    updates: Optional[int] = None
    """updates per run (default: the size's)"""


def applies(task: str, label: str) -> bool:
    """The vector λ needs a reward that is a sum over features (KeyToDoorDistractors)."""
    return "vector" not in label or task == "KeyToDoorDistractors"


def case(task: str, label: str, updates: int) -> X.Case:
    env, env_options, num_envs, num_steps = TASKS[task]
    hp = dict(HPARAMS, **TASK_HPARAMS.get(task, {}))
    meta_gradient = ()
    if label in CHUNKED:
        estimator = EstimatorConfig("chunked", options=CHUNKED[label])
    elif label.startswith("GAE λ="):
        estimator = EstimatorConfig("gae")
        hp["lambda_"] = float(label.removeprefix("GAE λ="))
    elif label.startswith("GAE γ="):
        estimator = EstimatorConfig("gae")
        hp["gamma"] = float(label.removeprefix("GAE γ="))
    elif label in META:
        estimator, meta_gradient = EstimatorConfig("gae"), ("lambda",)
        hp.update(lambda_=META[label][0], meta_lr=META[label][1])
    elif label in META_GAMMA:
        estimator, meta_gradient = EstimatorConfig("gae"), ("gamma",)
        hp.update(gamma=META_GAMMA[label][0], meta_lr=META_GAMMA[label][1])
    elif label in META_BOTH:
        estimator, meta_gradient = EstimatorConfig("gae"), ("gamma", "lambda")
        gamma, lambda_, rate = META_BOTH[label]
        hp.update(gamma=gamma, lambda_=lambda_, meta_lr=rate)
    else:
        raise ValueError(f"unknown learner {label!r}; known: {', '.join(ALL_LEARNERS)}")
    config = TrainConfig(
        algo="a2c", estimator=estimator, env=env, env_options=env_options, num_envs=num_envs,
        num_steps=num_steps, total_timesteps=num_envs * num_steps * updates,
        hidden_sizes=(64, 64), anneal_lr=False, meta_gradient=meta_gradient,
        model_warmup_updates=WARMUP.get(label, 0),
        evaluation=EvalConfig(every=max(1, updates // 20),
                              episodes=TASK_EVAL_EPISODES.get(task, 8)))
    slug = (label.replace(", ", "_").replace(",", "_").replace(" ", "_").replace("λ=", "lambda")
            .replace("λ", "lambda").replace("γ=", "gamma").replace("γ", "gamma"))
    task_slug = task.replace(" ", "_").replace("=", "").replace("σ", "sigma")
    return X.Case(name=f"{task_slug}/{slug}", config=config, settings=(hp,),
                  labels={"task": task, "learner": label})


def task_metric(task: str) -> tuple[str, str]:
    """(metric, its name in the report) of a task."""
    return TASK_METRICS.get(task, (METRIC, "P(optimal first action)"))


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks = list(dict.fromkeys(c.labels["task"] for c in cases))
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    results = {}
    for task in tasks:  # each task scored by its own metric
        # "solved" counts a last point above 0.9 (above, not at: as published).
        results.update(X.case_results(out, [c for c in cases if c.labels["task"] == task],
                                      task_metric(task)[0],
                                      solved_above=np.nextafter(0.9, 1))[2])
    adapted = {"meta/lambda": "lambda", "meta/gamma": "gamma"}
    for c in cases:
        label = c.labels["learner"]
        names = (("meta/lambda",) if label in META else ("meta/gamma",) if label in META_GAMMA
                 else ("meta/gamma", "meta/lambda") if label in META_BOTH else ())
        for name in names:  # the value each update used
            steps, curve = X.curves(out / c.name, name)
            stride = max(1, len(steps) // 128)  # every update's value: thinned for the report
            steps, curve = steps[::stride], curve[..., ::stride]
            key = adapted[name]
            results[f"{c.labels['task']}|{label}"].update({
                f"{key}_steps": steps.tolist(), f"{key}_curve": curve.tolist(),
                f"{key}_final": X.final(out / c.name, name, last=1).tolist()})

    def cell(key):
        def fn(task, learner):
            entry = results.get(f"{task}|{learner}")
            return "" if entry is None else X.mean_ci_cell(np.asarray(entry[key]))
        return fn

    named = " / ".join(dict.fromkeys(task_metric(t)[1] for t in tasks))
    lines = [f"Which λ, size '{meta['size']}': {meta['seeds']} seeds per learner and task, "
             f"{meta['updates']} updates; mean ± 95% CI (Student t) over seeds of the exact "
             f"{named} (" + "; ".join(f"{t}: `{task_metric(t)[0]}`" for t in tasks) + ").", ""]
    for key, title in (("area", f"Mean {named} over training (area; higher = faster)"),
                       ("final", f"Final {named} (mean of the last 2 evaluations)"),
                       ("solved", f"Share of seeds whose final {named} > 0.9")):
        lines += [f"### {title}", ""] + X.markdown_table(learners, tasks, lambda r, c, k=key:
                                                          cell(k)(c, r)) + [""]
    figures = []
    for key, symbol in (("lambda", "λ"), ("gamma", "γ")):
        metas = [label for label in learners
                 if any(f"{key}_final" in results.get(f"{t}|{label}", {}) for t in tasks)]
        if not metas:
            continue
        lines += [f"### The meta-gradient's {symbol} at the end", ""] + X.markdown_table(
            metas, tasks, lambda r, c, k=key: X.mean_ci_cell(np.asarray(
                results[f"{c}|{r}"][f"{k}_final"]))) + [""]
        panels = {t: {label: (results[f"{t}|{label}"][f"{key}_steps"],
                              results[f"{t}|{label}"][f"{key}_curve"]) for label in metas}
                  for t in tasks}
        X.plot_curve_panels(out / f"meta_{key}.png", panels, f"{symbol} (meta-gradient)")
        figures.append(f"meta_{key}.png")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    X.plot_curve_panels(out / "curves.png", {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                        results[f"{t}|{label}"]["curve"])
                                                for label in learners if f"{t}|{label}" in results}
                                             for t in tasks}, named)
    return ["table.md", "results.json", "curves.png"] + figures


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    learners = args.learners or size["learners"]
    tasks = args.tasks or size["tasks"]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; known: {'; '.join(TASKS)}")
    cases = [case(t, label, size["updates"]) for t in tasks for label in learners
             if applies(t, label)]
    return cases, {"updates": size["updates"], "learners": list(learners), "hparams": HPARAMS}


def main(argv=None) -> int:
    return X.main("lambda_choice", HERE, Args, SIZES, plan, report, 2024, argv)


if __name__ == "__main__":
    sys.exit(main())

"""One bit for H decisions: outcome-only group baselines, belief credit and hindsight from a known
answer on CommandChain, as the horizon grows.

The task (``jaxcredit.envs.command_chain``, docs/agent_credit.md): H commands among M, a hidden
solution of n = 5 commands to issue (any order) and f = 1 fatal command, one pass/fail bit at the
end, 16 task instances in the pool, progress not observed. For the horizon study the number of
commands grows with the horizon, M = H, which keeps the uniform policy's success near 3.7 % at
every H (exact DP: 3.86 %, 3.78 %, 3.75 %, 3.6 % at H = 10, 25, 50, 100), so a longer horizon
means more decisions per bit, not an easier or harder lottery.

Every learner uses PPO's clipped loss (4 epochs × 4 minibatches), 64 environments in 8 groups of
K = 8 that share a task instance, one whole episode per environment per update, γ = 1, no
entropy bonus (as in RL post-training):

* ``PPO+GAE``: a learned critic V(instance, t), GAE(λ = 0.95), standardised advantages;
* ``PPO+GRPO`` (std-normalised, Bessel), ``PPO+Dr.GRPO`` (mean only), ``PPO+RLOO``;
* ``PPO+belief``: the Beta–Bernoulli belief over which commands help each instance;
* ``PPO+known_answer``: RLOO plus a bonus of 1 on the steps of failed episodes that agree with the
  known solution;
* ablations: ``PPO+belief every issue`` at H = 50, the belief credit on every issue of a command
  instead of the first only; ``PPO+RLOO progress observed`` and ``PPO+known_answer progress
  observed`` at H = 10, the same learners with the solution progress in the observation;
  ``PPO+GAE lambda 1`` at H = 100, GAE without bootstrapping from the critic.

Reported: training success against episodes (8 seeds, 95 % bootstrap bands), final success and
area under the curve (mean ± Student-t 95 % CI), and the credit scores the engine computes against
the exact step labels (``jaxcredit.credit.scores``): sign accuracy on necessary and fatal
steps, on the necessary steps of failed episodes, and the share of |credit| from failed episodes.

    python experiments/agent_credit/run.py --size smoke     # about two minutes
    python experiments/agent_credit/run.py --size cpu       # the committed results
    python experiments/agent_credit/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/agent_credit/results/`` (``--force`` to replace it).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.envs.command_chain import random_success_rate
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
LEARNERS = ("PPO+GAE", "PPO+GRPO", "PPO+Dr.GRPO", "PPO+RLOO", "PPO+belief", "PPO+known_answer")
# Ablations: (learner, estimator options, extra environment options, horizon, hparams). The
# belief credit on every issue of a command, not the first; progress observed at H = 10, where a
# memoryless policy without it is capped near the coupon-collector rate; GAE without
# bootstrapping (λ = 1) at H = 100 (README).
ABLATIONS = {
    "PPO+belief every issue": ("PPO+belief", (("first_use_only", False),), (), 50, {}),
    "PPO+RLOO progress observed": ("PPO+RLOO", (), (("observe_progress", True),), 10, {}),
    "PPO+known_answer progress observed": ("PPO+known_answer", (),
                                           (("observe_progress", True),), 10, {}),
    "PPO+GAE lambda 1": ("PPO+GAE", (), (), 100, {"lambda_": 1.0}),
}
NUM_ENVS, GROUP_SIZE = 64, 8
SOLUTION, FATAL, INSTANCES = 5, 1, 16
SUCCESS = "episode_return"  # the pass rate of the update's 64 training episodes
SCORES = ("credit/sign_necessary", "credit/sign_fatal", "credit/failed_sign_necessary",
          "credit/failed_share", "credit/after_fatal_share")

SIZES = {
    "smoke": dict(horizons=(10,), updates=10, seeds=2),
    "cpu": dict(horizons=(10, 25, 50, 100), updates=200, seeds=8),
}
HPARAMS = dict(lr=1e-3, gamma=1.0, lambda_=0.95, ent_coef=0.0, vf_coef=0.5, max_grad_norm=1.0)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Success, credit sign accuracy and failed-episode signal against the horizon (module
    docstring)."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    updates: Optional[int] = None
    """updates of 64 episodes per run (default: the size's)"""
    horizons: tuple[int, ...] = ()
    """horizons H (default: the size's)"""
    learners: tuple[str, ...] = LEARNERS
    """learners to run"""
    ablations: bool = True
    """also run the ablations (module docstring) at the horizons among --horizons"""


def env_options(horizon: int) -> tuple:
    return (("horizon", horizon), ("num_commands", horizon), ("solution_length", SOLUTION),
            ("num_fatal", FATAL), ("num_instances", INSTANCES))


def case(horizon: int, learner: str, updates: int) -> X.Case:
    base, options, extra_env, _, hparams = ABLATIONS.get(learner, (learner, (), (), None, {}))
    config = TrainConfig.from_flat(
        **learner_fields(base, estimator_options=options), env="CommandChain",
        env_options=env_options(horizon) + extra_env,
        num_envs=NUM_ENVS, group_size=GROUP_SIZE, num_steps=horizon,
        total_timesteps=NUM_ENVS * horizon * updates, anneal_lr=False, eval_every=0)
    slug = learner.replace("+", "_").replace(".", "").replace(" ", "_")
    return X.Case(name=f"H{horizon}/{slug}",
                  config=config, settings=({**HPARAMS, **hparams},),
                  labels={"horizon": horizon, "learner": learner})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    horizons = sorted({c.labels["horizon"] for c in cases})
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    results = {}
    for c in cases:
        steps, curve = X.curves(out / c.name, SUCCESS)
        last = max(1, curve.shape[1] // 10)
        entry = {"episodes": (steps / c.labels["horizon"]).tolist(), "success": curve.tolist(),
                 "final": np.nanmean(curve[:, -last:], axis=1).tolist(),
                 "area": np.nanmean(curve, axis=1).tolist()}
        for score in SCORES:
            _, values = X.curves(out / c.name, score)
            early = max(1, values.shape[1] // 4)
            entry[score] = {"early": np.nanmean(values[:, :early], axis=1).tolist(),
                            "all": np.nanmean(values, axis=1).tolist()}
        results[f"{c.labels['horizon']}|{c.labels['learner']}"] = entry

    def cell(field, part=None):
        def fn(learner, column):
            entry = results.get(f"{column.removeprefix('H = ')}|{learner}")
            if entry is None:
                return ""
            values = entry[field] if part is None else entry[field][part]
            return X.mean_ci_cell(np.asarray(values, np.float64), 3)
        return fn

    columns = [f"H = {h}" for h in horizons]
    chance = ", ".join(f"H = {h}: {100 * random_success_rate(h, SOLUTION, FATAL, h, False):.2f} %"
                       for h in horizons)
    lines = [f"# Agent credit on CommandChain ({meta['size']})", "",
             f"Command: `{meta['command']}`", "",
             f"Budget per run: {meta['updates']} updates × {NUM_ENVS} episodes "
             f"({meta['updates'] * NUM_ENVS:,} episodes, H·{meta['updates'] * NUM_ENVS:,} env "
             f"steps) per seed, {meta['seeds']} seeds vmapped; training "
             f"{meta['train_seconds']:.0f} s on this machine. Uniform-policy success: {chance}.",
             "", "## Final success (mean of the last 10 % of updates)", ""]
    lines += X.markdown_table(learners, columns, cell("final"), "learner")
    lines += ["", "## Area under the success curve (mean success over the run)", ""]
    lines += X.markdown_table(learners, columns, cell("area"), "learner")
    for score in SCORES:
        lines += ["", f"## `{score}` over the first quarter of the run", ""]
        lines += X.markdown_table(learners, columns, cell(score, "early"), "learner")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    panels = {f"H = {h}": {learner: (np.asarray(results[f"{h}|{learner}"]["episodes"]),
                                     np.asarray(results[f"{h}|{learner}"]["success"]))
                           for learner in learners if f"{h}|{learner}" in results}
              for h in horizons}
    X.plot_curve_panels(out / "success.png", panels, "training success",
                        title="CommandChain: training success against episodes (8 groups of 8 "
                              "per update)", cols=2, xlabel="episodes per seed")
    return ["report.md", "results.json", "success.png"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    unknown = [name for name in args.learners if name not in LEARNERS]
    if unknown:
        raise ValueError(f"unknown learner(s) {unknown}; choose from {list(LEARNERS)}")
    horizons = args.horizons or size["horizons"]
    cases = [case(h, learner, size["updates"]) for h in horizons for learner in args.learners]
    if args.ablations:
        cases += [case(spec[3], name, size["updates"]) for name, spec in ABLATIONS.items()
                  if spec[3] in horizons]
    return cases, {"updates": size["updates"], "horizons": list(horizons), "hparams": HPARAMS,
                   "group_size": GROUP_SIZE}


def main(argv=None) -> int:
    return X.main("agent_credit", HERE, Args, SIZES, plan, report, 0, argv)


if __name__ == "__main__":
    sys.exit(main())

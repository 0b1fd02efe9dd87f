"""Credit through memory: Synthetic Returns against GAE and RUDDER on Delayed Catch.

Synthetic Returns (Raposo, Ritter et al. 2021, arXiv 2102.12425; the ``synthetic_returns``
redistribute stage, docs/synthetic_returns.md) learns which earlier states predict today's
reward and pays them now. The paper's claim on Delayed Catch (its Fig. 3): as the number of
games whose catches are paid only at the end grows, the agent with synthetic returns keeps
solving the task while the baseline falls off. Here the learner is A2C on the engine with a GRU
policy (``--policy gru``), γ = 1, and the task jaxcredit's ``DelayedCatch``: k games of bsuite
Catch (9 steps each), every catch's ±1 withheld and their sum paid at the episode's last step.

    python experiments/long_term_credit/run.py --size smoke    # a 1-minute check
    python experiments/long_term_credit/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/long_term_credit/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/return"
# label -> (preset learner, fields on top). synthetic_returns at its reference settings
# (α 0.3, β 1, memory of 300 embeddings of 128: docs/synthetic_returns.md), its embedding reading
# the observation (the reference's default input) or the observation and the action taken.
LEARNERS = {"A2C+GAE": ("A2C+GAE", {}),
            "A2C+RUDDER": ("A2C+RUDDER", {}),
            "A2C+synthetic_returns": ("A2C+GAE", {"redistribute": "synthetic_returns"}),
            "A2C+synthetic_returns (obs+action)": (
                "A2C+GAE", {"redistribute": "synthetic_returns",
                            "redistribute_options": (("inputs", "observation_action"),)}),
            # The embedding reading the agent's recurrent state (the reference's
            # apply_core_to_input=True).
            "A2C+synthetic_returns (agent state)": (
                "A2C+GAE", {"redistribute": "synthetic_returns",
                            "redistribute_options": (("inputs", "agent_state"),)}),
            # CCA-PG, X_t a forward GRU over the window (docs/cca.md); Φ reads the next
            # observations and rewards (the paper's), or the next observations only.
            "A2C+CCA": ("cca gru", {}),
            "A2C+CCA (Φ without rewards)": (
                "cca gru", {"estimator_options": (("future_inputs", "observation"),)}),
            # X_t the agent's own recurrent state, the state π reads (the paper's).
            "A2C+CCA (X = agent state)": (
                "cca", {"estimator_options": (("agent_state", "agent"),)}),
            "A2C+CCA (X = agent state, Φ without rewards)": (
                "cca", {"estimator_options": (("agent_state", "agent"),
                                              ("future_inputs", "observation"))})}
SIZES = {
    "smoke": dict(timesteps=16 * 18 * 4, seeds=2, games=(2,), learners=("A2C+GAE",
                                                                         "A2C+synthetic_returns")),
    "cpu": dict(timesteps=300_000, seeds=4, games=(2, 5, 10), learners=tuple(LEARNERS)),
    # The one delay at which learners differ at this budget, with 8 seeds.
    "cpu-5games": dict(timesteps=300_000, seeds=8, games=(5,), learners=tuple(LEARNERS)),
}
HPARAMS = dict(gamma=1.0, lr=1e-3)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Delayed Catch over the number of games paid at the end (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | cpu-5games"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    learners: tuple[str, ...] = ()
    """learners (default: the size's): """ + ", ".join(LEARNERS)
    games: tuple[int, ...] = ()
    """games per episode (default: the size's)"""


def case(games: int, label: str, timesteps: int) -> X.Case:
    if label not in LEARNERS:
        raise ValueError(f"unknown learner {label!r}; known: {', '.join(LEARNERS)}")
    preset, extra = LEARNERS[label]
    num_envs, num_steps = 16, 9 * games  # whole episodes per window
    updates = timesteps // (num_envs * num_steps)
    config = TrainConfig.from_flat(**learner_fields(
        preset, env="DelayedCatch", env_options=(("games", games),), policy="gru",
        num_envs=num_envs, num_steps=num_steps, total_timesteps=timesteps,
        eval_every=max(1, updates // 20), eval_episodes=32, **extra))
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", label.replace("+", "_")).strip("_")
    return X.Case(name=f"games{games}/{slug}", config=config, settings=(dict(HPARAMS),),
                  labels={"task": f"{games} games", "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks, learners, results = X.case_results(out, cases, METRIC)
    for c in cases:  # the return per game: +1 all caught, -1 none
        entry = results[f"{c.labels['task']}|{c.labels['learner']}"]
        games = int(c.labels["task"].split()[0])
        entry["final_per_game"] = (np.asarray(entry["final"]) / games).tolist()
        entry["area_per_game"] = (np.asarray(entry["area"]) / games).tolist()

    lines = [f"Delayed Catch, size '{meta['size']}': {meta['seeds']} seeds per cell, "
             f"{meta['timesteps']:,} env steps per seed, A2C with a GRU policy, "
             f"{meta['hparams']}; mean ± 95% CI (Student t) over seeds of the sampled policy's "
             "return divided by the number of games (1: every ball caught; a ball-blind "
             "policy gets −0.6).", ""]
    for key, title in (("final_per_game", "Final return per game (last 2 evaluations)"),
                       ("area_per_game", "Mean return per game over training (area)")):
        lines += [f"### {title}", ""] + X.markdown_table(
            learners, tasks, X.result_cell(results, key, 2)) + [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    X.plot_curve_panels(out / "curves.png", {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                        results[f"{t}|{label}"]["curve"])
                                                for label in learners} for t in tasks},
                        "return (sampled)")
    return ["table.md", "results.json", "curves.png"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    learners = args.learners or size["learners"]
    games = args.games or size["games"]
    cases = [case(k, label, size["timesteps"]) for k in games for label in learners]
    return cases, {"timesteps": size["timesteps"], "learners": list(learners),
                   "games": list(games), "hparams": HPARAMS}


def main(argv=None) -> int:
    return X.main("long_term_credit", HERE, Args, SIZES, plan, report, 2021, argv)


if __name__ == "__main__":
    sys.exit(main())

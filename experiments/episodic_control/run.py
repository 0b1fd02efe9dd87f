"""Episodic rewards in continuous control: PPO with the return paid at the end, and return
decomposition (RUDDER, RRD, IRCR) against the dense-reward PPO it should approach.

The return-decomposition papers' benchmark: a control task whose whole return is paid at the
episode's last step (``DelayedReward-``: r̃_t = 0 before the end, the episode's sum at the end).
Their claim (RRD, Ren et al. 2022, Fig. 2; IRCR, Gangwani et al. 2020, Fig. 3): the policy learner
on the episodic reward fails or learns far slower, while with the redistributed reward it comes
close to the same learner on the dense reward. The papers' learner is off-policy (SAC / TD3 on
MuJoCo, 10⁶ steps); here it is PPO at jaxcredit's continuous defaults (Gaussian policy, running
normalisation; docs/continuous.md) on gymnax's ``Pendulum-v1``, 200-step episodes, so the claim
is checked for an on-policy learner on a smaller task.

    python experiments/episodic_control/run.py --size smoke   # a 1-minute check
    python experiments/episodic_control/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/episodic_control/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional


from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/return"
DENSE, EPISODIC = "Pendulum-v1", "DelayedReward-Pendulum-v1"
# label -> (task, preset learner). The dense-reward PPO is the curve the others should approach.
LEARNERS = {
    "PPO+GAE dense": (DENSE, "PPO+GAE"),
    "PPO+GAE": (EPISODIC, "PPO+GAE"),
    "PPO+RUDDER": (EPISODIC, "PPO+RUDDER"),
    "PPO+RRD": (EPISODIC, "PPO+RRD"),
    "PPO+IRCR": (EPISODIC, "PPO+IRCR"),
}
SIZES = {
    "smoke": dict(timesteps=4 * 128 * 6, seeds=2, learners=("PPO+GAE dense", "PPO+RRD")),
    "cpu": dict(timesteps=1_000_000, seeds=5, learners=tuple(LEARNERS)),
}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Dense against episodic reward on Pendulum, with and without return decomposition."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    learners: tuple[str, ...] = ()
    """learners (default: the size's): """ + ", ".join(LEARNERS)


def case(label: str, timesteps: int) -> X.Case:
    if label not in LEARNERS:
        raise ValueError(f"unknown learner {label!r}; known: {', '.join(LEARNERS)}")
    env, preset = LEARNERS[label]
    updates = timesteps // (4 * 128)
    config = TrainConfig.from_flat(**learner_fields(
        preset, env=env, total_timesteps=timesteps, eval_every=max(1, updates // 20),
        eval_episodes=16))
    slug = label.replace("+", "_").replace(" ", "_")
    return X.Case(name=slug, config=config, settings=({},),
                  labels={"task": "Pendulum", "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks, learners, results = X.case_results(out, cases, METRIC, solved_above=-400.0)
    lines = [f"Pendulum-v1, size '{meta['size']}': {meta['seeds']} seeds per learner, "
             f"{meta['timesteps']:,} env steps per seed, PPO at jaxcredit's continuous defaults; "
             "mean ± 95% CI (Student t) over seeds of the sampled policy's evaluation return on "
             "the environment's own (dense) reward. 'dense' trains on the per-step reward, the "
             "others on the return paid at the episode's end (DelayedReward-). A random policy "
             "scores about −1,200; 'solved' counts seeds whose last evaluation is above −400.", ""]
    for key, title, digits in (("final", "Final return (last 2 evaluations)", 0),
                               ("area", "Mean return over training (area)", 0),
                               ("solved", "Seeds above −400 at the end", 2)):
        lines += [f"### {title}", ""] + X.markdown_table(
            learners, tasks, X.result_cell(results, key, digits)) + [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    X.plot_curve_panels(out / "curves.png", {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                        results[f"{t}|{label}"]["curve"])
                                                for label in learners} for t in tasks},
                        "evaluation return (dense)", hline=-400.0)
    return ["table.md", "results.json", "curves.png"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    learners = args.learners or size["learners"]
    cases = [case(label, size["timesteps"]) for label in learners]
    return cases, {"timesteps": size["timesteps"], "learners": list(learners)}


def main(argv=None) -> int:
    return X.main("episodic_control", HERE, Args, SIZES, plan, report, 2022, argv)


if __name__ == "__main__":
    sys.exit(main())

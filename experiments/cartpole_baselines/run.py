"""The learners' long learning checks: PPO+GAE and DQN on CartPole-v1 at PureJaxRL's settings.

These are the two long runs that once sat in the test suite (``make test`` keeps quick learning
checks on probe tasks: tests/test_agents_learning.py, tests/test_dqn.py). Each learner is one
engine run (all seeds vmapped in one compiled program) in its own run directory; each has a
pass bar, the one the suite used:

- **PPO+GAE**, PureJaxRL's ``ppo.py`` defaults (4 envs × 128 steps, 4 epochs × 4 minibatches,
  lr 2.5e-4 annealed, 5·10⁵ env steps): a seed passes when its mean training episode return
  over the last 10 updates is ≥ 475 (CartPole's maximum is 500); the check passes when at least
  three quarters of the seeds do.
- **DQN**, PureJaxRL's ``dqn.py`` settings (10 envs, buffer 10k, batch 128, one gradient step
  per 10 env steps, target copy every 500 steps, ε from 1 to 0.05 over 2.5·10⁵ steps,
  3·10⁵ env steps): the greedy policy is evaluated on 8 episodes every 1,500 updates. DQN on
  CartPole oscillates, so the bar is the best evaluation ≥ 450 over all seeds and every seed's
  mean over its last 5 evaluations ≥ 250 (a random policy scores about 22).

    python experiments/cartpole_baselines/run.py --size smoke    # a 1-minute check (no bars)
    python experiments/cartpole_baselines/run.py --size cpu      # the committed results

The exit status is 1 when a bar is missed at the ``cpu`` size, so a scheduled job can run it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.plotting import forward_fill

HERE = pathlib.Path(__file__).resolve().parent
SIZES = {
    "smoke": dict(seeds=2, ppo_steps=4 * 128 * 20, dqn_steps=10 * 3000, bars=False),
    "cpu": dict(seeds=8, ppo_steps=500_000, dqn_steps=300_000, bars=True),
}
PPO_HPARAMS = dict(lr=2.5e-4)
DQN_HPARAMS = dict(lr=2.5e-4, gamma=0.99, epsilon_fraction=25e4 / 3e5, max_grad_norm=10.0)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """PPO+GAE and DQN on CartPole-v1 at PureJaxRL's settings (module docstring)."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: int | None = None
    """seeds per learner (default: the size's)"""


def cases(size: dict) -> list[X.Case]:
    ppo = TrainConfig.from_flat(algo="ppo", estimator="gae", env="CartPole-v1",
                                total_timesteps=size["ppo_steps"], eval_every=0)
    dqn = TrainConfig.from_flat(algo="dqn", env="CartPole-v1", num_envs=10, num_steps=1,
                                total_timesteps=size["dqn_steps"], buffer_size=10_000,
                                batch_size=128,
                                learning_starts=min(10_000, size["dqn_steps"] // 10),
                                gradient_steps=1, target_update_every=50, hidden_sizes=(120, 84),
                                activation="relu", eval_every=size["dqn_steps"] // 10 // 20,
                                eval_episodes=8)
    return [X.Case("ppo_gae", ppo, (PPO_HPARAMS,), {"learner": "PPO+GAE"}),
            X.Case("dqn", dqn, (DQN_HPARAMS,), {"learner": "DQN"})]


def ppo_final(run_dir: pathlib.Path) -> np.ndarray:
    """Per seed: the mean training episode return over the last 10 updates (an update in which
    no episode ended carries the previous value forward)."""
    _, returns = X.curves(run_dir, "episode_return")
    return np.nanmean(forward_fill(returns)[:, -10:], axis=1)


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    ppo = ppo_final(out / "ppo_gae")
    _, greedy = X.curves(out / "dqn", "eval/return_greedy")
    dqn_last = np.nanmean(greedy[:, -5:], axis=1)
    checks = {
        "PPO+GAE: ≥ 3/4 of seeds reach a mean training return ≥ 475 over the last 10 updates":
            bool(np.sum(ppo >= 475) >= 0.75 * ppo.size),
        "DQN: best greedy evaluation ≥ 450":
            bool(np.nanmax(greedy) >= 450),
        "DQN: every seed's mean over its last 5 greedy evaluations ≥ 250":
            bool(dqn_last.min() >= 250),
    }
    passed = all(checks.values()) if meta["bars"] else None
    results = {"meta": meta, "ppo_final_return": ppo.tolist(),
               "dqn_greedy_curve": greedy.tolist(), "dqn_last5_mean": dqn_last.tolist(),
               "checks": checks if meta["bars"] else {}, "passed": passed}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    lines = [f"# CartPole-v1 at PureJaxRL's settings (size '{meta['size']}', "
             f"{meta['seeds']} seeds per learner)", "",
             f"`{meta['command']}`: {meta['train_seconds']:.0f} s of training, compiles "
             "included.", "",
             "| learner | env steps per seed | score per seed | mean ± 95% CI |",
             "|---|---|---|---|",
             f"| PPO+GAE | {meta['ppo_steps']:,} | mean training return, last 10 updates: "
             f"{', '.join(f'{v:.0f}' for v in ppo)} | {X.mean_ci_cell(ppo, 1)} |",
             f"| DQN | {meta['dqn_steps']:,} | greedy return, mean of the last 5 evaluations: "
             f"{', '.join(f'{v:.0f}' for v in dqn_last)} | {X.mean_ci_cell(dqn_last, 1)} |",
             ""]
    if meta["bars"]:
        lines += ["| check | passed |", "|---|---|"]
        lines += [f"| {name} | {'yes' if ok else 'NO'} |" for name, ok in checks.items()]
    else:
        lines.append("(The smoke size is too short for the bars; they apply at the cpu size.)")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return ["table.md", "results.json"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    return cases(size), {"ppo_steps": size["ppo_steps"], "dqn_steps": size["dqn_steps"],
                         "bars": size["bars"], "ppo_hparams": PPO_HPARAMS,
                         "dqn_hparams": DQN_HPARAMS}


def passed(out: pathlib.Path) -> bool:
    """False only where the size has bars and one was missed (exit status 1)."""
    return json.loads((out / "results.json").read_text())["passed"] is not False


def main(argv=None) -> int:
    return X.main("cartpole_baselines", HERE, Args, SIZES, plan, report, 0, argv, num_chunks=2,
                  passed=passed)


if __name__ == "__main__":
    sys.exit(main())

"""Does a per-step reward model recover the undelayed reward? RRD and IRCR on a delayed task.

The task is ``DelayedReward-KeyToDoor`` (``jaxcredit.envs.key_to_door``): every step's reward (an
apple picked on its side, the treasure behind the door opened with the key picked at t = 0) is
withheld and the episode's return paid at its last step. Two parts, each over seeds:

1. **Recovery.** The reward model of ``rrd`` or ``ircr``
   (``jaxcredit.redistribute.return_decomposition``) is fitted on the delayed episodes of the
   uniform random policy (no learning agent, so the data do not collapse onto one behaviour),
   ``updates`` times ``FIT_STEPS`` Adam steps, the stage's memory and batches as in the engine.
   Then, on a fresh window of the same policy played on the *undelayed* environment, ``corr(r̃,
   r)`` is the Pearson correlation over its steps of the stage's r̃_t with the reward r_t the
   wrapper would withhold (``info["undelayed_reward"]``). The stages read (s_t, a_t[, s_{t+1}])
   only, so these windows are the delayed environment's. ``untrained``: the same for the initial
   model (chance); ``E[r | s, a]``: the same for the exact expected reward of the step (the
   ceiling: an apple pays one of two amounts at random).
2. **Learning.** PPO on the delayed task with the delayed reward (``PPO``), or with r̃ of ``rrd``
   or ``ircr`` fitted inside each update; ``exact return`` is J(π) of the final policy by dynamic
   programming on the undelayed MDP (the engine's ``eval/exact_return``), ``corr(r̃, A)`` the
   engine's ``redistribute/advantage_correlation`` at the last evaluation, ``corr(r̃, r)`` the
   recovery measure above for the final model.

    python experiments/return_decomposition/run.py --size smoke    # a few minutes on CPU
    python experiments/return_decomposition/run.py --size cpu      # the committed results

Part 2's runs are engine runs in their own run directories under the output folder (resumable;
``jaxcredit plot`` reads them); the final reward model is read back from each run's last
checkpoint. Part 1 trains no agent: it fits the reward model alone on a fixed uniform policy.
Outputs go to a new folder under ``runs/experiments/`` (or ``--out``); ``--publish`` copies the
report into ``experiments/return_decomposition/results/`` (``--force`` to replace it).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig, make_engine
from jaxcredit.checkpoint import Checkpointer
from jaxcredit.agents.rollout import reset_runner, rollout
from jaxcredit.envs import make as make_env
from jaxcredit.exact import tabular
from jaxcredit.fitting import FitSchedule, fit, init_fit_state
from jaxcredit.redistribute import make_redistributor

HERE = pathlib.Path(__file__).resolve().parent
SIZES = {
    "smoke": dict(length=8, updates=30, seeds=2),
    "cpu": dict(length=12, updates=300, seeds=8),
}
NUM_ENVS = 16
# The reward models: the RRD code's learning rate (3e-4, Adam, gradient norm clipped at 1 as the
# engine does), 16 Adam steps per update of 16 episodes (the RRD code takes one per environment
# step) and, for the CPU budget, 64 × 64 units instead of 256 × 256. Their other options are the
# stages' defaults (rrd: K = 64 steps drawn with replacement from these 8- or 12-step episodes,
# 4 episodes per batch; ircr: 512 + 512 transitions, the 10 best episodes).
MODEL_LR, FIT_STEPS, HIDDEN = 3e-4, 16, (64, 64)
STAGES = {"rrd": ("rrd", ()), "rrd corrected": ("rrd", (("bias_correction", True),)),
          "ircr": ("ircr", ())}
# The agent of part 2: the engine's PPO preset with γ = 1 (episodic) and a larger step.
HPARAMS = dict(lr=1e-3, gamma=1.0, lambda_=0.95, ent_coef=0.01, redistributor_lr=MODEL_LR)
LEARNERS = {"PPO": None, "PPO+RRD": "rrd", "PPO+IRCR": "ircr"}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Recovery of the undelayed reward by rrd and ircr, and PPO with them (module docstring)."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: Optional[int] = None
    """seeds per cell (default: the size's)"""
    updates: Optional[int] = None
    """updates per seed (default: the size's)"""


def correlation(x: jax.Array, y: jax.Array) -> jax.Array:
    x, y = x.ravel() - x.mean(), y.ravel() - y.mean()
    denom = jnp.sqrt(jnp.sum(x * x) * jnp.sum(y * y))
    return jnp.where(denom > 0, jnp.sum(x * y) / jnp.where(denom > 0, denom, 1.0), jnp.nan)


def delay(reward: jax.Array, done: jax.Array, so_far: jax.Array):
    """The DelayedReward wrapper's reward of a window ``[T, N]``: zero, and the episode's return
    at its last step; ``so_far`` ``[N]`` carries the running sums across windows."""
    def step(total, x):
        r, d = x
        total = total + r
        return jnp.where(d, 0.0, total), jnp.where(d, total, 0.0)

    so_far, delayed = jax.lax.scan(step, so_far, (reward, done))
    return delayed, so_far


def uniform_window(env, env_params, key, steps: int):
    """``steps`` steps of the uniform random policy in ``4 · NUM_ENVS`` fresh environments, with
    the tabular state of each step."""
    num_actions = env.action_space(env_params).n
    reset_key, play_key = jax.random.split(key)
    runner = reset_runner(env, env_params, reset_key, 4 * NUM_ENVS)

    def policy(memory, obs, first):
        return memory, jnp.zeros((obs.shape[0], num_actions))

    return rollout(env, env_params, policy, runner, play_key, steps, env.state_index)[1]


def recovery_part(name: str, size: dict, seed: int) -> dict:
    """Part 1 for the stage ``name`` (module docstring)."""
    stage_name, options = STAGES[name]
    length = size["length"]
    env, env_params = make_env("KeyToDoor", length=length)
    stage = make_redistributor(stage_name, {"horizon": length}, hidden=HIDDEN, **dict(options))
    schedule = FitSchedule(steps=FIT_STEPS)
    num_actions = env.action_space(env_params).n
    mdp = env.tabular_mdp(env_params)

    def policy(memory, obs, first):
        return memory, jnp.zeros((obs.shape[0], num_actions))

    def run(key):
        init_key, reset_key, loop_key, test_key = jax.random.split(key, 4)
        runner = reset_runner(env, env_params, reset_key, NUM_ENVS)
        example = rollout(env, env_params, policy, runner, init_key, length)[1]
        initial = stage.init(init_key, example)

        def update(carry, k):
            fitted, memory, runner, so_far = carry
            play_key, fit_key, apply_key = jax.random.split(k, 3)
            runner, window, _ = rollout(env, env_params, policy, runner, play_key, length)
            delayed, so_far = delay(window.reward, window.done, so_far)
            window = window.replace(reward=delayed)
            fitted, metrics = fit(stage.loss, fitted, window, None, jnp.float32(MODEL_LR),
                                  jnp.float32(1.0), fit_key, schedule,
                                  lambda k: stage.sample(memory, k))
            _, memory, _ = stage.redistribute(fitted.params, window, apply_key, memory)
            return (fitted, memory, runner, so_far), metrics["loss"]

        start = (init_fit_state(initial, example, schedule), stage.init_memory(example), runner,
                 jnp.zeros((NUM_ENVS,)))
        (fitted, _, _, _), losses = jax.lax.scan(
            update, start, jax.random.split(loop_key, size["updates"]))
        test = uniform_window(env, env_params, test_key, 4 * length)

        def corr_of(params):  # r̃ reads the step only: a fresh memory sized for the window
            new = stage.redistribute(params, test, test_key, stage.init_memory(test))[0]
            return correlation(new.reward, test.reward)

        expected = mdp.reward[test.state, test.action]
        return (corr_of(fitted.params), corr_of(initial), correlation(expected, test.reward),
                losses)

    keys = jax.random.split(jax.random.key(seed), size["seeds"])
    start = time.time()
    fitted, untrained, ceiling, losses = jax.jit(jax.vmap(run))(keys)
    return {"reward_correlation": np.asarray(fitted).tolist(),
            "untrained_correlation": np.asarray(untrained).tolist(),
            "expected_correlation": np.asarray(ceiling).tolist(),
            "loss_first": np.asarray(losses[:, 1]).tolist(),
            "loss_last": np.asarray(losses[:, -1]).tolist(), "seconds": time.time() - start}


def config(learner: str, length: int, updates: int) -> TrainConfig:
    stage = LEARNERS[learner]
    return TrainConfig.from_flat(
        algo="ppo", env="DelayedReward-KeyToDoor", env_options=(("length", length),),
        num_envs=NUM_ENVS, num_steps=length, total_timesteps=NUM_ENVS * length * updates,
        eval_every=max(updates // 10, 1), redistribute=stage,
        redistribute_options=(("hidden", HIDDEN),) if stage else (),
        redistribute_fit_steps=FIT_STEPS if stage else 4)


def learning_case(learner: str, size: dict) -> X.Case:
    """Part 2's run of ``learner``: one engine run of all seeds in its own run directory."""
    slug = learner.replace("+", "_")
    return X.Case(name=f"learning/{slug}",
                  config=config(learner, size["length"], size["updates"]),
                  settings=(dict(HPARAMS),), labels={"learner": learner})


def learning_part(case: X.Case, out: pathlib.Path, size: dict, seed: int) -> dict:
    """Part 2's numbers for a finished run (module docstring): the exact return and the
    advantage correlation from its metrics, the recovery of the final reward model from its
    last checkpoint."""
    run_dir = out / case.name
    _, exact = X.curves(run_dir, "eval/exact_return")
    entry = {"exact_return": exact[:, -1].tolist(), "curve": exact.mean(0).tolist()}
    engine = make_engine(case.config)
    stage = engine.redistributor
    if stage is not None:
        entry["advantage_correlation"] = X.final(
            run_dir, "redistribute/advantage_correlation").tolist()
        template = jax.vmap(engine.init)(jax.random.split(jax.random.key(0), size["seeds"]))
        checkpoints = Checkpointer(run_dir / "checkpoints")
        states, _ = checkpoints.restore(template)
        checkpoints.close()
        inner = engine.env.undelayed

        def recovered(params, key):
            test = uniform_window(inner, engine.env_params, key, 4 * size["length"])
            new = stage.redistribute(params, test, key, stage.init_memory(test))[0]
            return correlation(new.reward, test.reward)

        entry["reward_correlation"] = np.asarray(jax.jit(jax.vmap(recovered))(
            states.credit.redistributor.params, jax.random.split(jax.random.key(seed + 1),
                                                          size["seeds"]))).tolist()
    return entry


def reference_returns(length: int) -> tuple[float, float]:
    """J of the optimal and of the uniform policy on the undelayed task."""
    env, env_params = make_env("KeyToDoor", length=length)
    mdp = env.tabular_mdp(env_params)
    best = mdp.initial @ tabular.finite_horizon_optimal_values(mdp, length)
    uniform = mdp.initial @ tabular.finite_horizon_values(mdp, tabular.uniform_policy(mdp),
                                                          length)
    return float(best), float(uniform)


def recovery_of_every_stage(out: pathlib.Path, args: Args, size: dict) -> None:
    """Part 1 (no agent is trained, so no engine run): every stage's recovery, kept in
    ``out/recovery.json`` (a rerun with the same folder reuses it)."""
    path = out / "recovery.json"
    if not path.exists():
        seed = 0 if args.seed is None else args.seed
        path.write_text(json.dumps({name: recovery_part(name, size, seed) for name in STAGES},
                                   indent=1))


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    recovery = json.loads((out / "recovery.json").read_text())
    learning = {case.labels["learner"]: dict(learning_part(case, out, meta, meta["seed"]),
                                             seconds=meta["seconds"][case.name])
                for case in cases}

    def cell(entry, name):
        return X.mean_ci_cell(np.asarray(entry[name])) if name in entry else "—"

    lines = [f"DelayedReward-KeyToDoor (length {meta['length']}), size '{meta['size']}', "
             f"{meta['seeds']} seeds per cell, {meta['updates']} updates of {NUM_ENVS} episodes; "
             f"reward models of {HIDDEN} units, {FIT_STEPS} Adam steps per update at {MODEL_LR}, "
             "their other options the defaults. Mean ± 95% CI (Student t) over seeds.", "",
             "### 1. Recovery: fitted on the uniform policy's delayed episodes", "",
             "| stage | corr(r̃, r) | untrained | E[r given s, a] | loss, update 2 → last |",
             "|---|---|---|---|---|"]
    for name, entry in recovery.items():
        lines.append(f"| {name} | {cell(entry, 'reward_correlation')} | "
                     f"{cell(entry, 'untrained_correlation')} | "
                     f"{cell(entry, 'expected_correlation')} | "
                     f"{np.mean(entry['loss_first']):.4f} → {np.mean(entry['loss_last']):.4f} |")
    lines += ["", f"### 2. Learning: PPO, {meta['hparams']}", "",
              f"Exact return of the optimal policy {meta['optimal_return']:.3f}, of the uniform "
              f"policy {meta['uniform_return']:.3f}. corr(r̃, r): the final model on the "
              "uniform policy's steps, as in part 1.", "",
              "| learner | exact return | corr(r̃, r) | corr(r̃, A) |", "|---|---|---|---|"]
    for name, entry in learning.items():
        lines.append(f"| {name} | {cell(entry, 'exact_return')} | "
                     f"{cell(entry, 'reward_correlation')} | "
                     f"{cell(entry, 'advantage_correlation')} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "recovery": recovery, "learning": learning}, indent=1))
    print("\n".join(lines))
    return ["table.md", "results.json"]


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    best, uniform = reference_returns(size["length"])
    return [learning_case(name, size) for name in LEARNERS], dict(
        size, hparams=HPARAMS, optimal_return=best, uniform_return=uniform)


def main(argv=None) -> int:
    return X.main("return_decomposition", HERE, Args, SIZES, plan, report, 0, argv,
                  prepare=recovery_of_every_stage)


if __name__ == "__main__":
    sys.exit(main())

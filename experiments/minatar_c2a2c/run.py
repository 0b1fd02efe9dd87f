"""Experiment 3 of the HCA issue: C2A2C against A2C on MinAtar, with and without delayed rewards.

The seed paper (Alipov et al., arXiv 2106.04499) reports that C2A2C outperforms A2C on Atari
games. Its text, game list and numbers were not available (docs/hca.md), so this experiment is our
stand-in: the five MinAtar games of gymnax (Breakout, Asterix, Freeway, SpaceInvaders, Seaquest;
Young & Tian 2019) and their ``DelayedReward-`` variants, where the whole episode return is paid
at the last step (the RUDDER / Hindsight-DICE protocol), which is where credit assignment should
matter most.

Learners, all with the engine's A2C (``algo="a2c"``, one Adam step per rollout):

* ``A2C``: GAE(γ, λ) advantage.
* ``C2A2C``: the same advantage times the hard gate 1[|1 − c_t| ≥ δ], δ = 0.1
  (``estimator="c2a2c"``, docs/hca.md design choices 1–4).
* ``C2A2C-soft``: the soft gate min(1, |1 − c_t|/δ).

Settings follow openai/baselines' Atari A2C where they carry over (hca_family.md §1.2 item 5):
16 environments, n = 5 steps per rollout, lr 7e-4, γ = 0.99, entropy 0.01, value weight 0.5,
gradient-norm clip 0.5; our engine uses Adam (baselines uses RMSProp) and GAE λ = 0.95 (baselines
uses n-step returns, i.e. λ = 1 within the window). The network is the engine's two-tower MLP on
the flattened 10×10×C observation. For each (game, learner) one compiled program trains all seeds
(``jax.vmap`` of the engine over keys) and then evaluates each seed's final policy.

Metric: the *final return* of a seed is the mean undiscounted return of ``eval_envs`` full
evaluation episodes of its final stochastic policy (run inside the same program). The delayed
variant pays the same total, so returns are comparable across the two columns. Training curves
(return of the episodes that ended in each of 50 blocks of updates) are plotted as well.
The table reports mean ± 95% CI over seeds (Student t).

Sizes (``--size``):

* ``cpu`` (default): 80k env steps per seed (0.8% of the 10M budget), MLP (64, 64), 8 seeds,
  8 evaluation episodes per seed, games Breakout, Asterix and SpaceInvaders. Left out by default:
  Seaquest (gymnax's Seaquest steps ~20× slower than the other games on XLA:CPU, ~2k env steps/s
  for 8 seeds × 16 envs) and Freeway (~9k env steps/s, and its episodes last 2 500 steps, so 80k
  steps are 2 episodes per environment). Both run with ``--games Freeway,Seaquest``.
* ``gpu``: the accelerator configuration, 10M env steps per seed (baselines' A2C budget in agent
  steps), MLP (256, 256), 8 seeds, 32 evaluation episodes, all five games.
* ``smoke``: a few thousand steps, to check that the script runs.

Usage: ``python experiments/minatar_c2a2c/run.py [--size cpu|gpu|smoke] [--seeds 8]
[--games Breakout,Asterix] [--learners A2C,C2A2C] [--variants plain,delayed]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# See experiments/hca_tasks/run.py: the default XLA:CPU scheduler deadlocked vmapped programs on a
# 2-core machine. Set before jax is imported; an XLA_FLAGS already in the environment wins.
if "--keep-xla-defaults" not in sys.argv:
    from jaxcredit.xla_flags import configure_cpu_flags

    configure_cpu_flags()

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.envs import make as make_env
from jaxcredit.networks import ActorCritic

HERE = os.path.dirname(os.path.abspath(__file__))

GAMES = ("Breakout", "Asterix", "Freeway", "SpaceInvaders", "Seaquest")
VARIANTS = {"plain": "", "delayed": "DelayedReward-"}
LEARNERS = {
    "A2C": ("gae", ()),
    "C2A2C": ("c2a2c", (("gate", "hard"), ("threshold", 0.1))),
    "C2A2C-soft": ("c2a2c", (("gate", "soft"), ("threshold", 0.1))),
}
# size -> settings. steps = env steps per seed.
SIZES = {
    "smoke": dict(steps=4_000, hidden=(64, 64), eval_envs=2, games=("Breakout",),
                  learners=("A2C", "C2A2C")),
    "cpu": dict(steps=80_000, hidden=(64, 64), eval_envs=8,
                games=("Breakout", "Asterix", "SpaceInvaders"),
                learners=("A2C", "C2A2C")),
    "gpu": dict(steps=10_000_000, hidden=(256, 256), eval_envs=32, games=GAMES,
                learners=("A2C", "C2A2C", "C2A2C-soft")),
}
NUM_ENVS, NUM_STEPS = 16, 5  # baselines' A2C
CURVE_POINTS = 50
HPARAMS = dict(lr=7e-4, gamma=0.99, lambda_=0.95, ent_coef=0.01, vf_coef=0.5,
               max_grad_norm=0.5, est_coef=1.0)


def env_name(game: str, variant: str) -> str:
    return f"{VARIANTS[variant]}{game}-MinAtar"


def evaluate_policy(env, env_params, network, agent_params, key, num_envs: int, horizon: int):
    """Mean undiscounted return of the first episode of ``num_envs`` environments under π.

    Steps every environment ``horizon`` times (the game's time limit, so every first episode has
    ended) and sums rewards until each one's first episode ends. Returns (mean return, fraction of
    episodes still running at the end, which must be 0).
    """
    reset_key, key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, num_envs), env_params)
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(carry, step_key):
        obs, state, total, alive = carry
        act_key, env_key = jax.random.split(step_key)
        logits = network.apply(agent_params, obs, method=ActorCritic.policy)
        action = jax.random.categorical(act_key, logits)
        obs, state, reward, terminated, truncated, _ = step_env(
            jax.random.split(env_key, num_envs), state, action, env_params)
        total = total + jnp.where(alive, reward.astype(jnp.float32), 0.0)
        alive = alive & ~(terminated | truncated)
        return (obs, state, total, alive), None

    init = (obs, state, jnp.zeros((num_envs,), jnp.float32), jnp.ones((num_envs,), bool))
    (_, _, total, alive), _ = jax.lax.scan(step, init, jax.random.split(key, horizon))
    return total.mean(), alive.mean()


def block_means(returns: jax.Array, counts: jax.Array, points: int) -> jax.Array:
    """Episode-weighted mean return per block of updates (NaN where no episode ended)."""
    usable = (returns.shape[0] // points) * points
    r = jnp.nan_to_num(returns[:usable]).reshape(points, -1)
    n = counts[:usable].astype(jnp.float32).reshape(points, -1)
    total = n.sum(-1)
    return jnp.where(total > 0, (r * n).sum(-1) / jnp.maximum(total, 1.0), jnp.nan)


def build_program(game: str, variant: str, label: str, steps: int, hidden, eval_envs: int):
    """jit(vmap over seeds): key -> final evaluation return, training curve."""
    name = env_name(game, variant)
    estimator, options = LEARNERS[label]
    env, env_params = make_env(name)
    config = TrainConfig(algo="a2c", estimator=estimator, estimator_options=options, env=name,
                         num_envs=NUM_ENVS, num_steps=NUM_STEPS, total_timesteps=steps,
                         hidden_sizes=tuple(hidden), anneal_lr=False)
    engine = make_engine(config, env, env_params)
    hparams = Hparams.create(**HPARAMS)
    horizon = int(env_params.max_steps_in_episode) + 1
    points = min(CURVE_POINTS, engine.config.num_updates)

    def one(key):
        train_key, eval_key = jax.random.split(key)
        state, metrics = engine.train(train_key, hparams)
        final, unfinished = evaluate_policy(env, env_params, engine.network,
                                            state.params["agent"], eval_key, eval_envs, horizon)
        curve = block_means(metrics["episode_return"], metrics["episodes"], points)
        gate = metrics.get("credit/gate_open", jnp.full_like(metrics["episodes"], jnp.nan,
                                                             dtype=jnp.float32))
        return {"final_return": final, "unfinished": unfinished, "curve": curve,
                "gate_last": jnp.nanmean(gate[-max(1, gate.shape[0] // 10):])}

    return jax.jit(jax.vmap(one)), engine.config.num_updates * NUM_ENVS * NUM_STEPS


def mean_ci(x: np.ndarray, axis: int = 0):
    """Mean and 95% Student-t half-width over ``axis`` (NaN-aware)."""
    n = np.sum(np.isfinite(x), axis=axis)
    t = stats.t.ppf(0.975, np.maximum(n - 1, 1))
    return np.nanmean(x, axis=axis), t * np.nanstd(x, axis=axis, ddof=1) / np.sqrt(n)


def run(size: str, steps: int, seeds: int, games, variants, learners, log=print) -> dict:
    cfg = SIZES[size]
    keys = jax.random.split(jax.random.key(2106), seeds)
    results = {}
    for game in games:
        for variant in variants:
            for label in learners:
                start = time.time()
                program, steps_done = build_program(game, variant, label, steps, cfg["hidden"],
                                                    cfg["eval_envs"])
                out = jax.device_get(jax.block_until_ready(program(keys)))
                seconds = time.time() - start
                final = np.asarray(out["final_return"], np.float64)
                mean, half = mean_ci(final)
                curve = np.asarray(out["curve"], np.float64)
                curve_mean, curve_ci = mean_ci(curve)
                gate = np.asarray(out["gate_last"], np.float64)
                results.setdefault(game, {}).setdefault(variant, {})[label] = {
                    "final_mean": float(mean), "final_ci": float(half),
                    "final_per_seed": final.tolist(),
                    "unfinished_eval_fraction": float(np.max(out["unfinished"])),
                    "curve_mean": curve_mean.tolist(), "curve_ci": curve_ci.tolist(),
                    "gate_mean_last10pct": (float(np.nanmean(gate)) if np.isfinite(gate).any()
                                            else None),
                    "env_steps_per_seed": int(steps_done), "seconds": seconds,
                }
                log(f"{env_name(game, variant):<32} {label:<10} {seconds:6.1f}s  final return "
                    f"{mean:.2f} ± {half:.2f}")
    return results


def write_outputs(results: dict, out_dir: str, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    games = list(results)
    variants = list(results[games[0]])
    learners = list(results[games[0]][variants[0]])
    header = [f"{v} {l}" for v in variants for l in learners]
    lines = [f"MinAtar, size '{meta['size']}': {meta['seeds']} seeds, "
             f"{meta['env_steps_per_seed']:,} env steps per seed (the seed paper's A2C budget is "
             f"10M agent steps per game); final return = mean of {meta['eval_envs']} evaluation "
             "episodes of the final stochastic policy per seed; mean ± 95% CI (Student t) over "
             "seeds. 'delayed' = DelayedReward- variant (whole return paid at the episode's "
             "last step).", "",
             "| game | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for game in games:
        cells = [f"{results[game][v][l]['final_mean']:.2f} ± {results[game][v][l]['final_ci']:.2f}"
                 for v in variants for l in learners]
        lines.append(f"| {game} | " + " | ".join(cells) + " |")
    gates = [(g, v, l, results[g][v][l]["gate_mean_last10pct"]) for g in games for v in variants
             for l in learners if results[g][v][l]["gate_mean_last10pct"] is not None]
    if gates:
        lines += ["", "Mean C2A2C gate m_t over the last 10% of updates (1 = A2C's update kept "
                  "everywhere):", "", "| game | variant | learner | gate |", "|---|---|---|---|"]
        lines += [f"| {g} | {v} | {l} | {x:.3f} |" for g, v, l, x in gates]
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    fig, axes = plt.subplots(len(variants), len(games), figsize=(3.4 * len(games),
                                                                 2.8 * len(variants)),
                             squeeze=False)
    for i, variant in enumerate(variants):
        for j, game in enumerate(games):
            ax = axes[i][j]
            for label in learners:
                entry = results[game][variant][label]
                m, c = np.asarray(entry["curve_mean"]), np.asarray(entry["curve_ci"])
                x = np.linspace(0, entry["env_steps_per_seed"], m.shape[0] + 1)[1:]
                ax.plot(x, m, label=label)
                ax.fill_between(x, m - c, m + c, alpha=0.2)
            ax.set_title(f"{game} ({variant})", fontsize=9)
            ax.set_xlabel("env steps per seed", fontsize=8)
    axes[0][0].set_ylabel("training episode return")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "curves.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(1.6 * len(games) * len(variants) + 2, 3.4))
    width = 0.8 / len(learners)
    labels = [f"{g}\n{v}" for g in games for v in variants]
    for k, label in enumerate(learners):
        m = [results[g][v][label]["final_mean"] for g in games for v in variants]
        c = [results[g][v][label]["final_ci"] for g in games for v in variants]
        ax.bar(np.arange(len(labels)) + (k - (len(learners) - 1) / 2) * width, m, width,
               yerr=c, capsize=3, label=label)
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("final return (evaluation)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "final_returns.png"), dpi=100)
    plt.close(fig)


def _parse_list(value: str, known, what: str) -> list:
    items = [x for x in value.split(",") if x]
    unknown = sorted(set(items) - set(known))
    if unknown or not items:
        raise ValueError(f"unknown {what} {unknown or value!r}; choose from {list(known)}")
    return items


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="cpu")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=None,
                   help="env steps per seed (default: the size's)")
    p.add_argument("--games", default=None, help=f"comma list from {list(GAMES)}")
    p.add_argument("--variants", default="plain,delayed")
    p.add_argument("--learners", default=None, help=f"comma list from {list(LEARNERS)}")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--keep-xla-defaults", action="store_true",
                   help="do not set the XLA:CPU flags of the note at the imports")
    args = p.parse_args(argv)
    cfg = SIZES[args.size]
    try:
        games = _parse_list(args.games, GAMES, "games") if args.games else list(cfg["games"])
        variants = _parse_list(args.variants, VARIANTS, "variants")
        learners = (_parse_list(args.learners, LEARNERS, "learners") if args.learners
                    else list(cfg["learners"]))
        steps = cfg["steps"] if args.steps is None else args.steps
        if args.seeds < 2:
            raise ValueError(f"--seeds must be >= 2 for a confidence interval, got {args.seeds}")
        if steps < NUM_ENVS * NUM_STEPS * CURVE_POINTS:
            raise ValueError(f"--steps must be >= {NUM_ENVS * NUM_STEPS * CURVE_POINTS}")
    except ValueError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    start = time.time()
    results = run(args.size, steps, args.seeds, games, variants, learners)
    first = results[games[0]][variants[0]][learners[0]]
    meta = {"size": args.size, "seeds": args.seeds, "env_steps_per_seed":
            first["env_steps_per_seed"], "num_envs": NUM_ENVS, "num_steps": NUM_STEPS,
            "hidden": list(cfg["hidden"]), "eval_envs": cfg["eval_envs"], "hparams": HPARAMS,
            "learners": {k: [v[0], dict(v[1])] for k, v in LEARNERS.items() if k in learners},
            "wall_seconds": time.time() - start, "backend": jax.default_backend(),
            "command": " ".join(["python", "experiments/minatar_c2a2c/run.py"]
                                + (sys.argv[1:] if argv is None else list(argv)))}
    write_outputs(results, args.out, meta)
    print(f"wrote {args.out} in {time.time() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

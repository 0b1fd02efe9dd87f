"""Experiment 2 of the HCA issue: treasure-collection rate against the length L of KeyToDoor.

Task: COCOA's linear key-to-door (Meulemans et al. 2023, ``treasure_conveyor``;
jaxcredit.envs.KeyToDoor), L ∈ {23, 43, 63, 83, 103}. The key must be picked at t = 0 and the door
opened at t = L − 2; in between, L − 3 cells of stochastic apple rewards act as distractors. A
uniformly random policy collects the treasure with probability exactly 1/16.

Learners (as experiment 1): REINFORCE (Monte-Carlo return, no critic), A2C+GAE, and A2C with the
credit of hca_return, hca_state (sampled future pairs, the window is a whole episode of up to 103
steps) and c2a2c (jaxcredit.estimators.hca). For each (L, learner) one compiled program trains all
seeds (``jax.vmap`` of the engine over keys).

Each update collects exactly one whole episode per environment: ``num_steps = L`` and every episode
lasts exactly L steps, so the windows are aligned with the episodes (no bootstrapping at window
ends). ``num_envs = 8`` is COCOA's batch of 8 episodes per update.

Metric: the treasure rate of the *policy itself*, computed exactly rather than estimated from the
training returns (where the treasure is mixed with the apples). The policy network is applied to
the observation of every tabular state (``env.tabular_mdp().observation``); the treasure is
collected iff the key is picked at the start state and the door opened at the door cell with the
key, so

    P(treasure) = π(PICK_KEY | s_0) · π(OPEN_DOOR | s_{L−2, key}).

The same number is also computed by policy evaluation on the tabular MDP with the treasure as the
only reward (V(s_0)), and the two are checked against each other; the exact expected return
V^π(s_0) is reported alongside. The evaluation runs inside the compiled program every
``updates / points`` updates (a learning curve of exact rates). As a sampled cross-check of the
final rates, 512 episodes per seed are drawn from the final policy with
``tabular.sample_episodes`` (COCOA's eval batch size).

Long runs can be split over processes (by length or learner) and merged with ``combine.py``.

Reported: final exact rate, mean ± 95% CI over seeds (Student t), and the mean over the run (area
under the learning curve). Outputs go to ``experiments/key_to_door/results/``.

Usage: ``python experiments/key_to_door/run.py [--size small|paper|smoke] [--seeds 16]``
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
from jaxcredit.envs import tabular
from jaxcredit.envs.key_to_door import OPEN_DOOR, PAPER_LENGTHS, PICK_KEY
from jaxcredit.networks import ActorCritic

HERE = os.path.dirname(os.path.abspath(__file__))

# Learner label -> (algo, estimator, options). hca_state samples K = 16 future steps per step: the
# all-pairs double sum over a 103-step window costs ~8x A2C (docs/hca.md, "Cost and memory").
LEARNERS = {
    "REINFORCE": ("reinforce", "mc", ()),
    "A2C+GAE": ("a2c", "gae", ()),
    "hca_return": ("a2c", "hca_return", ()),
    "hca_state": ("a2c", "hca_state", (("pairs", "sampled"), ("num_pairs", 16))),
    "c2a2c": ("a2c", "c2a2c", ()),
}

NUM_ENVS = 8  # COCOA's batch of 8 episodes per update
# size -> (updates per run, learning-curve points). Episodes per seed = 8 × updates.
SIZES = {
    "smoke": (8, 2),
    "small": (128, 8),
    # COCOA's config: num_episodes = 10 000 with batch 8; 10 000 updates of 8 episodes is the
    # larger reading of it (80 000 episodes), which is what this size runs.
    "paper": (10_000, 50),
}
EVAL_EPISODES = 512  # COCOA's eval batch

# γ = 1: the task is episodic with a fixed horizon and COCOA does not discount. Entropy weight is
# COCOA's length-dependent one (0.03 at L = 23 down to 0.01 at L = 103). The learning rate is
# larger than COCOA's (3e-4 / 1e-3) because the CPU run has far fewer updates.
BASE_HPARAMS = dict(lr=3e-3, gamma=1.0, lambda_=0.95, vf_coef=0.5, max_grad_norm=1.0,
                    est_coef=1.0)


def entropy_coef(length: int) -> float:
    """COCOA's entropy weight 0.03·(20/(L−3))^0.6826: 0.03 at L = 23, ≈0.01 at L = 103."""
    return 0.03 * (20.0 / (length - 3)) ** 0.68260619448


def hparams_for(length: int) -> dict:
    return {**BASE_HPARAMS, "ent_coef": entropy_coef(length)}


def exact_policy_eval(network, agent_params, mdp, treasure_mdp, door_key_state: int):
    """Exact treasure probability (product form and DP form) and expected return of π_θ.

    Returns:
      (rate_product, rate_dp, expected_return), scalars.
    """
    logits = network.apply(agent_params, mdp.observation, method=ActorCritic.policy)
    pi = jax.nn.softmax(logits, axis=-1)
    rate_product = pi[0, PICK_KEY] * pi[door_key_state, OPEN_DOOR]
    rate_dp = tabular.state_values(treasure_mdp, pi, 1.0)[0]
    expected_return = tabular.state_values(mdp, pi, 1.0)[0]
    return rate_product, rate_dp, expected_return


def sampled_treasure_rate(network, agent_params, mdp, treasure_mdp, key, length: int):
    """Fraction of ``EVAL_EPISODES`` sampled episodes of the final policy that get the treasure."""
    logits = network.apply(agent_params, mdp.observation, method=ActorCritic.policy)
    pi = jax.nn.softmax(logits, axis=-1)
    batch = tabular.sample_episodes(treasure_mdp, pi, key, EVAL_EPISODES, length)
    # The treasure reward is deterministic, so any positive reward in this MDP is the treasure.
    return jnp.mean(jnp.sum(batch.reward, axis=0) > 0.0)


def build_program(length: int, label: str, updates: int, points: int):
    """jit(vmap over seeds): key -> exact rates [points + 1], returns, train returns, sampled
    rate."""
    algo, est, opts = LEARNERS[label]
    env, env_params = make_env("KeyToDoor", length=length)
    config = TrainConfig(algo=algo, estimator=est, estimator_options=opts, env="KeyToDoor",
                         env_options=(("length", length),), num_envs=NUM_ENVS, num_steps=length,
                         total_timesteps=NUM_ENVS * length * updates, hidden_sizes=(64, 64),
                         anneal_lr=False)
    engine = make_engine(config, env, env_params)
    hparams = Hparams.create(**hparams_for(length))
    mdp = env.tabular_mdp(env_params)
    _, apple, treasure = env._tabular_structure()
    treasure_mdp = mdp.replace(reward=jnp.asarray(treasure, jnp.float32),
                               reward_std=jnp.zeros_like(mdp.reward_std),
                               transition_reward=jnp.asarray(treasure, jnp.float32)[..., None]
                               * mdp.transition,
                               transition_reward_std=jnp.zeros_like(mdp.transition_reward_std))
    door_key_state = 2 * (length - 2) + 1  # tabular index of (position L−2, has_key)
    chunk = updates // points

    def evaluate(state):
        return exact_policy_eval(engine.network, state.params["agent"], mdp, treasure_mdp,
                                 door_key_state)

    def one(key):
        train_key, eval_key = jax.random.split(key)
        state = engine.init(train_key)
        first = evaluate(state)

        def segment(state, _):
            state, metrics = engine.run(state, hparams, chunk)
            return state, (evaluate(state), metrics["episode_return"])

        state, (evals, train_returns) = jax.lax.scan(segment, state, None, points)
        evals = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, evals)
        sampled = sampled_treasure_rate(engine.network, state.params["agent"], mdp, treasure_mdp,
                                        eval_key, length)
        return {"rate": evals[0], "rate_dp": evals[1], "expected_return": evals[2],
                "train_return": train_returns.reshape(-1), "sampled_rate": sampled}

    return jax.jit(jax.vmap(one))


def mean_ci(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 95% Student-t half-width over ``axis``."""
    n = x.shape[axis]
    half = stats.t.ppf(0.975, n - 1) * np.std(x, axis=axis, ddof=1) / np.sqrt(n)
    return np.mean(x, axis=axis), half


def run(updates: int, points: int, seeds: int, lengths, learners, log=print) -> dict:
    keys = jax.random.split(jax.random.key(2023), seeds)
    results = {}
    for length in lengths:
        for label in learners:
            start = time.time()
            out = jax.device_get(jax.block_until_ready(
                build_program(length, label, updates, points)(keys)))
            seconds = time.time() - start
            rate = np.asarray(out["rate"], np.float64)  # [S, points + 1]
            gap = float(np.max(np.abs(rate - np.asarray(out["rate_dp"], np.float64))))
            if gap > 1e-4:
                raise RuntimeError(f"product and DP treasure rates disagree by {gap:.2e}")
            final_mean, final_ci = mean_ci(rate[:, -1])
            auc_mean, auc_ci = mean_ci(rate.mean(-1))
            sampled_mean, sampled_ci = mean_ci(np.asarray(out["sampled_rate"], np.float64))
            ret = np.asarray(out["expected_return"], np.float64)
            ret_mean, ret_ci = mean_ci(ret[:, -1])
            curve_mean, curve_ci = mean_ci(rate)
            results.setdefault(str(length), {})[label] = {
                "final_rate_mean": float(final_mean), "final_rate_ci": float(final_ci),
                "auc_rate_mean": float(auc_mean), "auc_rate_ci": float(auc_ci),
                "sampled_rate_mean": float(sampled_mean), "sampled_rate_ci": float(sampled_ci),
                "final_return_mean": float(ret_mean), "final_return_ci": float(ret_ci),
                "final_rate_per_seed": rate[:, -1].tolist(),
                "curve_mean": curve_mean.tolist(), "curve_ci": curve_ci.tolist(),
                "curve_updates": [i * (updates // points) for i in range(points + 1)],
                "product_vs_dp_max_gap": gap,
                "episodes_per_seed": NUM_ENVS * updates,
                "env_steps_per_seed": NUM_ENVS * updates * length,
                "seconds": seconds,
            }
            log(f"L={length:<4} {label:<11} {seconds:6.1f}s  treasure rate final "
                f"{final_mean:.3f} ± {final_ci:.3f} (sampled {sampled_mean:.3f}), "
                f"area {auc_mean:.3f}, return {ret_mean:.2f}")
    return results


def write_outputs(results: dict, out_dir: str, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    lengths = list(results)
    learners = list(results[lengths[0]])
    lines = [f"KeyToDoor, size '{meta['size']}': {meta['seeds']} seeds per cell, "
             f"{meta['updates']} updates × {NUM_ENVS} episodes per seed; mean ± 95% CI "
             "(Student t) over seeds. Chance = 1/16 = 0.0625. Rates are exact for the policy "
             "network (tabular evaluation), not estimated from training returns.", ""]
    tables = (("final_rate", "Final treasure-collection rate (exact)"),
              ("auc_rate", "Mean treasure rate over training (area under the exact curve)"),
              ("sampled_rate", f"Final treasure rate, {EVAL_EPISODES} sampled episodes per seed"),
              ("final_return", "Final expected return V^π(s_0) (exact)"))
    for key, title in tables:
        lines += [f"# {title}", "", "| L | " + " | ".join(learners) + " |",
                  "|---" * (len(learners) + 1) + "|"]
        for length in lengths:
            row = results[length]
            lines.append(f"| {length} | " + " | ".join(
                f"{row[l][key + '_mean']:.3f} ± {row[l][key + '_ci']:.3f}" for l in learners)
                + " |")
        lines.append("")
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    xs = [int(length) for length in lengths]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, label in enumerate(learners):
        for ax, key in zip(axes, ("final_rate", "auc_rate")):
            m = np.array([results[length][label][key + "_mean"] for length in lengths])
            c = np.array([results[length][label][key + "_ci"] for length in lengths])
            ax.errorbar(np.array(xs) + (i - 2) * 0.8, m, yerr=c, marker="o", capsize=3,
                        label=label)
    for ax, title in zip(axes, ("final policy", "mean over training")):
        ax.axhline(1 / 16, color="grey", ls="--", lw=1, label="chance 1/16")
        ax.set_xticks(xs)
        ax.set_xlabel("track length L")
        ax.set_ylabel("treasure-collection rate (exact)")
        ax.set_title(f"KeyToDoor, {title}", fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "treasure_rate_vs_length.png"), dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(lengths), figsize=(3.6 * len(lengths), 3.2), squeeze=False)
    for ax, length in zip(axes[0], lengths):
        for label in learners:
            entry = results[length][label]
            x = np.asarray(entry["curve_updates"])
            m, c = np.asarray(entry["curve_mean"]), np.asarray(entry["curve_ci"])
            ax.plot(x, m, label=label)
            ax.fill_between(x, m - c, m + c, alpha=0.2)
        ax.axhline(1 / 16, color="grey", ls="--", lw=1)
        ax.set_title(f"L = {length}", fontsize=9)
        ax.set_xlabel("update")
    axes[0][0].set_ylabel("treasure rate (exact)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "curves.png"), dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--lengths", default=",".join(str(L) for L in PAPER_LENGTHS))
    p.add_argument("--learners", default=",".join(LEARNERS))
    p.add_argument("--updates", type=int, default=None,
                   help="override the size's number of updates per run")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--keep-xla-defaults", action="store_true",
                   help="do not set the XLA:CPU flags of the note at the imports")
    args = p.parse_args(argv)
    learners = [l for l in args.learners.split(",") if l]
    unknown = sorted(set(learners) - set(LEARNERS))
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x]
    except ValueError:
        lengths = []
    if unknown or args.seeds < 2 or not lengths or min(lengths) < 4:
        print(f"run.py: error: unknown learners {unknown}, seeds < 2, or bad --lengths "
              f"{args.lengths!r} (integers >= 4)", file=sys.stderr)
        return 2
    updates, points = SIZES[args.size]
    if args.updates is not None:
        if args.updates < points:
            print(f"run.py: error: --updates must be >= {points}", file=sys.stderr)
            return 2
        updates = args.updates - args.updates % points
    start = time.time()
    results = run(updates, points, args.seeds, lengths, learners)
    meta = {"size": args.size, "seeds": args.seeds, "updates": updates, "points": points,
            "num_envs": NUM_ENVS, "hparams": {str(L): hparams_for(L) for L in lengths},
            "learners": {k: [v[0], v[1], dict(v[2])]
                         for k, v in LEARNERS.items() if k in learners},
            "wall_seconds": time.time() - start, "backend": jax.default_backend(),
            "command": " ".join(["python", "experiments/key_to_door/run.py"]
                                + (sys.argv[1:] if argv is None else list(argv)))}
    write_outputs(results, args.out, meta)
    print(f"wrote {args.out} in {time.time() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Experiment 1 of the HCA issue: the HCA paper's illustrative tasks, learned with the engine.

Tasks (Harutyunyan et al. 2019, Fig. 2; jaxcredit.envs.hca_tasks): Shortcut (n = 5), DelayedEffect
with chain length n ∈ {3, 10, 30, 100} and reward noise σ ∈ {0, 0.1, 1}, and AmbiguousBandit.
Learners: REINFORCE (Monte-Carlo return, no critic), A2C+GAE, and A2C with the credit of hca_return,
hca_state and c2a2c (jaxcredit.estimators.hca). For each (task, learner) one compiled program
trains all seeds and, for DelayedEffect, all three σ at once (σ is an environment parameter, so it
is traced and vmapped; only n changes the compiled program).

Measured:
* learning curves of P(optimal first action) = π(a* | start observation) after each update, read
  off the policy's parameters (a* = 0 in all three tasks), so the curves carry no sampling
  noise of the return. As a cross-check the mean return implies the same quantity (DelayedEffect:
  return = 2P − 1; AmbiguousBandit: 1.1 + 0.8P), stored as ``return_implied_final``.
* P(optimal) averaged over training (area under the curve) and over the last 10% of updates,
  per (task, learner): mean ± 95% CI over seeds.
* a gradient-quality table (bias / variance / SNR in dB vs the exact policy gradient, uniform
  policy, learned hindsight models) from jaxcredit.diagnostics for each task.

Sizes are chosen for a 2-core CPU (``--size small``, the default); ``--size paper`` is the
accelerator-sized configuration (more environments per seed and more updates). Outputs go to
``experiments/hca_tasks/results/`` (results.json, table.md, curves_*.png).

Usage: ``python experiments/hca_tasks/run.py [--size small|paper|smoke] [--seeds 64]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

# XLA:CPU deadlocked (every thread parked in a futex wait, no CPU time, forever) on the 64-seed
# vmapped programs of this script on a 2-core machine, e.g. hca_return on Shortcut; 32 seeds ran.
# Turning off multi-threaded Eigen alone did not cure it; turning off the concurrency-optimised
# scheduler as well did (every program of the sweep then runs in seconds). Set before jax is
# imported; an XLA_FLAGS already in the environment wins.
if "--keep-xla-defaults" not in sys.argv:
    from jaxcredit.xla_flags import configure_cpu_flags

    configure_cpu_flags()

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import diagnostics as D
from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.networks import ActorCritic
from jaxcredit.envs import make as make_env

HERE = os.path.dirname(os.path.abspath(__file__))

# Learner label -> (algo, estimator, options). hca_state conditions on (s_k, r_k) because the
# engine's DelayedEffect observations alias the chain (docs/hca.md, "hca_state on aliased states").
LEARNERS = {
    "REINFORCE": ("reinforce", "mc", ()),
    "A2C+GAE": ("a2c", "gae", ()),
    "hca_return": ("a2c", "hca_return", ()),
    "hca_state": ("a2c", "hca_state", (("condition_on_reward", True),)),
    "c2a2c": ("a2c", "c2a2c", ()),
}

SIZES = {
    # n -> (num_envs, num_steps, updates)
    "smoke": {"chain": {3: (4, 8, 10)}, "shortcut": (4, 8, 10), "bandit": (4, 4, 10)},
    "small": {"chain": {3: (16, 8, 150), 10: (8, 16, 150), 30: (4, 32, 150), 100: (2, 128, 120)},
              "shortcut": (16, 8, 150), "bandit": (16, 4, 150)},
    "paper": {"chain": {3: (64, 8, 600), 10: (64, 16, 600), 30: (32, 32, 600),
                        100: (16, 128, 500)},
              "shortcut": (64, 8, 600), "bandit": (64, 4, 600)},
}
SIGMAS = (0.0, 0.1, 1.0)
# The optimal first action is action 0 in all three tasks: Shortcut's shortcut, DelayedEffect's
# +1 branch, AmbiguousBandit's HI arm.
OPTIMAL_ACTION = 0
HPARAMS = dict(lr=3e-3, gamma=1.0, lambda_=0.95, ent_coef=0.003, vf_coef=0.5, max_grad_norm=1.0,
               est_coef=1.0)


def learner_options(label: str, num_steps: int) -> tuple:
    algo, est, opts = LEARNERS[label]
    if est == "hca_state" and num_steps > 32:
        # O(T²) pairs are too many on a CPU for long windows: sample 16 future steps per step.
        opts = opts + (("pairs", "sampled"), ("num_pairs", 16))
    return opts


def train_program(env_name: str, env_options: tuple, label: str, num_envs: int, num_steps: int,
                  updates: int, vary_sigma: bool):
    """jit(vmap over σ of vmap over seeds of the engine).

    Returns a function ``(keys [S], sigmas [Σ]) -> (episode_return, p_optimal)``, both
    ``[Σ, S, U]``: the per-update mean episode return, and π(optimal action | start observation)
    of the policy after each update, read off its parameters (exact, no sampling noise).
    """
    algo, est, _ = LEARNERS[label]
    config = TrainConfig(algo=algo, estimator=est, estimator_options=learner_options(
        label, num_steps), env=env_name, env_options=env_options, num_envs=num_envs,
        num_steps=num_steps, total_timesteps=num_envs * num_steps * updates, anneal_lr=False)
    env, base_params = make_env(env_name, **dict(env_options))
    hparams = Hparams.create(**HPARAMS)

    def one(key, sigma):
        params = base_params.replace(sigma=sigma) if vary_sigma else base_params
        engine = make_engine(config, env, params)
        start_obs, _ = env.reset(jax.random.key(0), params)  # every start state is the same

        def body(state, _):
            state, metrics = engine.update_step(state, hparams)
            logits = engine.network.apply(state.params["agent"], start_obs[None],
                                          method=ActorCritic.policy)
            return state, (metrics["episode_return"],
                           jax.nn.softmax(logits)[0, OPTIMAL_ACTION])

        _, (returns, p_opt) = jax.lax.scan(body, engine.init(key), None, length=updates)
        return returns, p_opt

    return jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))


def optimal_probability(task: str, returns: np.ndarray) -> np.ndarray:
    """P(optimal first action) implied by mean returns (affine maps, module docstring); Shortcut
    has no such map and returns the return itself."""
    if task.startswith("DelayedEffect"):
        return (returns + 1.0) / 2.0
    if task == "AmbiguousBandit":
        return (returns - 1.1) / 0.8
    return returns


def forward_fill(x: np.ndarray) -> np.ndarray:
    """Replaces NaN (no episode ended in that update) by the last finite value along the last
    axis."""
    out = np.array(x, dtype=np.float64)
    for idx in np.ndindex(out.shape[:-1]):
        row = out[idx]
        last = np.nan
        for t in range(row.shape[0]):
            if np.isnan(row[t]):
                row[t] = last
            else:
                last = row[t]
    return out


def mean_ci(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 95% normal-approximation half-width over ``axis`` (ignoring NaN)."""
    n = np.sum(np.isfinite(x), axis=axis)
    return np.nanmean(x, axis=axis), 1.96 * np.nanstd(x, axis=axis, ddof=1) / np.sqrt(n)


def tasks_for(size: str):
    """(task label, env name, env options, vary σ, (N, T, U))."""
    sizes = SIZES[size]
    tasks = [("Shortcut", "Shortcut", (), False, sizes["shortcut"]),
             ("AmbiguousBandit", "AmbiguousBandit", (), False, sizes["bandit"])]
    for n, shape in sizes["chain"].items():
        tasks.append((f"DelayedEffect-n{n}", "DelayedEffect", (("n", n),), True, shape))
    return tasks


def run_learning(size: str, seeds: int, learners, log=print) -> dict:
    results = {}
    keys = jax.random.split(jax.random.key(2019), seeds)
    for task, env_name, env_options, vary_sigma, (n_env, n_steps, n_upd) in tasks_for(size):
        sigmas = jnp.asarray(SIGMAS if vary_sigma else (0.0,), jnp.float32)
        for label in learners:
            start = time.time()
            program = train_program(env_name, env_options, label, n_env, n_steps, n_upd,
                                    vary_sigma)
            returns, p_opt = jax.block_until_ready(program(keys, sigmas))  # [σ, S, U] each
            returns, curves = forward_fill(np.asarray(returns)), np.asarray(p_opt, np.float64)
            for i, sigma in enumerate(np.asarray(sigmas)):
                name = f"{task}-sigma{sigma:g}" if vary_sigma else task
                tail = curves[i, :, -max(1, n_upd // 10):].mean(-1)
                mean, half = mean_ci(tail)
                auc_mean, auc_half = mean_ci(curves[i].mean(-1))
                results.setdefault(name, {})[label] = {
                    "auc_mean": float(auc_mean), "auc_ci": float(auc_half),
                    "curve_mean": np.nanmean(curves[i], 0).tolist(),
                    "curve_ci": (1.96 * np.nanstd(curves[i], 0, ddof=1)
                                 / np.sqrt(curves.shape[1])).tolist(),
                    "final_mean": float(mean), "final_ci": float(half),
                    "env_steps_per_seed": n_env * n_steps * n_upd,
                    "return_curve_mean": np.nanmean(returns[i], 0).tolist(),
                    # P(optimal) implied by the mean return (a noisy, unbiased cross-check).
                    "return_implied_final": float(np.nanmean(optimal_probability(
                        task, returns[i, :, -max(1, n_upd // 10):]))),
                }
            log(f"{task:<22} {label:<11} {time.time() - start:6.1f}s  auc / final "
                + ", ".join(f"{results[k][label]['auc_mean']:.3f} / "
                            f"{results[k][label]['final_mean']:.2f}"
                            for k in results if k.startswith(task + "-") or k == task))
    return results


def run_gradient_table(size: str, log=print) -> dict:
    """Gradient quality at the uniform policy, learned hindsight, one-hot state observations."""
    num = 512 if size == "smoke" else 4096
    table = {}
    cases = [("Shortcut", ()), ("AmbiguousBandit", ()),
             ("DelayedEffect", (("n", 3), ("sigma", 0.0))),
             ("DelayedEffect", (("n", 3), ("sigma", 1.0))),
             ("DelayedEffect", (("n", 10), ("sigma", 1.0)))]
    for env_name, env_kwargs in cases:
        config = D.DiagnoseConfig(
            env=env_name, env_kwargs=env_kwargs,
            estimators=("reinforce", "gae", "hca_return", "hca_return:form=all_action",
                        "hca_state", "c2a2c"),
            num_trajectories=num, num_fit=1024, fit_steps=300 if size != "smoke" else 10,
            gamma=1.0, lambda_=0.95)
        out = D.diagnose(config, seed=0, policy_scale=0.0)
        name = env_name + "".join(f"-{k}{v:g}" for k, v in env_kwargs)
        table[name] = {label: {k: float(out[label][k]) for k in
                               ("bias_db", "var_db", "snr_db", "cosine", "floor_db")}
                       for label in out if not label.startswith("_")}
        log(f"diagnostics {name}: " + ", ".join(
            f"{label} SNR {v['snr_db']:.1f}" for label, v in table[name].items()))
    return table


def write_outputs(results: dict, grads: dict, out_dir: str, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "learning": results, "gradients": grads}, f, indent=1)
    learners = list(next(iter(results.values())).keys())
    lines = [f"{meta['seeds']} seeds per cell, sizes '{meta['size']}', mean ± 95% CI over seeds. "
             "P(optimal first action) is π(a* | start observation) of the policy after each "
             "update (run.py docstring). dB values of ±300 / inf mean an exactly zero error.", ""]
    for key, title in (("auc", "Mean over training of P(optimal first action) (area under the "
                                "learning curve; higher = faster)"),
                       ("final", "Final P(optimal first action), last 10% of updates")):
        lines += [f"# {title}", "", "| task | " + " | ".join(learners) + " |",
                  "|---" * (len(learners) + 1) + "|"]
        for task, row in results.items():
            lines.append(f"| {task} | " + " | ".join(
                f"{row[l][key + '_mean']:.3f} ± {row[l][key + '_ci']:.3f}" for l in learners)
                + " |")
        lines.append("")
    if grads:
        lines += ["", "# Gradient quality at the uniform policy (dB; learned hindsight)", ""]
        for env, rows in grads.items():
            lines += [f"## {env}", "", "| estimator | bias dB | var dB | SNR dB | cos | floor dB |",
                      "|---|---|---|---|---|---|"]
            for label, v in rows.items():
                lines.append(f"| {label} | {v['bias_db']:.1f} | {v['var_db']:.1f} | "
                             f"{v['snr_db']:.1f} | {v['cosine']:.3f} | {v['floor_db']:.1f} |")
            lines.append("")
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    groups = {}
    for task in results:
        groups.setdefault(task.split("-sigma")[0], []).append(task)
    for group, tasks in groups.items():
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.4), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            for label, entry in results[task].items():
                m, c = np.asarray(entry["curve_mean"]), np.asarray(entry["curve_ci"])
                x = np.arange(m.shape[0])
                ax.plot(x, m, label=label)
                ax.fill_between(x, m - c, m + c, alpha=0.2)
            ax.set_title(task, fontsize=9)
            ax.set_xlabel("update")
            ax.set_ylabel("P(optimal first action)")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"curves_{group}.png"), dpi=110)
        plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--seeds", type=int, default=64)
    p.add_argument("--learners", default=",".join(LEARNERS))
    p.add_argument("--no-gradients", action="store_true")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--keep-xla-defaults", action="store_true",
                   help="do not set the XLA:CPU flags of the note at the imports")
    args = p.parse_args(argv)
    learners = [l for l in args.learners.split(",") if l]
    unknown = sorted(set(learners) - set(LEARNERS))
    if unknown or args.seeds < 2:
        print(f"run.py: error: unknown learners {unknown} or seeds < 2", file=sys.stderr)
        return 2
    start = time.time()
    results = run_learning(args.size, args.seeds, learners)
    grads = {} if args.no_gradients else run_gradient_table(args.size)
    meta = {"size": args.size, "seeds": args.seeds, "hparams": HPARAMS, "sigmas": SIGMAS,
            "sizes": {k: str(v) for k, v in SIZES[args.size].items()},
            "wall_seconds": time.time() - start, "backend": jax.default_backend()}
    write_outputs(results, grads, args.out, meta)
    print(f"wrote {args.out} in {time.time() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why fitted return hindsight drives KeyToDoor's key action to zero when the exact model does not.

Trains A2C with the fitted ``hca_return`` model on KeyToDoor and, at every update, also assigns
the credit of the same window with the *exact* model of the current policy (the oracle twin).
For the first step of each episode (s₀, where the key is picked or not) it records

* the policy-gradient signal on the key logit, mean_i (1[a_i = KEY] − π(KEY|s₀)) · Â_0,i, under
  the fitted and under the exact model, and the exact one from dynamic programming,
  π(KEY|s₀) · A^π(s₀, KEY);
* the hindsight ratio h(KEY | s₀, Z) / π(KEY | s₀) of both models, and its correlation with Z;
* the KL between the two models at s₀ and over all steps (what ``estimator/kl_to_exact`` reports).

    python experiments/key_to_door/probe.py [--length 23] [--updates 96] [--seeds 4]

Writes ``probe.json`` and ``probe.md`` into ``--out`` (default: a new folder under runs/).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from jaxcredit import experiment as X
from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents import ground_truth as gt
from jaxcredit.envs.key_to_door import PICK_KEY

HERE = pathlib.Path(__file__).resolve().parent


@dataclasses.dataclass
class Args:
    """Fitted against exact return hindsight at the key decision (module docstring)."""

    length: int = 23
    """track length L"""
    updates: int = 96
    """updates per seed"""
    seeds: int = 4
    """seeds (vmapped)"""
    out: Optional[str] = None
    """output folder (default: a new one under runs/experiments/)"""


def make_probe(length: int):
    sys.path.insert(0, str(HERE))
    from run import hparams_for  # noqa: PLC0415 (the experiment's own settings)

    config = TrainConfig(algo="a2c", estimator="hca_return", env="KeyToDoor",
                         env_options=(("length", length),), num_envs=8, num_steps=length,
                         total_timesteps=8 * length, hidden_sizes=(64, 64), anneal_lr=False,
                         eval_every=0)
    engine = make_engine(config)
    twin = engine.estimator.oracle()
    hparams = Hparams.create(**hparams_for(length, "hca_return"))

    def probe(state, key):
        window = engine.collect(state, hparams, key)
        traj, credit, fitted, _ = engine.assign_credit(state, window.trajectory, hparams, key)
        mdp = engine.ground_truth.mdp()
        pi = gt.policy_table(engine.network, state.agent.params, mdp)
        exact_params = gt.exact_model_params("return_hindsight", engine.ground_truth, mdp, pi,
                                             hparams.gamma)
        exact_credit = twin.assign(exact_params, traj, hparams, key)
        log_h, _ = engine.estimator.hindsight(fitted.estimator.params, traj, hparams, key)
        log_x, _ = twin.hindsight(exact_params, traj, hparams, key)
        pi_key = pi[0, PICK_KEY]
        took_key = (traj.action[0] == PICK_KEY).astype(jnp.float32)
        score = took_key - pi_key
        advantage = gt.tabular.advantages(mdp, pi, 1.0)
        z = traj.reward[::-1].cumsum(0)[::-1][0]  # the episode's return (windows = episodes)
        ratio_fit = jnp.exp(log_h[0, :, PICK_KEY]) / pi_key
        ratio_exact = jnp.exp(log_x[0, :, PICK_KEY]) / pi_key
        corr = lambda a, b: jnp.corrcoef(a, b)[0, 1]  # noqa: E731
        kl = lambda p, q: jnp.sum(jnp.exp(p) * (p - q), -1).mean()  # noqa: E731
        out = {
            "pi_key": pi_key,
            "signal_fitted": jnp.mean(score * credit.advantage[0]),
            "signal_exact_model": jnp.mean(score * exact_credit.advantage[0]),
            "signal_dp": pi_key * advantage[0, PICK_KEY],
            "ratio_fitted_mean": ratio_fit.mean(),
            "ratio_exact_mean": ratio_exact.mean(),
            "corr_ratio_z_fitted": corr(ratio_fit, z),
            "corr_ratio_z_exact": corr(ratio_exact, z),
            "kl_s0": kl(log_x[0], log_h[0]),
            "kl_all": kl(log_x, log_h),
        }
        state, _ = engine.update_step(state, hparams)
        return state, out

    return engine, probe


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    engine, probe = make_probe(args.length)

    def seed(key):
        return jax.lax.scan(probe, engine.init(key), jax.random.split(key, args.updates))[1]

    keys = jax.random.split(jax.random.key(7), args.seeds)
    out = jax.device_get(jax.jit(jax.vmap(seed))(keys))  # each [S, U]
    out = {k: np.asarray(v, np.float64) for k, v in out.items()}
    folder = pathlib.Path(args.out) if args.out else X.default_out("key_to_door_probe")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.json").write_text(json.dumps({k: v.tolist() for k, v in out.items()}))
    blocks = np.array_split(np.arange(args.updates), 4)
    lines = [f"KeyToDoor L={args.length}, A2C + fitted hca_return, {args.seeds} seeds; each row "
             "averages a quarter of the updates (then over seeds). Signal: the policy-gradient "
             "term on the key logit at s₀.", "",
             "| updates | π(KEY\\|s₀) | signal fitted | signal exact model | signal DP | "
             "h/π fitted | h/π exact | corr(h/π, Z) fitted | corr exact | KL at s₀ | KL all |",
             "|---" * 11 + "|"]
    for block in blocks:
        row = [np.nanmean(out[k][:, block]) for k in (
            "pi_key", "signal_fitted", "signal_exact_model", "signal_dp", "ratio_fitted_mean",
            "ratio_exact_mean", "corr_ratio_z_fitted", "corr_ratio_z_exact", "kl_s0", "kl_all")]
        lines.append(f"| {block[0] + 1}–{block[-1] + 1} | " + " | ".join(
            f"{x:.4f}" for x in row) + " |")
    (folder / "probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why a fitted hindsight model drives KeyToDoor's key action to zero when the exact one does not.

Trains A2C with a fitted model (``hca_return``, or COCOA's ``cocoa_reward`` with ``--estimator``)
on KeyToDoor, with the experiment's settings, and at every update also assigns
the credit of the same window with the *exact* model of the current policy (the oracle twin).
For the first step of each episode (s₀, where the key is picked or not) it records

* the policy-gradient signal on the key logit, mean_i (1[a_i = KEY] − π(KEY|s₀)) · Â_0,i, under
  the fitted and under the exact model, and the exact one from dynamic programming,
  π(KEY|s₀) · A^π(s₀, KEY);
* the hindsight ratio h(KEY | s₀, Z) / π(KEY | s₀) of both models, and its correlation with Z;
* the KL between the two models at s₀ and over all steps (what ``estimator/kl_to_exact`` reports).

    python experiments/key_to_door/probe.py [--length 23] [--updates 96] [--seeds 4]
    python experiments/key_to_door/probe.py --estimator cocoa_reward

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
from jaxcredit.agents import Hparams, make_engine
from jaxcredit.agents import ground_truth as gt
from jaxcredit.envs.key_to_door import PICK_KEY

HERE = pathlib.Path(__file__).resolve().parent


@dataclasses.dataclass
class Args:
    """Fitted against exact return hindsight at the key decision (module docstring)."""

    length: int = 23
    """track length L"""
    estimator: str = "hca_return"
    """hca_return or cocoa_reward (the fitted model probed against its exact twin)"""
    updates: int = 96
    """updates per seed"""
    seeds: int = 4
    """seeds (vmapped)"""
    out: Optional[str] = None
    """output folder (default: a new one under runs/experiments/)"""


def key_signal(advantage: jax.Array, action: jax.Array, pi_s0: jax.Array) -> jax.Array:
    """The policy-gradient term on the key logit at s₀, averaged over episodes: per-step credit
    (1[a = KEY] − π(KEY))·Â₀, all-action credit π(KEY)·(A₀[KEY] − Σ_b π(b)·A₀[b])."""
    if advantage.ndim == 3:  # [T, N, A]
        a0 = advantage[0]
        return jnp.mean(pi_s0[PICK_KEY] * (a0[:, PICK_KEY] - a0 @ pi_s0))
    return jnp.mean(((action[0] == PICK_KEY) - pi_s0[PICK_KEY]) * advantage[0])


def make_probe(length: int, estimator: str = "hca_return"):
    sys.path.insert(0, str(HERE))
    from run import case  # noqa: PLC0415 (the experiment's own settings)

    settings = case(length, estimator, 1)
    config = dataclasses.replace(settings.config, total_timesteps=8 * length, eval_every=0)
    engine = make_engine(config)
    twin = engine.estimator.oracle()
    hparams = Hparams.create(**settings.settings[0])
    pairwise = engine.estimator.exact_model == "reward_hindsight"

    def probe(state, key):
        window = engine.collect(state, hparams, key)
        traj, credit, fitted, _ = engine.assign_credit(state, window.trajectory, hparams, key)
        mdp = engine.ground_truth.mdp()
        pi = gt.policy_table(engine.network, state.agent.params, mdp)
        exact_params = gt.exact_model_params(engine.estimator.exact_model, engine.ground_truth,
                                             mdp, pi, hparams.gamma)
        exact_credit = twin.assign(exact_params, traj, hparams, key)
        log_h, weight = engine.estimator.hindsight(fitted.estimator.params, traj, hparams, key)
        log_x, _ = twin.hindsight(exact_params, traj, hparams, key)
        pi_key = pi[0, PICK_KEY]
        advantage = gt.tabular.advantages(mdp, pi, 1.0)
        kl = lambda p, q: jnp.sum(jnp.exp(p) * (p - q), -1).mean()  # noqa: E731
        out = {
            "pi_key": pi_key,
            "signal_fitted": key_signal(credit.advantage, traj.action, pi[0]),
            "signal_exact_model": key_signal(exact_credit.advantage, traj.action, pi[0]),
            "signal_dp": pi_key * advantage[0, PICK_KEY],
        }
        if pairwise:
            # log h [N, T, K, A] at sampled pairs (s_t, u_k), weight [N, T, K] (rewarded ones):
            # the coefficient of the key at s₀ for the rewards that followed, and the KL there.
            w0 = weight[:, 0]
            ratio_fit = jnp.exp(log_h[:, 0, :, PICK_KEY]) / pi_key
            ratio_exact = jnp.exp(log_x[:, 0, :, PICK_KEY]) / pi_key
            kl_pairs = jnp.sum(jnp.exp(log_x[:, 0]) * (log_x[:, 0] - log_h[:, 0]), -1)
            mean0 = lambda v: jnp.sum(w0 * v) / jnp.maximum(jnp.sum(w0), 1e-9)  # noqa: E731
            nan = jnp.float32(jnp.nan)
            out.update({"ratio_fitted_mean": mean0(ratio_fit),
                        "ratio_exact_mean": mean0(ratio_exact),
                        "corr_ratio_z_fitted": nan, "corr_ratio_z_exact": nan,
                        "kl_s0": mean0(kl_pairs), "kl_all": nan})
            state, _ = engine.update_step(state, hparams)
            return state, out
        z = traj.reward[::-1].cumsum(0)[::-1][0]  # the episode's return (windows = episodes)
        ratio_fit = jnp.exp(log_h[0, :, PICK_KEY]) / pi_key
        ratio_exact = jnp.exp(log_x[0, :, PICK_KEY]) / pi_key
        corr = lambda a, b: jnp.corrcoef(a, b)[0, 1]  # noqa: E731
        out.update({
            "ratio_fitted_mean": ratio_fit.mean(),
            "ratio_exact_mean": ratio_exact.mean(),
            "corr_ratio_z_fitted": corr(ratio_fit, z),
            "corr_ratio_z_exact": corr(ratio_exact, z),
            "kl_s0": kl(log_x[0], log_h[0]),
            "kl_all": kl(log_x, log_h),
        })
        state, _ = engine.update_step(state, hparams)
        return state, out

    return engine, probe


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    engine, probe = make_probe(args.length, args.estimator)

    def seed(key):
        return jax.lax.scan(probe, engine.init(key), jax.random.split(key, args.updates))[1]

    keys = jax.random.split(jax.random.key(7), args.seeds)
    out = jax.device_get(jax.jit(jax.vmap(seed))(keys))  # each [S, U]
    out = {k: np.asarray(v, np.float64) for k, v in out.items()}
    folder = pathlib.Path(args.out) if args.out else X.default_out("key_to_door_probe")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.json").write_text(json.dumps({k: v.tolist() for k, v in out.items()}))
    blocks = np.array_split(np.arange(args.updates), 4)
    lines = [f"KeyToDoor L={args.length}, A2C + fitted {args.estimator}, {args.seeds} seeds; "
             "each row averages a quarter of the updates (then over seeds). Signal: the "
             "policy-gradient term on the key logit at s₀. For the pairwise cocoa_reward, h/π "
             "and the KL are at s₀'s rewarded pairs (s₀, r_k).", "",
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

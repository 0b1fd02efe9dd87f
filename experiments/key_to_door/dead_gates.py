"""Whether a fitted COCOA hypernet can still move at s₀: its two-sided ReLU outputs at the start
state, read from a finished run's last checkpoint.

COCOA's hindsight network (``hypernet.hypernet_hindsight``) outputs
log h = log π + relu_gate(W_ℓ z) + relu_gate(W_G z)·[log π, log(1 − π)], relu_gate(y) = relu(y₁) −
relu(y₂). An entry whose two halves are both negative is exactly 0 *and has no gradient*: where
every entry is so at s₀ for an outcome u, h(·|s₀, u) = π for good, the coefficient w = 1 and the
key gets no credit from u. This prints, per seed, the live entries of ℓ and G at s₀ for each of
KeyToDoor's reward values (0, low apple, high apple, treasure) and the final π(KEY | s₀).

    python experiments/key_to_door/dead_gates.py \\
        runs/experiments/key_to_door-elr-full/cocoa/L103/cocoa_reward_elr0.01
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import tyro

from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.experiment.runs import last_state

VALUES = ("0", "low apple", "high apple", "treasure")


@dataclasses.dataclass
class Args:
    """Live relu_gate entries of a fitted hypernet at s₀, per seed and reward value."""

    run: tyro.conf.Positional[str]
    """a cocoa_reward run directory with model=hypernet (experiments/key_to_door/run.py)"""


def live_entries(params: dict, obs: jax.Array, num_values: int) -> tuple[list, list]:
    """Per reward value: how many entries of ℓ and of G have a positive half at ``obs``."""
    z = jax.nn.relu(params["src"]["kernel"].T @ obs + params["src"]["bias"]
                    + jnp.eye(num_values) @ params["tgt"]["kernel"])

    def live(layer):
        y = z @ layer["kernel"] + layer["bias"]
        first, second = jnp.split(y, 2, axis=-1)
        return ((first > 0) | (second > 0)).sum(-1).tolist()

    return live(params["out"]), live(params["gate"])


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    run = pathlib.Path(args.run)
    try:
        engine, state, seeds = last_state(run)
        if dict(engine.config.estimator.options).get("model") != "hypernet":
            raise ValueError(f"{run} is not a run of the hypernet model")
    except (OSError, KeyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    obs, _ = engine.env.reset(jax.random.key(0), engine.env_params)
    mdp = engine.ground_truth.mdp()
    print(f"{run}: live entries of ℓ (of 4) and G (of 32) at s₀ for the outcomes "
          f"{', '.join(VALUES)}")
    for seed in range(seeds):
        params = jax.tree.map(lambda x, s=seed: x[s], state.credit.estimator.params)["params"]
        ell, gate = live_entries(params, obs, len(VALUES))
        agent = jax.tree.map(lambda x, s=seed: x[s], state.agent.params)
        pi = gt_lib.policy_table(engine.target_logits, agent, mdp)
        key_rate = float(engine.ground_truth.task_metrics(pi)["key_rate"])
        print(f"seed {seed}: ℓ {ell}, G {gate}, π(KEY | s₀) {key_rate:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fine COCOA-feature's learned features are: over every (state, action) of KeyToDoor's
tabular MDP, the number of distinct feature vectors g(s, a) for each reward outcome, read from a
finished run's last checkpoint (with ``features=pretrain`` the features are frozen after the
pretraining, so these are the features the whole run used).

COCOA's theory wants u_k to fix the reward and be no finer: each distinction a feature adds
beyond the reward can tie a later step's outcome to an earlier action and carry that step's
reward into the action's credit (experiments/key_to_door/README.md, "COCOA-feature"). The reward
outcomes of a pair are the values it can pay (``reward_value_law``: 0, an apple low or high, the
treasure); apple pairs are also split by the has-key bit of the observation.

    python experiments/key_to_door/feature_grain.py \\
        runs/experiments/key_to_door-cocoa-feature-metrics/cocoa/L23/cocoa_feature
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from jaxcredit.envs.key_to_door import NUM_CELL_TYPES
from jaxcredit.estimators.cocoa import reward_features
from jaxcredit.experiment.runs import last_state

VALUES = ("0", "low apple", "high apple", "treasure")
HAS_KEY = 1 + NUM_CELL_TYPES + 1  # the observation: position, cell one-hot, has-key one-hot


@dataclasses.dataclass
class Args:
    """Distinct learned features per reward outcome, per seed."""

    run: tyro.conf.Positional[str]
    """a cocoa_feature run directory on KeyToDoor (experiments/key_to_door/run.py)"""


def feature_table(obj: dict, obs: np.ndarray, num_actions: int, threshold: float) -> np.ndarray:
    """g(s, a) for every state and action: ``[S, A, F]`` of 0/1."""
    every = jax.vmap(lambda a: reward_features(obj, jnp.asarray(obs),
                                               jnp.full((obs.shape[0],), a), threshold))
    return np.asarray(every(jnp.arange(num_actions))).transpose(1, 0, 2).astype(int)


def grain(features: np.ndarray, outcome: np.ndarray, has_key: np.ndarray) -> dict:
    """Distinct feature vectors per outcome label, in all, and of apple pairs by key state.

    ``features`` ``[S, A, F]``; ``outcome`` ``[S, A]`` labels; ``has_key`` ``[S]``."""
    rows = [tuple(f) for f in features.reshape(-1, features.shape[-1])]
    labels, key = outcome.reshape(-1), np.repeat(has_key, features.shape[1])
    result = {"pairs": len(rows), "distinct": len(set(rows))}
    for label in np.unique(labels):
        result[str(label)] = len({r for r, lab in zip(rows, labels) if lab == label})
    apple = np.array(["apple" in str(lab) for lab in labels])
    with_key = {r for r, a, k in zip(rows, apple, key) if a and k}
    without = {r for r, a, k in zip(rows, apple, key) if a and not k}
    result.update(apple_with_key=len(with_key), apple_without_key=len(without),
                  apple_both=len(with_key & without))
    return result


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    run = pathlib.Path(args.run)
    try:
        engine, state, seeds = last_state(run)
        config = engine.config
        if config.estimator.name != "cocoa_feature" or config.env != "KeyToDoor":
            raise ValueError(f"{run} is not a cocoa_feature run on KeyToDoor")
    except (OSError, KeyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    mdp = engine.ground_truth.mdp()
    obs = np.asarray(mdp.observation, np.float32).reshape(mdp.observation.shape[0], -1)
    _, probs = engine.ground_truth.reward_values  # [S, A, 4]
    names = np.array(VALUES)
    outcome = np.array([["/".join(names[np.asarray(p) > 0]) for p in row]
                        for row in np.asarray(probs)])
    threshold = float(dict(config.estimator.options).get("threshold", 0.05))
    print(f"{run}: distinct g(s, a) over the MDP's (state, action) pairs, by reward outcome")
    for seed in range(seeds):
        obj = jax.tree.map(lambda x, s=seed: x[s], state.credit.estimator.params)["object"]
        counts = grain(feature_table(obj, obs, probs.shape[1], threshold), outcome,
                       obs[:, HAS_KEY] > 0.5)
        print(f"seed {seed}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Probe of the credit at Accumulated-Charge's decision: how much of each learner's advantage at
step 0 is signal (the mean difference between the two first actions) and how much spread, and
how large the advantages are on the steps after it, whose actions do nothing.

Each learner of ``run.py``'s Accumulated-Charge task is trained for ``updates`` updates (one seed,
the experiment's settings), then 8 windows of the current policy are collected and their credit
assigned by the engine's own functions (``make_engine``: ``collect``, ``assign_credit``).

    python experiments/lambda_choice/probe_charge.py --updates 200
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import tyro

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run as R  # noqa: E402

from jaxcredit.agents.config import Hparams  # noqa: E402
from jaxcredit.agents.train import make_engine  # noqa: E402

LEARNERS = ("GAE λ=0.9", "GAE λ=1", "chunked features", "chunked feature oracle")


@dataclasses.dataclass
class Args:
    """Credit at Accumulated-Charge's decision (module docstring)."""

    updates: int = 200
    """updates of training before the probe"""
    windows: int = 8
    """windows collected for the probe"""
    seed: int = 0
    """the run's seed"""


def probe(label: str, updates: int, windows: int, seed: int) -> dict:
    case = R.case("AccumulatedCharge", label, max(updates, 1))
    engine = make_engine(case.config)
    hparams = Hparams(**{k: jnp.float32(v) for k, v in case.settings[0].items()})
    state = jax.jit(engine.init)(jax.random.key(seed))
    if updates:
        state = jax.jit(lambda s: engine.run(s, hparams, updates))(state)
        state = state[0] if isinstance(state, tuple) else state

    @jax.jit
    def credit(state, key):
        collect_key, credit_key = jax.random.split(key)
        window = engine.collect(state, hparams, collect_key)
        traj, out, _, _ = engine.assign_credit(state, window.trajectory, hparams, credit_key)
        return out.advantage, traj.obs[..., 2] == 0, traj.action == 1

    parts = [credit(state, jax.random.key(100 + i)) for i in range(windows)]
    advantage, first, plus = (np.concatenate([np.asarray(p[j]).ravel() for p in parts])
                              for j in range(3))
    a0, p0 = advantage[first], plus[first]
    return {"signal": float(a0[p0].mean() - a0[~p0].mean()),
            "spread": float(np.sqrt(0.5 * (a0[p0].var() + a0[~p0].var()))),
            "later_rms": float(np.sqrt(np.mean(advantage[~first] ** 2))),
            "decisions": int(first.sum())}


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    out = {label: probe(label, args.updates, args.windows, args.seed) for label in LEARNERS}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

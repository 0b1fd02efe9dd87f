"""Cost of the learned hindsight estimators relative to A2C+GAE, at the same size, in one process.

Each estimator's whole training run (A2C on DelayedEffect, n = 3) is compiled once, then timed
(``block_until_ready``) in interleaved rounds; the table reports the median run time and its ratio
to A2C+GAE's, and env steps per second. Compile time is excluded.

Usage: ``python experiments/hca_tasks/speed.py [--num-envs 256] [--num-steps 16] [--updates 20]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.train import make_train

CASES = (
    ("gae", ()),
    ("hca_return", ()),
    ("c2a2c", ()),
    ("hca_return", (("form", "all_action"),)),
    ("hca_state", (("pairs", "sampled"), ("num_pairs", 4))),
    ("hca_state", ()),
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--num-steps", type=int, default=16)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out",
                   default=os.path.join(os.path.dirname(__file__), "results", "speed.json"))
    args = p.parse_args(argv)
    n, t, u = args.num_envs, args.num_steps, args.updates
    hp = Hparams.create(lr=1e-3, gamma=0.99, lambda_=0.95)
    programs = {}
    for est, opts in CASES:
        cfg = TrainConfig(algo="a2c", estimator=est, estimator_options=opts, env="DelayedEffect",
                          env_options=(("n", 3),), num_envs=n, num_steps=t,
                          total_timesteps=n * t * u)
        train = jax.jit(make_train(cfg))
        jax.block_until_ready(train(jax.random.key(0), hp))  # compile
        programs[(est, opts)] = train
    times = {k: [] for k in programs}
    for r in range(args.repeats):
        for k, train in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(train(jax.random.key(r + 1), hp))
            times[k].append(time.perf_counter() - start)
    base = float(np.median(times[("gae", ())]))
    rows = []
    print(f"backend {jax.default_backend()}, N={n}, T={t}, updates={u}")
    for (est, opts), ts in times.items():
        med = float(np.median(ts))
        label = est + "".join(f":{k}={v}" for k, v in opts)
        rows.append({"estimator": label, "seconds": med, "ratio": med / base,
                     "steps_per_second": n * t * u / med})
        print(f"{label:<40} {med:7.3f}s  {n * t * u / med:10.0f} steps/s  x{med / base:.2f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"backend": jax.default_backend(), "num_envs": n, "num_steps": t, "updates": u,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``jaxcredit bench all``: every benchmark in one command, sized for the machine it runs on.

    jaxcredit bench all                                   # gpu size on an accelerator, cpu else
    jaxcredit bench all --size gpu --purejaxrl-git DIR --out results/bench_all_gpu
    jaxcredit bench all --size smoke                      # a one-minute check (the tests run it)

It runs, each race in one process with compile time apart (the protocols of ``bench
estimators`` and ``bench train``):

1. the estimator table: jaxcredit's scan and associative scan against rlax, T up to 4096;
2. training throughput of PPO on CartPole against PureJaxRL (when a checkout is given) at
   PureJaxRL's default size, at many envs and with many vmapped seeds, and (cpu and gpu sizes,
   with a checkout) recurrent PPO against PureJaxRL's ``ppo_rnn.py`` and continuous PPO on
   Pendulum-v1 against its ``ppo_continuous_action.py`` (64 envs × 1e5 steps on cpu; on gpu its
   own 2048 envs, for 5e6 steps: a tenth of its 5e7, the same program per update, so that the
   race keeps to the gpu plan below);
3. the learned credit stages' cost per env step: fitted estimators against A2C+GAE, RUDDER
   against PPO+GAE.

and writes ``all.json`` (every timing) and ``all.md`` (the tables, ready for RESULTS.md) into
``--out`` (default ``results/bench_all_<size>``). The ``gpu`` size is planned to take under
8 minutes on one recent GPU; it has not been run on one yet.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Optional

import jax

from jaxcredit.bench import estimators as est_bench
from jaxcredit.bench import train as train_bench

SIZES = {
    "smoke": dict(
        estimators=dict(T=(128,), B=(64,), repeats=3, estimators=("gae", "vtrace")),
        train=dict(total_timesteps=4 * 128 * 2, repeats=1, big_envs=(64,), big_updates=1,
                   seeds=(2,), seeds_timesteps=4 * 128 * 2, estimators=("hca_return",),
                   fit_steps=("1",), estimator_envs=8, estimator_steps=8, estimator_updates=1,
                   redistributors=("rudder:features=4",), redistribute_fit_steps=("1",),
                   redistributor_envs=2, redistributor_steps=16, redistributor_updates=1)),
    "cpu": dict(
        estimators=dict(T=(128, 1024, 4096), B=(1024,), repeats=10),
        train=dict(total_timesteps=5e5, repeats=3, big_envs=(2048,), big_updates=4,
                   seeds=(16, 64), seeds_timesteps=1e5, estimators=("hca_return", "c2a2c"),
                   fit_steps=("4",), redistributors=("rudder",),
                   redistribute_fit_steps=("1", "4"), rnn_timesteps=5e5, continuous_envs=64,
                   continuous_timesteps=1e5)),
    "gpu": dict(
        estimators=dict(T=(128, 1024, 4096), B=(1024, 8192), repeats=20),
        train=dict(total_timesteps=5e5, repeats=3, big_envs=(2048, 16384, 65536),
                   big_updates=4, seeds=(1, 16, 128, 1024), seeds_timesteps=1e5,
                   estimators=("hca_return", "c2a2c", "hca_state"), fit_steps=("1", "4"),
                   estimator_envs=4096, redistributors=("rudder",),
                   redistribute_fit_steps=("1", "4"), redistributor_envs=256,
                   rnn_timesteps=1e5, continuous_envs=2048, continuous_timesteps=5e6)),
}


@dataclasses.dataclass
class AllBench:
    """Every benchmark in one command (module docstring)."""

    size: str = "auto"
    """auto (gpu on an accelerator, cpu otherwise) | smoke | cpu | gpu"""
    purejaxrl: Optional[str] = None
    """a PureJaxRL checkout to race against (the folder holding purejaxrl/ppo.py)"""
    purejaxrl_git: Optional[str] = None
    """a bare git directory of PureJaxRL to race against (its HEAD)"""
    out: Optional[str] = None
    """folder for all.json and all.md (default: results/bench_all_<size>)"""


def resolve_size(size: str) -> str:
    if size == "auto":
        return "cpu" if jax.default_backend() == "cpu" else "gpu"
    if size not in SIZES:
        raise ValueError(f"--size must be auto or one of {', '.join(SIZES)}, got {size!r}")
    return size


def bench(args: AllBench) -> dict:
    """Runs every benchmark at ``args.size`` and writes ``all.json`` and ``all.md``."""
    size = resolve_size(args.size)
    out = pathlib.Path(args.out or f"results/bench_all_{size}")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder")
    plan = SIZES[size]
    rivals = bool(args.purejaxrl or args.purejaxrl_git)
    train_args = train_bench.TrainBench(purejaxrl=args.purejaxrl,
                                        purejaxrl_git=args.purejaxrl_git, compare_all=True,
                                        rnn=rivals and "rnn_timesteps" in plan["train"],
                                        continuous=(rivals and
                                                    "continuous_timesteps" in plan["train"]),
                                        **plan["train"])
    train_bench.check(train_args)  # bad paths and options fail before anything runs
    start = time.perf_counter()
    estimators = est_bench.bench(est_bench.EstimatorsBench(**plan["estimators"]))
    training = train_bench.bench(train_args)
    payload = {"size": size, "seconds": time.perf_counter() - start,
               "estimators": estimators, "train": training}
    out.mkdir(parents=True, exist_ok=True)
    (out / "all.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "all.md").write_text(markdown(payload))
    print(f"wrote {out / 'all.json'} and {out / 'all.md'} ({payload['seconds']:.0f} s)")
    return payload


def markdown(payload: dict) -> str:
    """The tables of a ``bench all`` payload as markdown (code blocks keep their columns)."""
    est, train = payload["estimators"], payload["train"]
    timings = [est_bench.Timing(**t) for t in est["timings"]]
    lines = [f"## jaxcredit benchmarks ({payload['size']} size) on {est['backend']} "
             f"({est['device']}), jax {est['jax']}, {payload['seconds']:.0f} s", "",
             f"### Estimators against rlax {est['rlax']} (µs per call, median of "
             f"{est['repeats']})", "", "```", est_bench.table(timings), "```", "",
             f"### Training (median of {train['repeats']} calls, compile separate; "
             f"PureJaxRL: {train.get('purejaxrl', 'skipped')})", ""]
    for race in train["races"]:
        lines += ["```", train_bench.format_race(race), "```", ""]
    return "\n".join(lines)

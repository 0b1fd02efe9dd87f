"""Counts XLA:CPU hangs: many runs per setting, each in a subprocess with a time limit.

    python experiments/xla_cpu_hang/hangs.py --runs 5 --out results/hangs_cpu.md
    python experiments/xla_cpu_hang/hangs.py --init flax --settings init-256 --runs 3  # old init

A run *hangs* when it has not finished within ``--timeout`` seconds (every setting finishes in a
few seconds when it does not hang). Settings: ``init-N`` is ``jax.jit(jax.vmap(engine.init))``
over N keys (A2C on DelayedEffect), the program that deadlocked inside jaxlib's batched LAPACK QR
(``jaxcredit.networks``); ``train-16`` is 16 seeds of PPO on CartPole vmapped in one program;
``sweep-4dev`` is a sharded sweep of 8 seeds over 4 forced CPU devices through the command line.
``--flags default`` runs with XLA's default flags (``JAXCREDIT_SAFE_XLA_CPU=0``), ``--flags safe``
with jaxcredit's former safety flags; ``--init flax`` swaps in flax's batched orthogonal
initialiser, to count what the fix removed.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import time

import tyro

# One run of a setting, as a Python program (``{n}`` and ``{init}`` filled in).
_INIT = """
import jax
{patch}
from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.train import make_engine
engine = make_engine(TrainConfig(algo="a2c", env="DelayedEffect", num_envs=4, num_steps=8,
                                 total_timesteps=128))
jax.block_until_ready(jax.jit(jax.vmap(engine.init))(jax.random.split(jax.random.key(0), {n})))
"""
_TRAIN = """
import jax
{patch}
from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.train import make_engine
engine = make_engine(TrainConfig(algo="ppo", env="CartPole-v1", num_envs=4,
                                 total_timesteps=4 * 128 * 8))
train = jax.jit(jax.vmap(engine.train, in_axes=(0, None)))
jax.block_until_ready(train(jax.random.split(jax.random.key(0), {n}), Hparams.create()))
"""
# Swaps jaxcredit's orthogonal initialiser for flax's (batched QR under vmap).
_FLAX_INIT = ("import flax.linen as nn, jaxcredit.networks as N; "
              "N.orthogonal = nn.initializers.orthogonal")
SWEEP = ["train", "--algo", "a2c", "--env", "CartPole-v1", "--num-seeds", "8", "--num-envs",
         "64", "--total-timesteps", "100000", "--no-progress"]
SETTINGS = ("init-16", "init-64", "init-256", "init-1024", "train-16", "sweep-4dev")


@dataclasses.dataclass
class Args:
    """Counts hangs per setting (module docstring)."""

    settings: tuple[str, ...] = SETTINGS
    """which settings: init-N, train-N, sweep-4dev"""
    runs: int = 5
    """runs per setting"""
    timeout: float = 60.0
    """seconds after which a run counts as hung"""
    flags: str = "default"
    """default (XLA's flags) | safe (the former safety flags)"""
    init: str = "jaxcredit"
    """jaxcredit (sequential QR under vmap) | flax (batched QR, the old init)"""
    out: str | None = None
    """also write the table (markdown) here"""


def command(setting: str, init: str, workdir: pathlib.Path) -> list[str]:
    """The subprocess command of one run of ``setting``."""
    patch = _FLAX_INIT if init == "flax" else ""
    kind, _, size = setting.partition("-")
    if kind == "sweep":
        if init == "flax":
            raise ValueError("--init flax applies to the init-N and train-N settings")
        script = pathlib.Path(sys.executable).parent / "jaxcredit"
        return [str(script), *SWEEP, "--out",
                str(workdir / f"sweep-{time.time_ns()}")]
    if kind not in ("init", "train") or not size.isdigit():
        raise ValueError(f"unknown setting {setting!r}; known: init-N, train-N, sweep-4dev")
    program = (_INIT if kind == "init" else _TRAIN).format(n=int(size), patch=patch)
    return [sys.executable, "-c", program]


def environment(setting: str, flags: str) -> dict:
    env = dict(os.environ)
    env["JAXCREDIT_SAFE_XLA_CPU"] = "1" if flags == "safe" else "0"
    if setting == "sweep-4dev":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            " --xla_force_host_platform_device_count=4").strip()
    return env


def run_once(setting: str, args: Args, workdir: pathlib.Path) -> tuple[str, float]:
    """``("ok" | "hang" | "error", seconds)`` of one run."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command(setting, args.init, workdir),
                              env=environment(setting, args.flags), capture_output=True,
                              timeout=args.timeout, text=True)
    except subprocess.TimeoutExpired:
        return "hang", time.perf_counter() - start
    status = "ok" if done.returncode == 0 else "error"
    if status == "error":
        print(done.stderr.strip().splitlines()[-1:] or done.returncode, file=sys.stderr)
    return status, time.perf_counter() - start


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    try:
        if args.flags not in ("default", "safe") or args.init not in ("jaxcredit", "flax"):
            raise ValueError("--flags is default or safe; --init is jaxcredit or flax")
        if args.runs < 1 or args.timeout <= 0:
            raise ValueError("--runs and --timeout must be positive")
        for setting in args.settings:
            command(setting, args.init, pathlib.Path("."))
    except ValueError as err:
        print(f"hangs: error: {err}", file=sys.stderr)
        return 2
    workdir = pathlib.Path("runs") / "hangs"
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"XLA:CPU hang count: flags={args.flags}, init={args.init}, {args.runs} runs per "
             f"setting, a run that has not finished in {args.timeout:g} s counts as hung", "",
             "| setting | hung | errors | median seconds of the finished runs |",
             "|---|---|---|---|"]
    for setting in args.settings:
        results = [run_once(setting, args, workdir) for _ in range(args.runs)]
        hung = sum(r == "hang" for r, _ in results)
        errors = sum(r == "error" for r, _ in results)
        finished = sorted(s for r, s in results if r == "ok")
        median = f"{finished[len(finished) // 2]:.1f}" if finished else "-"
        lines.append(f"| {setting} | {hung}/{args.runs} | {errors} | {median} |")
        print(lines[-1], flush=True)
    if args.out:
        pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

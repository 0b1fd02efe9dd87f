"""How often does a user's ``jaxcredit train`` die inside XLA's persistent compilation cache?

Runs the same small ``jaxcredit train`` command many times, one process each, for each policy
kind (MLP, GRU and the memory agent RMA), in two cache modes, and counts the runs that did not
exit 0 (and the native signal that ended them):

- ``write``: a fresh, empty cache folder per run, so the run serialises its programs into it;
- ``read``: a folder one earlier run of the same command filled, so the run deserialises them;
- ``default``: no cache setting at all (``JAXCREDIT_COMPILE_CACHE`` unset, a fresh
  ``XDG_CACHE_HOME``): what a user's command does out of the box. The run also records whether
  anything was written to the default cache folder.

    python experiments/compile_cache/count_crashes.py --modes write read --runs 20 \
        --out runs/cc-before
    python experiments/compile_cache/count_crashes.py --modes default --runs 40 \
        --out runs/cc-after

It writes ``runs.jsonl`` (one line per finished run, so an interrupted measurement resumes
where it stopped) and ``summary.md`` into ``--out``. The interpreter is the one running this
script (the ``jaxcredit`` beside ``sys.executable``), so the JAX version is that environment's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Literal

import tyro

POLICIES = ("mlp", "gru", "rma")
# The command of the environment this script runs in.
JAXCREDIT = str(pathlib.Path(sys.executable).parent / "jaxcredit")
MODES = ("write", "read", "default")
# The smallest command that compiles and runs a whole training chunk of each policy kind.
TRAIN = ["train", "--env", "DelayedEffect", "--num-envs", "2", "--num-steps", "8",
         "--num-minibatches", "2", "--total-timesteps", "32", "--hidden-sizes", "8", "8",
         "--eval-every", "0", "--no-progress"]


def versions() -> dict:
    out = subprocess.run([sys.executable, "-c", "import sys, jax, jaxlib; "
                          "print(sys.version.split()[0], jax.__version__, jaxlib.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {"python": out[0], "jax": out[1], "jaxlib": out[2]}


def one_run(policy: str, mode: str, work: pathlib.Path, warm: dict) -> dict:
    """One ``jaxcredit train`` process; returns its outcome."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAXCREDIT_COMPILE_CACHE", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    run_dir = pathlib.Path(tempfile.mkdtemp(dir=work, prefix=f"{policy}-{mode}-"))
    if mode == "write":
        env["JAXCREDIT_COMPILE_CACHE"] = str(run_dir / "cache")
    elif mode == "read":
        env["JAXCREDIT_COMPILE_CACHE"] = str(warm[policy])
    else:
        env["XDG_CACHE_HOME"] = str(run_dir / "xdg")
    argv = [JAXCREDIT, *TRAIN, "--policy", policy,
            "--out", str(run_dir / "run")]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    code = proc.returncode
    written = 0
    cache = {"write": run_dir / "cache", "default": run_dir / "xdg" / "jaxcredit" / "xla"}.get(mode)
    if cache is not None and cache.exists():
        written = sum(1 for _ in cache.iterdir())
    tail = [line for line in proc.stderr.splitlines() if line.strip()][-6:]
    result = {"policy": policy, "mode": mode, "returncode": code, "seconds": round(seconds, 2),
              "signal": signal.Signals(-code).name if code < 0 else None,
              "cache_entries_written": written, "stderr_tail": tail if code else []}
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def warm_caches(work: pathlib.Path, policies) -> dict:
    """One cache folder per policy, filled by one run of the command (retried if it crashes)."""
    warm = {}
    for policy in policies:
        folder = work / f"warm-{policy}"
        while not folder.exists() or not any(folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
            env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
            env.update(JAX_PLATFORMS="cpu", JAXCREDIT_COMPILE_CACHE=str(folder))
            subprocess.run([JAXCREDIT, *TRAIN, "--policy", policy,
                            "--out", str(work / f"warm-run-{policy}"), "--force"],
                           env=env, capture_output=True)
        warm[policy] = folder
    return warm


def summary(rows: list, info: dict) -> str:
    lines = [f"# Compile-cache crash count: Python {info['python']}, jax {info['jax']}, "
             f"jaxlib {info['jaxlib']}", "",
             "Command: `jaxcredit " + " ".join(TRAIN) + " --policy P --out DIR`", "",
             "| policy | mode | runs | crashed (non-zero exit) | signals | median s | "
             "runs that wrote cache entries |", "|---|---|---|---|---|---|---|"]
    for policy in POLICIES:
        for mode in MODES:
            sel = [r for r in rows if r["policy"] == policy and r["mode"] == mode]
            if not sel:
                continue
            bad = [r for r in sel if r["returncode"] != 0]
            sigs = sorted({r["signal"] or str(r["returncode"]) for r in bad})
            secs = sorted(r["seconds"] for r in sel)
            wrote = sum(r["cache_entries_written"] > 0 for r in sel)
            lines.append(f"| {policy} | {mode} | {len(sel)} | {len(bad)} | "
                         f"{', '.join(sigs) or '-'} | {secs[len(secs) // 2]:.1f} | "
                         f"{wrote if mode != 'read' else 'n/a'} |")
    total = len(rows)
    crashed = sum(r["returncode"] != 0 for r in rows)
    lines += ["", f"In all: {crashed} of {total} runs did not exit 0."]
    for r in rows:
        if r["returncode"] != 0:
            lines += ["", f"- {r['policy']} {r['mode']}: exit {r['returncode']} "
                      f"({r['signal']}): " + " / ".join(r["stderr_tail"][-3:])]
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Args:
    """Counts the ``jaxcredit train`` runs that die, per policy and cache mode."""

    out: str
    """folder for runs.jsonl and summary.md (an interrupted count resumes there)"""
    modes: tuple[Literal["write", "read", "default"], ...] = ("write", "read")
    """cache modes: write (a fresh folder per run), read (a filled folder), default (none set)"""
    policies: tuple[Literal["mlp", "gru", "rma"], ...] = POLICIES
    """policy kinds"""
    runs: int = 20
    """runs per (policy, mode)"""


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv, description=__doc__.split("\n")[0])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    info = versions()
    work = out / "work"
    work.mkdir(exist_ok=True)
    warm = warm_caches(work, args.policies) if "read" in args.modes else {}
    # Interleaved (policy, mode) order, so a stopped measurement has every cell partly filled.
    for i in range(args.runs):
        for policy in args.policies:
            for mode in args.modes:
                done = sum(r["policy"] == policy and r["mode"] == mode for r in rows)
                if done > i:
                    continue
                row = one_run(policy, mode, work, warm)
                rows.append(row)
                with log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                (out / "summary.md").write_text(summary(rows, info))
                print(f"{len(rows)}: {policy} {mode} exit {row['returncode']} "
                      f"{row['seconds']:.1f} s", flush=True)
    (out / "summary.md").write_text(summary(rows, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

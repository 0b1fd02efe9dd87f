"""Kill -9 trials: a run killed at random moments and resumed always ends where it would have.

    python -m jaxcredit.bench.kill_resume --trials 20 --out results/kill_resume_cpu.md

One *trial*: the command line trains a small sweep (A2C on CartPole, 2 seeds, 20 chunks, a
checkpoint and a metrics write after every chunk) in a subprocess, which is sent SIGKILL after a
random delay, restarted (``--resume`` once a config exists), killed again, ... until it finishes;
its ``metrics.csv`` is then compared byte for byte with an uninterrupted run's. Compiles come from
a shared persistent cache, so a process spends most of its life between chunks, writing metrics
and checkpoints, where a kill does the most harm. The test suite runs one trial
(``tests/test_crash_safety.py``); this script runs many and counts the kills and the failures.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import tyro

TRAIN = ["train", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps",
         "16", "--total-timesteps", str(4 * 16 * 40), "--num-chunks", "20", "--num-seeds", "2",
         "--eval-every", "2", "--hidden-sizes", "16", "--no-progress"]
UPDATES, MEMBERS = 40, 2


def launch(args: list[str], cache: pathlib.Path, capture: bool = False,
           **env: str) -> subprocess.Popen:
    """``jaxcredit <args>`` in a subprocess sharing the compile cache ``cache``, with the extra
    environment variables ``env``; its stderr (and with ``capture`` its stdout) piped."""
    script = pathlib.Path(sys.executable).parent / "jaxcredit"
    env = dict(os.environ, JAXCREDIT_COMPILE_CACHE=str(cache), **env)
    return subprocess.Popen([str(script), *args], env=env,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def finished(run: pathlib.Path) -> bool:
    """Has the run in ``run`` written every update of every member?"""
    from jaxcredit import runlog  # noqa: PLC0415

    if not (run / runlog.CSV_EXPORT).exists():  # exported last, after the final checkpoint
        return False
    try:
        rows = runlog.read_metrics(run)
    except (ValueError, FileNotFoundError):
        return False
    return len(rows["update"]) == UPDATES * MEMBERS and int(rows["update"].max()) == UPDATES


def reference(folder: pathlib.Path, cache: pathlib.Path) -> pathlib.Path:
    """The uninterrupted run (also fills the compile cache)."""
    whole = folder / "whole"
    proc = launch(TRAIN + ["--out", str(whole)], cache)
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(f"the uninterrupted run failed: {proc.stderr.read()}")
    return whole


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "failed without a message"


def trial(run: pathlib.Path, whole: pathlib.Path, cache: pathlib.Path, rng: random.Random,
          max_kills: int = 12, delay: tuple[float, float] = (1.0, 4.0)) -> dict:
    """Kills the run in ``run`` up to ``max_kills`` times, finishes it, compares with ``whole``.

    Returns ``{"kills": int, "restarts": int, "identical": bool, "error": str}``.
    """
    def command():
        # Killed before it wrote its config, a run has nothing to resume: it starts again.
        if (run / "config.json").exists():
            return ["train", "--out", str(run), "--resume", "--no-progress"]
        return TRAIN + ["--out", str(run)]

    kills = restarts = 0
    for _ in range(max_kills):
        proc = launch(command(), cache)
        restarts += 1
        time.sleep(rng.uniform(*delay))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        if proc.returncode not in (0, -signal.SIGKILL):
            return {"kills": kills, "restarts": restarts, "identical": False,
                    "error": _last_line(proc.stderr.read())}
        if finished(run):
            break
    if not finished(run):
        last = launch(command(), cache)
        restarts += 1
        if last.wait(timeout=600) != 0:
            return {"kills": kills, "restarts": restarts, "identical": False,
                    "error": _last_line(last.stderr.read())}
    identical = (run / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
    return {"kills": kills, "restarts": restarts, "identical": identical, "error": ""}


@dataclasses.dataclass
class Args:
    """Kill -9 trials (module docstring)."""

    trials: int = 10
    """trials, each killed up to --max-kills times"""
    max_kills: int = 12
    """kills per trial at most"""
    seed: int = 0
    """seed of the random kill delays"""
    out: Optional[str] = None
    """a markdown file for the table (default: print only)"""


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.trials < 1 or args.max_kills < 1:
        print("kill_resume: error: --trials and --max-kills must be positive", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        cache = folder / "cache"
        whole = reference(folder, cache)
        for i in range(args.trials):
            result = trial(folder / f"trial{i}", whole, cache, rng, args.max_kills)
            rows.append(result)
            print(f"trial {i}: {result['kills']} kills, {result['restarts']} processes, "
                  f"{'identical' if result['identical'] else 'DIFFERENT ' + result['error']}",
                  flush=True)
    kills = sum(r["kills"] for r in rows)
    failed = sum(not r["identical"] for r in rows)
    table = [f"# Kill -9 trials ({len(rows)} trials, {kills} kills, {failed} failed)", "",
             "A2C on CartPole, 2 seeds, 20 chunks; SIGKILL after a uniform 1-4 s, then resume.",
             "", "| trial | kills | processes | final metrics identical |", "|---|---|---|---|"]
    table += [f"| {i} | {r['kills']} | {r['restarts']} | {'yes' if r['identical'] else 'NO'} |"
              for i, r in enumerate(rows)]
    text = "\n".join(table) + "\n"
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

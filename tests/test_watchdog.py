"""The hang watchdog: a stalled chunk is detected, its stacks are dumped, the process exits with
status 75, and --max-restarts resumes the run to the uninterrupted run's result."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from jaxcredit.watchdog import HANG_EXIT_STATUS, ChunkWatchdog

TRAIN = ["train", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps",
         "16", "--total-timesteps", str(4 * 16 * 12), "--num-chunks", "6", "--num-seeds", "2",
         "--hidden-sizes", "16", "--eval-every", "2", "--watchdog-multiple", "5",
         "--watchdog-floor", "5"]


def _jaxcredit(args, tmp_path, **env):
    script = pathlib.Path(sys.executable).parent / "jaxcredit"
    environment = dict(os.environ, JAXCREDIT_COMPILE_CACHE=str(tmp_path / "cache"),
                       JAXCREDIT_HANG_NATIVE_STACKS="0", **env)
    return subprocess.run([str(script), *args], env=environment, capture_output=True,
                          text=True, timeout=600)


def test_a_stalled_chunk_is_dumped_and_the_run_resumed_to_the_same_result(tmp_path):
    whole = _jaxcredit(TRAIN + ["--out", str(tmp_path / "whole")], tmp_path)
    assert whole.returncode == 0, whole.stderr
    # The 4th chunk stalls: the watchdog dumps the stacks and ends the process (exit status
    # HANG_EXIT_STATUS, which the parent reads as a hang), the parent resumes the run from its
    # last checkpoint, and the run finishes with the uninterrupted run's metrics.
    run = tmp_path / "restarted"
    done = _jaxcredit(TRAIN + ["--out", str(run), "--max-restarts", "2"], tmp_path,
                      JAXCREDIT_TEST_STALL_AT_CHUNK="4")
    assert done.returncode == 0, done.stderr
    assert f"exiting with status {HANG_EXIT_STATUS}" in done.stdout + done.stderr
    assert "hung; resuming it from its last checkpoint" in done.stderr
    dumps = list(run.glob("hang-*.txt"))
    assert len(dumps) == 1
    text = dumps[0].read_text()
    assert "made no progress" in text and "maybe_stall" in text  # the stalled thread's stack
    assert (run / "metrics.csv").read_bytes() == (tmp_path / "whole" / "metrics.csv").read_bytes()


def test_deadline_is_the_larger_of_floor_and_multiple_of_the_longest_chunk(tmp_path):
    watchdog = ChunkWatchdog(tmp_path, multiple=10, floor=5, native=False)
    try:
        assert watchdog.deadline() is None  # nothing measured: the first chunk is not watched
        watchdog.chunk_started()
        watchdog.chunk_finished()
        assert watchdog.deadline() == 5  # a quick chunk: the floor
        watchdog._longest = 2.0
        assert watchdog.deadline() == 20
    finally:
        watchdog.close()
    # A resumed process reads the longest chunk of the earlier ones.
    again = ChunkWatchdog(tmp_path, multiple=10, floor=0, native=False)
    try:
        assert again.deadline() is not None and again.deadline() < 5
    finally:
        again.close()

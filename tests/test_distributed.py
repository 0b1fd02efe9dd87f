"""Multi-process sweeps on JAX's distributed runtime (docs/scaling.md).

A sweep run as 2 local processes × 2 CPU devices each, stopped after its first chunk and resumed
from the checkpoint, gives bitwise the per-member metrics of the same 4 devices in one process,
and the 1-device metrics within 1e-5; a run directory that process 0 cannot claim stops every
process with its error; bad multi-process flags are one-line errors before the runtime starts."""

import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from jaxcredit import cli, distributed, runlog

# 2 settings × 4 seeds = 8 members: two per device on 4 devices, so every device runs the same
# batched program as the single device does (docs/engine.md) and the comparison can be bitwise.
SWEEP = ["sweep", "--algo", "a2c", "--env", "DelayedEffect", "--num-envs", "4", "--num-steps",
         "16", "--total-timesteps", "256", "--hidden-sizes", "8", "--eval-every", "0",
         "--num-chunks", "2", "--grid", "lr=1e-3,3e-3", "--num-seeds", "4", "--no-progress",
         "--watchdog-multiple", "0"]
TIMEOUT = 240  # seconds per launch; a hung process fails the test instead of freezing it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(devices: int) -> dict:
    """The test's environment with ``devices`` CPU devices per process."""
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    return dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")


def _start(argv: list[str], devices: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxcredit.cli", *argv], env=_env(devices),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    """Waits for every process (killing them all on a timeout); returns their output."""
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT)[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"a process did not finish within {TIMEOUT} s")
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-3000:]
    return outputs


def _two_processes(argv: list[str]) -> list[subprocess.Popen]:
    """``argv`` as processes 0 and 1 of a 2-process run on a free local port."""
    address = f"127.0.0.1:{_free_port()}"
    return [_start([*argv, "--coordinator", address, "--num-processes", "2", "--process-id",
                    str(i)], devices=2) for i in range(2)]


def _metrics(out) -> dict[str, np.ndarray]:
    """Per-member, per-update metrics, sorted by (setting, seed, update).

    Read through ``runlog.read_metrics`` only (the file format is runlog's business).
    """
    table = runlog.read_metrics(out / "metrics.csv")
    order = np.lexsort((table["update"], table["seed"], table["hparam_index"]))
    return {name: np.asarray(values)[order] for name, values in table.items()}


def _max_difference(a: dict, b: dict) -> float:
    return max(float(np.nanmax(np.abs(a[name].astype(float) - b[name].astype(float))))
               for name in a)


def test_two_processes_match_one_process_and_resume(tmp_path):
    two, four, one = tmp_path / "two", tmp_path / "four", tmp_path / "one"
    # The single-process references (the same 4 devices in one process; 1 device) run alongside
    # the first half of the 2-process run.
    references = [_start([*SWEEP, "--out", str(four)], devices=4),
                  _start([*SWEEP, "--out", str(one)], devices=1)]
    _finish(_two_processes([*SWEEP, "--out", str(two), "--stop-after-chunks", "1"]) + references)
    first = _metrics(two)
    assert sorted(set(first["update"].tolist())) == [1, 2]  # one chunk of 2 updates
    assert (two / "checkpoints" / "2").is_dir()

    outputs = _finish(_two_processes(["sweep", "--out", str(two), "--resume", "--no-progress"]))
    assert "finished, 8 runs" in outputs[0]
    assert "finished" not in outputs[1]  # only process 0 reports
    got = _metrics(two)
    assert len(got["update"]) == 8 * 4
    # Same devices, split over 2 processes and resumed from a checkpoint: the same numbers.
    same_devices = _metrics(four)
    assert sorted(got) == sorted(same_devices)
    assert all(np.array_equal(got[name], same_devices[name], equal_nan=True)
               for name in got), _max_difference(got, same_devices)
    # 1 device runs all 8 members in one batch instead of 2 per device, which changes float32
    # rounding (measured: at most 4.8e-7).
    single = _metrics(one)
    assert _max_difference(got, single) <= 1e-5


def test_a_refused_run_directory_stops_every_process(tmp_path):
    """Process 0 alone claims the run directory; when it cannot, every process exits with its
    error instead of waiting for it in the next collective."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("an earlier run")
    procs = _two_processes([*SWEEP, "--out", str(out)])
    outputs = [proc.communicate(timeout=TIMEOUT)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [2, 2], outputs
    assert all("already exists; pass --resume" in output for output in outputs), outputs
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("argv, message", [
    (["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"],
     "HOST:PORT"),
    (["--coordinator", "localhost:99999", "--num-processes", "2", "--process-id", "0"],
     "port in 1-65535"),
    (["--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "2"],
     "process_id must lie in [0, 1]"),
    (["--coordinator", "localhost:1234", "--num-processes", "0", "--process-id", "0"],
     "num_processes must be at least 1"),
    (["--coordinator", "localhost:1234", "--num-processes", "2"], "missing process_id"),
    (["--distributed", "--process-id", "1"], "it takes no process_id"),
    (["--local-device-ids", "0", "1"], "--local-device-ids is for a multi-process run"),
    (["--distributed", "--max-restarts", "2"], "cannot rejoin"),
])
def test_bad_multiprocess_flags_are_one_line_errors(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", *argv, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()  # nothing written, no runtime started


def test_multiprocess_run_needs_out(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--distributed"])
    assert "needs --out" in capsys.readouterr().err


def test_check_arguments_accepts_a_consistent_layout():
    distributed.check_arguments("node-0.cluster:1234", 4, 3, auto=False)
    distributed.check_arguments("[::1]:1234", 1, 0, auto=False)
    distributed.check_arguments(None, None, None, auto=True)
    with pytest.raises(ValueError, match="together"):
        distributed.check_arguments(None, None, None, auto=False)

"""tests/crash_rerun.py: a worker that segfaults neither freezes ``make test`` nor fails it,
unless the same test crashes twice."""

import os
import subprocess
import sys
from pathlib import Path

SEGFAULT = "import ctypes; ctypes.string_at(0)"

FILES = {
    "test_first_crashes_once.py": f"""
import pathlib
def test_crash_once():
    flag = pathlib.Path(__file__).with_suffix(".crashed")
    if not flag.exists():
        flag.write_text("1")
        {SEGFAULT}
def test_after(): pass
""",
    "test_crashes_always.py": f"""
def test_before(): pass
def test_crash_always():
    {SEGFAULT}
def test_after(): pass
""",
    "test_plain.py": "def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n",
    # The crash is the last test of the last file: xdist 3.8's own scheduler freezes here.
    "test_last_crashes_once.py": f"""
import pathlib
def test_a(): pass
def test_b(): pass
def test_crash_once():
    flag = pathlib.Path(__file__).with_suffix(".crashed")
    if not flag.exists():
        flag.write_text("1")
        {SEGFAULT}
""",
}


def _pytest(folder, *options):
    """``pytest -n 2 --dist loadfile`` with the plugin over the FILES written to ``folder``."""
    for name, text in FILES.items():
        (folder / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", *options,
         "-p", "crash_rerun", "-p", "no:cacheprovider", *FILES],
        cwd=folder, env=env, capture_output=True, text=True, timeout=60)


def test_crashed_tests_run_once_more_and_a_second_crash_fails(tmp_path):
    run = _pytest(tmp_path)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "1 failed, 10 passed, 3 rerun" in out, out
    assert "FAILED test_crashes_always.py::test_crash_always" in out, out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "worker crashed, run again once" in line)
    summary = [line for line in lines[start + 1:start + 4]]
    assert sorted(summary) == sorted([
        "test_last_crashes_once.py::test_crash_once", "test_first_crashes_once.py::test_crash_once",
        "test_crashes_always.py::test_crash_always"]), out


def test_no_rerun_once_no_worker_can_replace_the_crashed_one(tmp_path):
    """With one restart allowed, the first crash is a rerun and the next crash a failure: a test
    queued again with no worker to run it must not leave the suite green."""
    run = _pytest(tmp_path, "--max-worker-restart", "1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 rerun" in run.stdout and "failed" in run.stdout, run.stdout

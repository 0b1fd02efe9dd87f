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


class _Worker:
    """A worker as the scheduler sees it: it runs the tests it was sent in order, and starts one
    only while it holds a second or has been told to finish (as xdist's workers do)."""

    def __init__(self, name):
        self.gateway, self.shutting_down, self.queue = type("G", (), {"id": name})(), False, []

    def send_runtest_some(self, indices):
        self.queue.extend(indices)

    def shutdown(self):
        self.shutting_down = True

    def can_run(self):
        return len(self.queue) >= 2 or (self.shutting_down and self.queue)


def _scheduler(ids, workers):
    from types import SimpleNamespace

    from crash_rerun import CrashSafeLoadFileScheduling

    config = SimpleNamespace(getvalue={"tx": ["2*popen"], "dist": "loadfile"}.get,
                             option=SimpleNamespace(loadscopereorder=False))
    sched = CrashSafeLoadFileScheduling(config)
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, ids)
    return sched


def test_a_file_given_in_two_parts_is_kept_whole_and_the_crash_read_in_sending_order():
    """Two parts of one file sent to a worker, later part first, with another file between: the
    worker holds both parts, and the test it was running when it crashed is the first one sent
    and not finished (not the first in the file)."""
    ids = ["test_f.py::test_0", "test_f.py::test_1", "test_g.py::test_0", "test_g.py::test_1"]
    worker = _Worker("gw0")
    sched = _scheduler(ids, [worker])
    for unit in ({"test_f.py::test_1": False}, {"test_g.py::test_0": False,
                                                "test_g.py::test_1": False},
                 {"test_f.py::test_0": False}):
        sched.workqueue[sched._split_scope(next(iter(unit)))] = unit
        sched._assign_work_unit(worker)
    assert worker.queue == [1, 2, 3, 0]
    assert set(sched.assigned_work[worker]["test_f.py"]) == {ids[0], ids[1]}
    sched.mark_test_complete(worker, 1)
    assert sched.remove_node(worker) == ids[2]  # running test_g.py::test_0
    assert dict(sched.workqueue) == {"test_g.py": {ids[3]: False}, "test_f.py": {ids[0]: False}}


def test_the_scheduler_finds_the_crashed_test_and_loses_none_when_crashes_overlap():
    """Pure Python, no subprocess: a worker crashes, and the other crashes while the first one's
    replacement is still collecting; a file split between workers is put back together. Every
    test ends finished, or crashed twice, and the crashed test named is the one running."""
    ids = [f"test_{f}.py::test_{i}" for f in "fghk" for i in range(3)]
    workers = [_Worker("gw0"), _Worker("gw1")]
    sched = _scheduler(ids, workers)
    sched.schedule()
    finished, crashed = [], []

    def run_one(w):
        finished.append(ids[w.queue[0]])
        sched.mark_test_complete(w, w.queue.pop(0))

    def crash(w):
        running = ids[w.queue[0]]
        assert sched.remove_node(w) == running
        if running not in crashed:
            sched.mark_test_pending(running)  # pytest_handlecrashitem: run it again once
        crashed.append(running)
        replacement = _Worker(w.gateway.id + "'")
        sched.add_node(replacement)  # ready, still collecting
        return replacement

    gw0, gw1 = workers
    run_one(gw0)  # test_f.py::test_0
    gw2 = crash(gw0)  # on test_f.py::test_1
    gw3 = crash(gw1)  # on test_g.py::test_0, while gw2 collects
    for w in (gw2, gw3):
        sched.add_node_collection(w, ids)
        sched.schedule()
    run_one(gw2)
    gw4 = crash(gw2)  # whatever it runs second; a split file's test included
    sched.add_node_collection(gw4, ids)
    sched.schedule()
    live = [gw3, gw4]
    while any(w.queue for w in live):
        ready = [w for w in live if w.can_run()]
        assert ready, "the workers wait for each other"
        run_one(ready[0])
    assert sched.tests_finished and all(w.shutting_down for w in live)
    twice = {t for t in crashed if crashed.count(t) == 2}
    assert sorted(set(finished) | twice) == sorted(ids)
    assert len(finished) + len(twice) == len(ids)  # nothing ran twice but the crashed ones

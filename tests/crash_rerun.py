"""A pytest plugin for ``make test``'s workers: a test that takes its worker down (a segfault in
native code, or a hang that pytest-timeout ends) runs once more instead of freezing the suite.

Two things go wrong without it, with pytest-xdist 3.8 and ``--dist loadfile``:

- **The suite freezes.** xdist's file scheduler puts the crashed worker's whole file back in the
  queue, finished tests included, and gives the replacement worker one file at a time. When the
  crash was the file's last test, the replacement gets a single test, and a worker only starts a
  test once it holds a second one or is told to shut down, so both sides wait for ever
  (pytest-xdist issues 784, 1323 and 1327; fixed upstream after 3.8). CI then ends at its wall-clock
  limit with nothing reported. ``python -m pytest -n 2 --dist loadfile`` over four three-test
  files, one of whose last tests segfaults, froze here every time.
- **One crash fails the suite.** XLA:CPU (jaxlib 0.10.2 and 0.11.2) crashes now and then in
  programs that run fine again, inside the compilation cache the suite shares between its
  processes (tests/conftest.py and docs/tvt.md name the cases seen; the last whole-suite run under
  0.11.2 had two such crashes). Such a crash is the
  library's, not the test's, so the test is run once more (on whichever worker takes it next); a
  second crash of the same test fails it, so a test that crashes every time is still caught. A
  test that hangs is the same case: pytest-timeout's thread method ends the worker, so a test
  that hangs twice fails and one that hangs once passes on its second run.

The scheduler below is xdist's file scheduler with the crash path mended:

- it records the order in which it sent each worker its tests (a worker runs them in that
  order), so the crashed test is the first one sent and not finished;
- only the tests still to run go back in the queue, merged with what is queued for their file;
- a file's tests given to a worker that already holds some of that file are added to them, not
  written over them;
- a worker is topped up until it holds more than two tests or the queue is empty (then it is told
  to finish), and never before it has reported its collection.

``pytest_handlecrashitem`` marks the first crash of a test ``rerun`` (an ``R`` in the progress
line and a line in the summary) and queues the test again, unless no worker will replace the
crashed one; a test queued again that never finishes fails the session.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadFileScheduling

CRASHED_ONCE: list[str] = []  # the tests given a second run, in the order they crashed
RERUN_FINISHED: set[str] = set()  # those whose second run has ended


class CrashSafeLoadFileScheduling(LoadFileScheduling):
    """``--dist loadfile`` whose crash path neither loses tests nor freezes."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.sent: dict = {}  # node -> the node ids sent to it, in order

    def _queue_first(self, tests: list[str]) -> None:
        """Puts ``tests`` (in their order) at the front of the queue, each file's with what is
        queued for that file already."""
        by_scope: dict[str, dict[str, bool]] = {}
        for nodeid in tests:
            by_scope.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        for scope in reversed(list(by_scope)):
            self.workqueue[scope] = {**by_scope[scope], **self.workqueue.get(scope, {})}
            self.workqueue.move_to_end(scope, last=False)

    def _assign_work_unit(self, node) -> None:
        scope, work_unit = self.workqueue.popitem(last=False)
        self.assigned_work.setdefault(node, {}).setdefault(scope, {}).update(work_unit)
        pending = [nodeid for nodeid, done in work_unit.items() if not done]
        self.sent.setdefault(node, []).extend(pending)
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid in pending])

    def remove_node(self, node):
        workload = self.assigned_work.pop(node)
        sent = self.sent.pop(node, [])
        unfinished = [nodeid for nodeid in sent
                      if not workload[self._split_scope(nodeid)][nodeid]]
        if not unfinished:
            return None
        crashitem, rest = unfinished[0], unfinished[1:]
        self._queue_first(rest)
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def mark_test_pending(self, item: str) -> None:
        """Queues a crashed test again, first (called by ``pytest_handlecrashitem``)."""
        self._queue_first([item])
        for node in self.assigned_work:
            self._reschedule(node)

    def _reschedule(self, node) -> None:
        # A replacement worker may still be collecting: it gets work once it has reported.
        if node.shutting_down or node not in self.registered_collections:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadfile":
        return CrashSafeLoadFileScheduling(config, log)
    return None


def pytest_handlecrashitem(crashitem, report, sched):
    if crashitem in CRASHED_ONCE:
        RERUN_FINISHED.add(crashitem)  # its second run ended in a crash: a failure
        return
    dsession = sched.config.pluginmanager.getplugin("dsession")
    limit = getattr(dsession, "_max_worker_restart", None)
    if limit is not None and getattr(dsession, "_failed_nodes_count", 0) + 1 > limit:
        return  # no worker will replace this one: the report stays a failure
    try:
        sched.mark_test_pending(crashitem)
    except NotImplementedError:  # loadscope/loadgroup: xdist's own schedulers cannot
        return
    CRASHED_ONCE.append(crashitem)
    report.outcome = "rerun"


def pytest_runtest_logreport(report):
    if report.when == "teardown" and report.nodeid in CRASHED_ONCE:
        RERUN_FINISHED.add(report.nodeid)


def pytest_sessionfinish(session):
    """A test queued again that never ran again (the run stopped first) fails the session."""
    if (CRASHED_ONCE and not hasattr(session.config, "workerinput")
            and set(CRASHED_ONCE) - RERUN_FINISHED and session.exitstatus == pytest.ExitCode.OK):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_teststatus(report):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter):
    if CRASHED_ONCE:
        terminalreporter.section("tests whose worker crashed, run again once", sep="-")
        for nodeid in CRASHED_ONCE:
            ran = "" if nodeid in RERUN_FINISHED else "  (not run again: the suite fails)"
            terminalreporter.line(nodeid + ran)

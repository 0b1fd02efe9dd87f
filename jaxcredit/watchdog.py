"""A hang watchdog for the host loop: a chunk that makes no progress ends the process.

A compiled chunk that freezes (an XLA:CPU deadlock, a wedged device) blocks the host loop's
thread forever, and nothing inside the process can interrupt it. The watchdog is a daemon thread
that knows how long chunks take: once a chunk has run for longer than

    max(floor, multiple × the longest chunk seen so far)

it writes every thread's Python stack (``faulthandler``) and, where ``gdb`` is installed, every
thread's native stack to ``<run>/hang-<time>.txt`` and ends the process with exit status
:data:`HANG_EXIT_STATUS`. ``jaxcredit train --max-restarts K`` then resumes the run from its last
checkpoint (``jaxcredit.cli``), which continues it exactly.

Chunk durations are kept in ``<run>/chunk_seconds.json``, so a resumed process watches from its
first chunk; a fresh run's first chunk has no measure yet and is not watched.

Test hook: ``JAXCREDIT_TEST_STALL_AT_CHUNK=k`` makes the k-th chunk (counting from 1 over the
whole run) sleep instead of returning, once per run directory (a marker file remembers it).
``JAXCREDIT_HANG_NATIVE_STACKS=0`` skips the gdb dump (which can take a minute).
"""

from __future__ import annotations

import faulthandler
import json
import os
import pathlib
import shutil
import subprocess
import threading
import time
from typing import Optional

HANG_EXIT_STATUS = 75  # EX_TEMPFAIL: try again (from the last checkpoint)
STALL_HOOK = "JAXCREDIT_TEST_STALL_AT_CHUNK"
DURATIONS_FILE = "chunk_seconds.json"
STALL_MARKER = ".test-stalled"


class ChunkWatchdog:
    """Watches the chunks of one run (module docstring).

    Args:
      out: the run directory (dumps and chunk durations go there).
      multiple, floor: the deadline is ``max(floor, multiple × longest chunk)`` seconds.
      native: also dump native stacks with gdb when it is installed.
    """

    def __init__(self, out: pathlib.Path, multiple: float, floor: float, native: bool = True):
        self.out = pathlib.Path(out)
        self.multiple, self.floor, self.native = float(multiple), float(floor), native
        self._longest = self._read_longest()
        self._started: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="jaxcredit-watchdog",
                                        daemon=True)
        self._thread.start()

    def _read_longest(self) -> Optional[float]:
        try:
            return float(json.loads((self.out / DURATIONS_FILE).read_text())["longest"])
        except (OSError, ValueError, KeyError):
            return None

    def deadline(self) -> Optional[float]:
        """Seconds a chunk may run, or None before any chunk has been measured."""
        if self._longest is None:
            return None
        return max(self.floor, self.multiple * self._longest)

    def chunk_started(self) -> None:
        self._started = time.monotonic()

    def chunk_finished(self) -> None:
        took = time.monotonic() - self._started
        self._started = None
        self._longest = max(self._longest or 0.0, took)
        tmp = self.out / (DURATIONS_FILE + ".tmp")
        tmp.write_text(json.dumps({"longest": self._longest}))
        tmp.replace(self.out / DURATIONS_FILE)

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            started, limit = self._started, self.deadline()
            if started is not None and limit is not None and time.monotonic() - started > limit:
                self._dump(time.monotonic() - started, limit)
                os._exit(HANG_EXIT_STATUS)

    def _dump(self, stalled: float, limit: float) -> None:
        path = self.out / f"hang-{time.strftime('%Y%m%dT%H%M%S')}.txt"
        with path.open("w") as f:
            f.write(f"jaxcredit watchdog: a chunk made no progress for {stalled:.0f} s (limit "
                    f"{limit:.0f} s = max({self.floor:g}, {self.multiple:g} x the longest chunk, "
                    f"{self._longest:.1f} s)); pid {os.getpid()}\n\nPython stacks:\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
            native = self.native and os.environ.get("JAXCREDIT_HANG_NATIVE_STACKS") != "0"
            gdb = shutil.which("gdb") if native else None
            if gdb:
                f.write("\nNative stacks (gdb):\n")
                f.flush()
                try:
                    subprocess.run([gdb, "-p", str(os.getpid()), "-batch", "-ex",
                                    "thread apply all bt"], stdout=f, stderr=subprocess.STDOUT,
                                   timeout=120, check=False)
                except (OSError, subprocess.TimeoutExpired) as err:
                    f.write(f"(gdb failed: {err})\n")
        print(f"jaxcredit: a chunk hung for {stalled:.0f} s; stacks in {path}; exiting with "
              f"status {HANG_EXIT_STATUS} (resume from the last checkpoint)", flush=True)


def maybe_stall(out: pathlib.Path, chunk: int) -> None:
    """The test hook (module docstring): sleeps forever at chunk ``chunk`` (1-based), once."""
    target = os.environ.get(STALL_HOOK)
    marker = pathlib.Path(out) / STALL_MARKER
    if target and int(target) == chunk and not marker.exists():
        marker.write_text("stalled once")
        while True:
            time.sleep(3600)

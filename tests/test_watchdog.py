"""The hang watchdog's deadline. The whole path (a stalled chunk detected, its stacks dumped, the
process ended with status 75, and --max-restarts resuming the run to the uninterrupted run's
result) is tests/test_crash_safety.py's, which shares its reference run with the kill -9 test."""

from __future__ import annotations


from jaxcredit.watchdog import ChunkWatchdog


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

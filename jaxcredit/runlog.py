"""A run directory on disk: ``config.json`` and a tidy ``metrics.csv``.

``metrics.csv`` has one row per (member, update): ``hparam_index, seed, update, env_steps`` and
one column per metric. Floats are written with ``repr`` of the float32 value, which round-trips
exactly, so two runs can be compared bit for bit from their files. Missing values (no episode
ended in an update) are written as ``nan``.
"""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import pathlib
import platform
from typing import Any, Mapping, Sequence

import numpy as np

KEY_COLUMNS = ("hparam_index", "seed", "update", "env_steps")
_VERSIONED = ("jaxcredit", "jax", "jaxlib", "flax", "optax", "chex", "gymnax", "rlax",
              "orbax-checkpoint", "tyro", "numpy")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_json(path: pathlib.Path, data: Mapping[str, Any]) -> None:
    """Writes atomically (temp file + rename), so a crash never leaves half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=_jsonable) + "\n")
    tmp.replace(path)


def _jsonable(x: Any) -> Any:
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def read_json(path: pathlib.Path) -> dict:
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None


class MetricsWriter:
    """Appends per-update metric rows of a population to ``metrics.csv``.

    Args:
      path: the CSV file (created with a header if missing).
      metric_names: metric columns, in order.
    """

    def __init__(self, path: pathlib.Path, metric_names: Sequence[str]):
        self.path = pathlib.Path(path)
        self.columns = list(KEY_COLUMNS) + list(metric_names)
        if not self.path.exists():
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.columns)
        else:
            with self.path.open(newline="") as f:
                header = next(csv.reader(f), None)
            if header != self.columns:
                raise ValueError(f"{self.path} has columns {header}, expected {self.columns}")

    def append(self, metrics: Mapping[str, np.ndarray], hparam_index: np.ndarray,
               seed_index: np.ndarray, first_update: int, steps_per_update: int) -> None:
        """Appends ``[P, U]`` metrics for updates ``first_update + 1 .. first_update + U``."""
        names = self.columns[len(KEY_COLUMNS):]
        arrays = [np.asarray(metrics[k]) for k in names]
        members, updates = arrays[0].shape
        with self.path.open("a", newline="") as f:
            writer = csv.writer(f)
            for p in range(members):
                for u in range(updates):
                    update = first_update + u + 1
                    writer.writerow(
                        [int(hparam_index[p]), int(seed_index[p]), update,
                         update * steps_per_update] + [_fmt(a[p, u]) for a in arrays])

    def truncate(self, last_update: int) -> None:
        """Drops rows after ``last_update`` (written after the last checkpoint of a killed run)."""
        rows = read_rows(self.path)
        # A process killed while appending leaves a partial last row: drop incomplete rows.
        keep = [r for r in rows if all(r.get(c) not in (None, "") for c in self.columns)
                and int(r["update"]) <= last_update]
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            writer.writerows(keep)
        tmp.replace(self.path)


def _fmt(x: Any) -> str:
    if np.issubdtype(np.asarray(x).dtype, np.integer) or np.asarray(x).dtype == bool:
        return str(int(x))
    return repr(float(x))


def read_rows(path: pathlib.Path) -> list[dict]:
    with pathlib.Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def read_metrics(path: pathlib.Path) -> dict[str, np.ndarray]:
    """Reads ``metrics.csv`` into columns (ints for key columns, float64 otherwise)."""
    try:
        rows = read_rows(path)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if not rows:
        return {}
    return {k: np.asarray([r[k] for r in rows], np.int64 if k in KEY_COLUMNS else np.float64)
            for k in rows[0]}


LOCK_FILE = ".writer.lock"


def lock_run_dir(out: pathlib.Path):
    """Takes the run directory's single-writer lock; returns the open lock file (keep it open).

    An exclusive ``flock`` on ``out/.writer.lock``: a second process that tries to write the same
    run gets a one-line ValueError instead of interleaving metrics and checkpoints. The operating
    system drops the lock when the holder exits, however it exits (``kill -9`` included), so a
    killed run can always be resumed.
    """
    import fcntl  # noqa: PLC0415 (POSIX only)

    path = pathlib.Path(out) / LOCK_FILE
    handle = path.open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ValueError(f"{out} is being written by {holder}; wait for it to finish or choose "
                         "another --out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle

"""A run directory on disk: ``config.json`` and the per-update metrics, columnar.

The metrics are the record of a run: one row per (member, update) with the key columns
``hparam_index, seed, update, env_steps`` and one column per metric, stored as one Parquet file per
compiled chunk under ``<out>/metrics/`` (``updates-<first>-<last>.parquet``, zstd-compressed,
values in their own dtype: float32 metrics stay float32, so two runs compare bit for bit). A chunk's
file is written to a temporary name and renamed, so a process killed mid-write leaves either the
whole chunk or nothing; on resume, chunk files past the last checkpoint are removed.

``metrics.csv`` is an export of the same rows (``export_csv``; the host loop writes it at the end of
each call unless told not to): convenient for small runs, 5-10x the Parquet size for large sweeps.
Missing values (no episode ended in an update) are NaN in both.
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
METRICS_DIR = "metrics"
CSV_EXPORT = "metrics.csv"

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
    """Writes a population's per-update metrics into ``<run_dir>/metrics/``, one file per chunk.

    Args:
      run_dir: the run directory.
      metric_names: metric columns, in order (checked against chunks already written).
    """

    def __init__(self, run_dir: pathlib.Path, metric_names: Sequence[str]):
        import pyarrow.parquet as pq  # noqa: PLC0415 (kept out of ``import jaxcredit``)

        self.folder = pathlib.Path(run_dir) / METRICS_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.columns = list(KEY_COLUMNS) + list(metric_names)
        written = chunk_files(self.folder)
        if written:
            header = pq.read_schema(written[0]).names
            if header != self.columns:
                raise ValueError(f"{self.folder} has columns {header}, expected {self.columns}")

    def append(self, metrics: Mapping[str, np.ndarray], hparam_index: np.ndarray,
               seed_index: np.ndarray, first_update: int, steps_per_update: int) -> None:
        """Writes ``[P, U]`` metrics for updates ``first_update + 1 .. first_update + U``.

        Rows are member-major (every update of member 0, then member 1, ...), as in the CSV.
        """
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415

        names = self.columns[len(KEY_COLUMNS):]
        arrays = [np.asarray(metrics[k]) for k in names]
        members, updates = arrays[0].shape
        update = first_update + 1 + np.arange(updates, dtype=np.int64)
        table = pa.table({
            "hparam_index": np.repeat(np.asarray(hparam_index, np.int32), updates),
            "seed": np.repeat(np.asarray(seed_index, np.int32), updates),
            "update": np.tile(update, members),
            "env_steps": np.tile(update * steps_per_update, members),
            **{k: (a.astype(np.int8) if a.dtype == bool else a).reshape(-1)
               for k, a in zip(names, arrays)},
        })
        path = self.folder / f"updates-{first_update + 1:09d}-{first_update + updates:09d}.parquet"
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)  # atomic: a killed write leaves no partial chunk

    def truncate(self, last_update: int) -> None:
        """Drops chunks after ``last_update`` (written after the last checkpoint of a killed run)
        and any half-written temporary file."""
        for tmp in self.folder.glob("*.tmp"):
            tmp.unlink()
        for path in chunk_files(self.folder):
            if _chunk_range(path)[1] > last_update:
                path.unlink()


def chunk_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The chunk files of a metrics folder, in update order."""
    return sorted(pathlib.Path(folder).glob("updates-*.parquet"))


def _chunk_range(path: pathlib.Path) -> tuple[int, int]:
    first, last = path.stem.split("-")[1:3]
    return int(first), int(last)


def _metrics_folder(run: pathlib.Path) -> pathlib.Path | None:
    """The Parquet folder of a run, given the run directory or its ``metrics.csv`` path."""
    run = pathlib.Path(run)
    base = run.parent if run.suffix == ".csv" else run
    folder = base / METRICS_DIR
    return folder if folder.is_dir() else None


def read_table(run: pathlib.Path):
    """All metric rows of a run as one ``pyarrow.Table`` (chunks in update order)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    folder = _metrics_folder(run)
    if folder is None:
        raise ValueError(f"{run} holds no metrics (no {METRICS_DIR}/ folder)")
    files = chunk_files(folder)
    if not files:
        return None
    try:
        return pa.concat_tables([pq.read_table(f) for f in files])
    except (OSError, pa.ArrowException) as err:
        raise ValueError(f"cannot read the metrics in {folder}: {err}") from None


def export_csv(run: pathlib.Path, path: pathlib.Path | None = None) -> pathlib.Path | None:
    """Writes the run's metrics as CSV (default ``<run>/metrics.csv``); None if it has no rows.

    Written to a temporary name and renamed, like every file of a run.
    """
    import pyarrow.csv as pcsv  # noqa: PLC0415

    table = read_table(run)
    path = pathlib.Path(run) / CSV_EXPORT if path is None else pathlib.Path(path)
    if table is None:
        return None
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:  # an unquoted header, as csv.writer writes it
        csv.writer(f).writerow(table.column_names)
    with tmp.open("ab") as f:
        pcsv.write_csv(table, f, pcsv.WriteOptions(include_header=False,
                                                   quoting_style="needed"))
    os.replace(tmp, path)
    return path


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of a CSV file (an export, or a run written before the columnar format)."""
    with pathlib.Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def read_metrics(run: pathlib.Path) -> dict[str, np.ndarray]:
    """A run's metrics as columns (int64 key columns, float64 metrics).

    ``run`` is the run directory (or its ``metrics.csv`` path); the Parquet chunks are read when
    present, else the CSV (runs written before the columnar format).
    """
    run = pathlib.Path(run)
    if _metrics_folder(run) is not None:
        table = read_table(run)
        if table is None:
            return {}
        return {k: np.asarray(table.column(k).to_numpy(),
                              np.int64 if k in KEY_COLUMNS else np.float64)
                for k in table.column_names}
    csv_path = run if run.suffix == ".csv" else run / CSV_EXPORT
    try:
        rows = read_rows(csv_path)
    except OSError as err:
        raise ValueError(f"cannot read {csv_path}: {err}") from None
    if not rows:
        return {}
    return {k: np.asarray([r[k] for r in rows], np.int64 if k in KEY_COLUMNS else np.float64)
            for k in rows[0]}


def has_metrics(run: pathlib.Path) -> bool:
    """Whether ``run`` is a run directory with metrics (either format)."""
    run = pathlib.Path(run)
    return _metrics_folder(run) is not None or (run / CSV_EXPORT).exists()


LOCK_FILE = ".writer.lock"


def lock_run_dir(out: pathlib.Path):
    """Takes the run directory's single-writer lock; returns the open lock file (keep it open).

    An exclusive ``flock`` on ``out/.writer.lock``: a second process that tries to write the same
    run gets a one-line ValueError instead of interleaving metrics and checkpoints. The operating
    system drops the lock when the holder exits, however it exits (``kill -9`` included), so a
    killed run can always be resumed.
    """
    handle = _flock(pathlib.Path(out), "a+")
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def check_unlocked(out: pathlib.Path) -> None:
    """Raises :func:`lock_run_dir`'s ValueError if another process holds ``out``'s lock.

    A check, not a claim (the lock is let go at once): it lets a run that would be refused say so
    before it spends minutes compiling. :func:`lock_run_dir` checks again when it claims.
    """
    if (pathlib.Path(out) / LOCK_FILE).exists():
        _flock(pathlib.Path(out), "r").close()


def _flock(out: pathlib.Path, mode: str):
    """``out``'s lock file opened with ``mode`` and exclusively locked (without waiting)."""
    import fcntl  # noqa: PLC0415 (POSIX only)

    handle = (out / LOCK_FILE).open(mode)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ValueError(f"{out} is being written by {holder}; wait for it to finish or choose "
                         "another --out") from None
    return handle

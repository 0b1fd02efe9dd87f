"""Orbax checkpoints of a whole (population) train state plus a small JSON record.

Typed PRNG keys are stored as their raw ``key_data`` (orbax's standard handler saves plain arrays)
and re-wrapped on restore using the template's key implementation. Restoring onto a template with
shardings places every shard directly on its device.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import signal
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


class _OwnWaitFilter(logging.Filter):
    """Drops orbax's "Waiting for previous save to complete took N seconds" warning: the
    checkpointer waits for each save right after starting it (so that the checkpoint is on disk
    before the run continues), and orbax counts that wait as the next save waiting for this one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Waiting for previous save to complete")


logging.getLogger("absl").addFilter(_OwnWaitFilter())


def _is_key(x: Any) -> bool:
    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key)


def _unwrap_keys(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _abstract(template: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of the stored form of ``template``."""
    def leaf(x):
        if _is_key(x):
            x = jax.eval_shape(jax.random.key_data, x) if isinstance(x, jax.ShapeDtypeStruct) \
                else jax.random.key_data(x)
        sharding = getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)
    return jax.tree.map(leaf, template)


@contextlib.contextmanager
def _sigint_deferred():
    """Holds SIGINT back inside the block and raises KeyboardInterrupt after it, if one came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class Checkpointer:
    """Saves and restores ``(state, record)`` pairs under ``directory/<step>``.

    Args:
      directory: where checkpoints live (created if missing).
      max_to_keep: number of most recent checkpoints kept (None: all). Orbax deletes older ones
        only after the new one is complete, so one is enough to resume after a crash.
    """

    def __init__(self, directory: str | pathlib.Path, max_to_keep: int | None = 1):
        self.directory = pathlib.Path(directory).absolute()
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        )

    def save(self, step: int, state: Any, record: dict) -> None:
        """Writes the checkpoint for ``step`` and waits until it is on disk.

        Ctrl-C during the write is held back until the checkpoint is complete (then raised), so
        an interrupted run keeps a whole last checkpoint and orbax's writer threads are not cut
        off halfway (they printed a traceback when they were).
        """
        with _sigint_deferred():
            self._manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(_unwrap_keys(state)),
                record=ocp.args.JsonSave(record)))
            self._manager.wait_until_finished()

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def read_record(self, step: int) -> dict:
        """The JSON record of checkpoint ``step`` alone (no arrays are read).

        Raises:
          ValueError: it cannot be read.
        """
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(
                record=ocp.args.JsonRestore()))
        except Exception as err:  # orbax raises many types; report one line
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"cannot read checkpoint {self.directory / str(step)}: {first[:300]}") from None
        return dict(restored["record"])

    def restore(self, template: Any, step: int | None = None) -> tuple[Any, dict]:
        """Restores ``(state, record)`` shaped and sharded like ``template``.

        Raises:
          ValueError: no checkpoint, or one that cannot be read or does not match the template.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise ValueError(f"no checkpoint found in {self.directory}")
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(_abstract(template)), record=ocp.args.JsonRestore()))
        except Exception as err:  # orbax raises many types; report one line
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"cannot read checkpoint {self.directory / str(step)}: {first[:300]}") from None
        state = jax.tree.map(
            lambda t, x: jax.random.wrap_key_data(x, impl=jax.random.key_impl(t))
            if _is_key(t) else x, template, restored["state"])
        return state, dict(restored["record"])

    def close(self) -> None:
        self._manager.close()

"""Optional per-seed loggers: TensorBoard and Weights & Biases, fed by the host loop.

The run directory's metrics (``runlog``) are the record of a run; these loggers only mirror it, one
logged run per population member (setting × seed), after each compiled chunk. They are off by
default and need the ``loggers`` extra (``pip install 'jaxcredit[loggers]'``): tensorboardX and
wandb are imported only when asked for. NaN values (no episode ended, no evaluation at that
update) are skipped.

W&B runs in offline mode unless ``WANDB_MODE`` says otherwise (``wandb sync`` uploads later),
so a run never blocks on the network.
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

LOGGERS = ("tensorboard", "wandb")


class TensorBoardLogger:
    """One TensorBoard event directory per member: ``<out>/tensorboard/h<h>-s<s>``."""

    def __init__(self, out: pathlib.Path, members: Sequence[tuple[int, int]], config: dict):
        try:
            from tensorboardX import SummaryWriter  # noqa: PLC0415
        except ImportError:
            raise ValueError("the tensorboard logger needs tensorboardX: pip install "
                             "'jaxcredit[loggers]'") from None
        self.writers = [SummaryWriter(str(out / "tensorboard" / f"h{h}-s{s}"))
                        for h, s in members]
        for writer in self.writers:
            writer.add_text("config", f"```\n{config}\n```")

    def log(self, member: int, step: int, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.writers[member].add_scalar(name, value, step)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class WandbLogger:
    """One W&B run per member, grouped by the run directory's name."""

    def __init__(self, out: pathlib.Path, members: Sequence[tuple[int, int]], config: dict):
        try:
            import wandb  # noqa: PLC0415
        except ImportError:
            raise ValueError("the wandb logger needs wandb: pip install 'jaxcredit[loggers]'") \
                from None
        os.environ.setdefault("WANDB_MODE", "offline")
        self.runs = [wandb.init(project="jaxcredit", group=out.name, name=f"{out.name}-h{h}-s{s}",
                                dir=str(out), config={**config, "hparam_index": h, "seed": s},
                                reinit="create_new")
                     for h, s in members]

    def log(self, member: int, step: int, values: Mapping[str, float]) -> None:
        self.runs[member].log(dict(values), step=step)

    def close(self) -> None:
        for run in self.runs:
            run.finish()


def make_loggers(names: Sequence[str], out: pathlib.Path, members: Sequence[tuple[int, int]],
                 config: dict) -> list[Any]:
    """The loggers named in ``names`` (one-line ValueError for an unknown or missing one)."""
    unknown = sorted(set(names) - set(LOGGERS))
    if unknown:
        raise ValueError(f"unknown logger(s) {unknown}; choose from {list(LOGGERS)}")
    kinds = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    return [kinds[name](pathlib.Path(out), members, config) for name in dict.fromkeys(names)]


def log_chunk(loggers: Sequence[Any], metrics: Mapping[str, np.ndarray], first_update: int,
              steps_per_update: int) -> None:
    """Logs ``[P, U]`` chunk metrics at env-step x-coordinates, skipping NaN."""
    if not loggers:
        return
    arrays = {k: np.asarray(v, np.float64) for k, v in metrics.items()}
    members, updates = next(iter(arrays.values())).shape
    for p in range(members):
        for u in range(updates):
            step = (first_update + u + 1) * steps_per_update
            values = {k: float(a[p, u]) for k, a in arrays.items() if math.isfinite(a[p, u])}
            for logger in loggers:
                logger.log(p, step, values)

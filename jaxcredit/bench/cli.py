"""``jaxcredit bench {train,estimators,all}``: the benchmark commands.

Their flags come from the dataclasses :class:`~jaxcredit.bench.train.TrainBench` and
:class:`~jaxcredit.bench.estimators.EstimatorsBench` (each field's docstring is its help, with
``--gamma``, ``--lambda`` and ``--env-option`` as in ``jaxcredit train``). Bad input raises
ValueError, which the ``jaxcredit`` command reports as one line with exit status 2.
"""

from __future__ import annotations

from typing import Annotated, Optional, Sequence, Union

import tyro

from jaxcredit.bench import all as all_bench
from jaxcredit.bench import estimators, train
from jaxcredit.flags import UsageError, parse

PROG = "jaxcredit bench"
BENCHMARKS = {"train": train.TrainBench, "estimators": estimators.EstimatorsBench,
              "all": all_bench.AllBench}
RUNNERS = {train.TrainBench: train.bench, estimators.EstimatorsBench: estimators.bench,
           all_bench.AllBench: all_bench.bench}
BenchArgs = Union[tuple(Annotated[cls, tyro.conf.subcommand(name)]
                        for name, cls in BENCHMARKS.items())]


def main(argv: Optional[Sequence[str]] = None) -> dict:
    """Parses ``jaxcredit bench ...`` and runs the chosen benchmark."""
    argv = list(argv or [])
    usage = f"usage: {PROG} {{{','.join(BENCHMARKS)}}} [options]"
    if not argv:
        raise UsageError(f"{usage}; '{PROG} train --help' for the options")
    if not argv[0].startswith("-") and argv[0] not in BENCHMARKS:
        raise UsageError(f"unknown benchmark {argv[0]!r}; {usage}")
    args = parse(BenchArgs, argv, PROG)
    return RUNNERS[type(args)](args)

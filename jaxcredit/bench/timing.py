"""Timing compiled training runs against each other in one process.

The protocol of ``jaxcredit bench train``:

* each case is one jitted function, compiled ahead of time (``jax.jit(f).lower(*args)
  .compile()``); the compile time is reported on its own;
* after one untimed warm-up call per case, the cases of a race take turns call by call, so that
  whatever else loads the machine hits all of them alike; call i gets fresh PRNG keys from seed
  ``seed + i``; each call ends with ``jax.block_until_ready``;
* a case's speed is its env steps per call over the median wall time of its timed calls (SPS);
* a case may score what each timed call returned (``Case.score``, e.g. the final return of a
  training run), after the clock stops: a race of equivalent programs can then show that they
  also learn alike, at no extra call.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable, Optional

import jax


@dataclasses.dataclass
class Case:
    """One compiled training function, how to make its arguments for a seed, and its timings.

    Attributes:
      label: its name in the table.
      compiled: the ahead-of-time compiled function.
      make_args: ``seed -> args`` (fresh keys; the rest of the arguments fixed).
      env_steps: environment steps one call takes (all seeds together).
      compile_s: seconds of ``lower`` + ``compile``.
      times: wall seconds of each timed call.
      extra: anything to report alongside (estimator, fit steps, ...).
      score: ``output -> float`` of a call's output (None: not scored), and ``scores`` those of
        the timed calls; ``last_score`` the latest call's.
    """

    label: str
    compiled: Callable
    make_args: Callable[[int], tuple]
    env_steps: int
    compile_s: float
    times: list = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)
    score: Optional[Callable[[Any], float]] = None
    scores: list = dataclasses.field(default_factory=list)
    last_score: Optional[float] = None

    @property
    def sps(self) -> float:
        """Env steps per second over the median call."""
        return self.env_steps / statistics.median(self.times)

    def call(self, seed: int) -> float:
        """One call (arguments made and on the device before the clock starts); its seconds.
        With a ``score``, the output's score is kept (in ``scores`` when the call is timed)."""
        args = jax.block_until_ready(self.make_args(seed))
        start = time.perf_counter()
        out = jax.block_until_ready(self.compiled(*args))
        seconds = time.perf_counter() - start
        self.last_score = None if self.score is None else float(self.score(out))
        return seconds

    def summary(self) -> dict:
        scored = {} if self.score is None else {
            "score_median": round(statistics.median(self.scores), 2),
            "score_all": [round(s, 2) for s in self.scores]}
        return {"label": self.label, "sps": round(self.sps), "compile_s": round(self.compile_s, 2),
                "run_s_median": round(statistics.median(self.times), 4),
                "run_s_all": [round(t, 4) for t in self.times],
                "env_steps_per_call": self.env_steps, **scored, **self.extra}


def compile_case(label: str, fn: Callable, make_args: Callable[[int], tuple], env_steps: int,
                 score: Optional[Callable[[Any], float]] = None, **extra: Any) -> Case:
    """Compiles ``fn`` ahead of time for ``make_args(0)``'s shapes."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*make_args(0)).compile()
    return Case(label, compiled, make_args, env_steps, time.perf_counter() - start, extra=extra,
                score=score)


def race(cases: list[Case], repeats: int, seed: int = 0) -> list[Case]:
    """Warms up every case, then times ``repeats`` rounds of one call per case in turn."""
    for case in cases:
        case.call(seed - 1)
    for i in range(repeats):
        for case in cases:
            case.times.append(case.call(seed + i))
            if case.score is not None:
                case.scores.append(case.last_score)
    return cases

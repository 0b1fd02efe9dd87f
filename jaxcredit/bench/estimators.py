"""Estimator benchmark: jaxcredit's multistep functions against rlax (vmapped), side by side.

    jaxcredit bench estimators [--quick] [--estimators gae,vtrace] [--json results.json]
    python -m jaxcredit.bench estimators ...

For each estimator, window length T and batch size B it times jaxcredit's ``scan`` form, its
``associative`` form and ``jax.vmap`` of the rlax function over the batch axis of the same
time-major arrays, all in one process. Compile time (AOT ``lower().compile()``) is reported
separately from run time; run time is the median of repeated calls, each ended by
``block_until_ready``. The ratio column is the time of jaxcredit's *default* method on this
backend divided by rlax's time (≤ 1 is the goal).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from dataclasses import asdict, dataclass
from typing import Annotated, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import rlax
import tyro

from jaxcredit.agents.config import Hparams
from jaxcredit.estimators import returns as R

ESTIMATORS = ("gae", "truncated_gae", "lambda_returns", "discounted_returns", "vtrace", "n_step")


@dataclasses.dataclass
class EstimatorsBench:
    """jaxcredit's multistep estimators against rlax's (vmapped over the batch), compile apart,
    calls alternating, median of repeated calls."""

    quick: bool = False
    """one small shape (T=128, B=1024) and at most 20 repeats: a smoke table in seconds"""
    T: tuple[int, ...] = (128, 1024)
    """window lengths"""
    B: tuple[int, ...] = (1024, 8192)
    """batch sizes"""
    repeats: int = 30
    """timed calls per case (median)"""
    estimators: tuple[str, ...] = ESTIMATORS
    """which estimators, comma- or space-separated"""
    gamma: float = 0.99
    """discount γ"""
    lambda_: Annotated[float, tyro.conf.arg(name="lambda")] = 0.95
    """λ of GAE, λ-returns and V-trace"""
    json: Optional[str] = None
    """write the timings to this JSON file"""


@dataclass
class Timing:
    estimator: str
    impl: str
    T: int
    B: int
    compile_s: float
    median_us: float
    p10_us: float
    p90_us: float


def _inputs(T: int, B: int, gamma: float = 0.99, seed: int = 0) -> dict:
    """Random time-major inputs with ~2% terminations and ~1% truncations; ``discount`` is γ,
    0 at terminations."""
    rng = np.random.default_rng(seed)

    def f32(x):
        return jnp.asarray(x, jnp.float32)

    term = rng.random((T, B)) < 0.02
    trunc = (rng.random((T, B)) < 0.01) & ~term
    return {
        "r": f32(rng.uniform(-1, 1, (T, B))),
        "v": f32(rng.normal(size=(T, B))),
        "nv": f32(rng.normal(size=(T, B))),
        "values": f32(rng.normal(size=(T + 1, B))),
        "discount": f32(gamma * (1.0 - term)),
        "rho": f32(np.exp(0.3 * rng.normal(size=(T, B)))),
        "terminated": jnp.asarray(term),
        "truncated": jnp.asarray(trunc),
    }


def _cases(x: dict, gamma: float, lam: float) -> dict[str, dict[str, tuple[Callable, tuple]]]:
    """estimator -> impl -> (function, args). All functions return [T, B]."""

    def tm(fn, in_axes):  # an rlax function of one sequence, vmapped over time-major batches
        return jax.vmap(fn, in_axes=in_axes, out_axes=1)

    cases: dict[str, dict[str, tuple[Callable, tuple]]] = {}
    for method in R.METHODS:
        cases.setdefault("gae (episode-aware)", {})[method] = (
            lambda r, v, nv, te, tr, m=method: R.gae(r, v, nv, te, tr, gamma, lam, method=m)[0],
            (x["r"], x["v"], x["nv"], x["terminated"], x["truncated"]))
        cases.setdefault("truncated_gae", {})[method] = (
            lambda r, d, vals, m=method: R.truncated_generalized_advantage_estimation(
                r, d, lam, vals, method=m),
            (x["r"], x["discount"], x["values"]))
        cases.setdefault("lambda_returns", {})[method] = (
            lambda r, d, v, m=method: R.lambda_returns(r, d, v, lam, method=m),
            (x["r"], x["discount"], x["nv"]))
        cases.setdefault("discounted_returns", {})[method] = (
            lambda r, d, v, m=method: R.discounted_returns(r, d, v, method=m),
            (x["r"], x["discount"], x["nv"]))
        cases.setdefault("vtrace", {})[method] = (
            lambda v0, v1, r, d, rho, m=method: R.vtrace(v0, v1, r, d, rho, lam, method=m),
            (x["v"], x["nv"], x["r"], x["discount"], x["rho"]))
    # rlax has no episode-aware GAE; its truncated GAE does the same arithmetic.
    rlax_gae = (
        lambda r, d, vals: tm(rlax.truncated_generalized_advantage_estimation, (1, 1, None, 1))(
            r, d, lam, vals),
        (x["r"], x["discount"], x["values"]))
    cases["gae (episode-aware)"]["rlax"] = rlax_gae
    cases["truncated_gae"]["rlax"] = rlax_gae
    cases["lambda_returns"]["rlax"] = (
        lambda r, d, v: tm(rlax.lambda_returns, (1, 1, 1, None))(r, d, v, lam),
        (x["r"], x["discount"], x["nv"]))
    cases["discounted_returns"]["rlax"] = (
        lambda r, d, v: tm(rlax.discounted_returns, (1, 1, 1))(r, d, v),
        (x["r"], x["discount"], x["nv"]))
    cases["vtrace"]["rlax"] = (
        lambda v0, v1, r, d, rho: tm(rlax.vtrace, (1, 1, 1, 1, 1, None))(v0, v1, r, d, rho, lam),
        (x["v"], x["nv"], x["r"], x["discount"], x["rho"]))
    n = 5
    cases["n_step (n=5)"] = {
        "scan": (lambda r, d, v: R.n_step_bootstrapped_returns(r, d, v, n),
                 (x["r"], x["discount"], x["nv"])),
        "rlax": (lambda r, d, v: tm(rlax.n_step_bootstrapped_returns, (1, 1, 1, None))(r, d, v, n),
                 (x["r"], x["discount"], x["nv"])),
    }
    return cases


def compile_fn(fn: Callable, args: tuple) -> tuple[Callable, float]:
    """AOT-compiles ``fn`` for ``args``; returns (compiled, compile seconds)."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - start


def time_interleaved(calls: dict[str, tuple[Callable, tuple]], repeats: int,
                     warmup: int = 3) -> dict[str, list[float]]:
    """Per-call run seconds of each compiled call, taking turns call by call.

    Interleaving puts every implementation under the same background load, so that the ratio of
    medians stays meaningful on a noisy shared machine.
    """
    for compiled, args in calls.values():
        for _ in range(warmup):
            jax.block_until_ready(compiled(*args))
    runs: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (compiled, args) in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            runs[name].append(time.perf_counter() - start)
    return runs


def run(shapes: list[tuple[int, int]], repeats: int, estimators: list[str] | None = None,
        gamma: float = 0.99, lam: float = 0.95) -> list[Timing]:
    timings = []
    for T, B in shapes:
        x = _inputs(T, B, gamma)
        for name, impls in _cases(x, gamma, lam).items():
            if estimators and name.split(" ")[0] not in estimators:
                continue
            compiled, compile_s = {}, {}
            for impl, (fn, args) in impls.items():
                fn_c, compile_s[impl] = compile_fn(fn, args)
                compiled[impl] = (fn_c, args)
            for impl, runs in time_interleaved(compiled, repeats).items():
                us = np.asarray(runs) * 1e6
                timings.append(Timing(name, impl, T, B, compile_s[impl], float(np.median(us)),
                                      float(np.percentile(us, 10)), float(np.percentile(us, 90))))
    return timings


def table(timings: list[Timing]) -> str:
    """One row per (estimator, T, B): µs per call of each impl and default/rlax ratio."""
    rows = {}
    for t in timings:
        rows.setdefault((t.estimator, t.T, t.B), {})[t.impl] = t
    header = (f"{'estimator':<22} {'T':>5} {'B':>6} {'scan µs':>10} {'assoc µs':>10} "
              f"{'rlax µs':>10} {'default':>11} {'ratio':>6}")
    lines = [header, "-" * len(header)]
    for (name, T, B), impls in rows.items():
        default = R.default_method(T)
        if default not in impls:
            default = "scan"
        ours = impls[default].median_us
        rl = impls.get("rlax")

        def fmt(k):
            return f"{impls[k].median_us:10.1f}" if k in impls else f"{'-':>10}"

        ratio = f"{ours / rl.median_us:6.2f}" if rl else f"{'-':>6}"
        lines.append(f"{name:<22} {T:>5} {B:>6} {fmt('scan')} {fmt('associative')} {fmt('rlax')} "
                     f"{default:>11} {ratio}")
    return "\n".join(lines)


def selected(items: tuple[str, ...]) -> list[str]:
    """The estimator names of ``--estimators`` (comma- or space-separated), checked."""
    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown or not names:
        raise ValueError(f"unknown estimator(s) {', '.join(unknown) or '(none given)'} for the "
                         f"estimator benchmark; known: {', '.join(ESTIMATORS)}")
    return names


def bench(args: EstimatorsBench) -> dict:
    """Runs the benchmark of ``args``, prints the table and returns the timings (also written
    to ``--json``)."""
    Hparams.create(gamma=args.gamma, lambda_=args.lambda_)  # one-line ValueError out of range
    wanted = selected(args.estimators)
    if any(v <= 0 for v in args.T + args.B) or args.repeats <= 0:
        raise ValueError("T, B and repeats must be positive")
    shapes = [(128, 1024)] if args.quick else [(T, B) for T in args.T for B in args.B]
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    print(f"jaxcredit estimator benchmark on {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}), jax {jax.__version__}, rlax {rlax.__version__}; "
          f"median of {repeats} calls, compile separate", flush=True)
    timings = run(shapes, repeats, wanted, args.gamma, args.lambda_)
    print(table(timings))
    print("ratio = jaxcredit default method / rlax (vmapped over the batch axis); ≤ 1 is the goal")
    payload = {
        "backend": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "rlax": rlax.__version__,
        "repeats": repeats,
        "gamma": args.gamma,
        "lambda": args.lambda_,
        "timings": [asdict(t) for t in timings],
    }
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {path}")
    return payload

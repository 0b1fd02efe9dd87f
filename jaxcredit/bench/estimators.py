"""Estimator benchmark: jaxcredit's multistep functions against rlax (vmapped), side by side.

    python -m jaxcredit.bench estimators [--quick] [--out results.json]
    jaxcredit bench estimators ...

For each estimator, window length T and batch size B it times jaxcredit's ``scan`` form, its
``associative`` form and ``jax.vmap`` of the rlax function over the batch axis of the same time-major
arrays, all in one process. Compile time (AOT ``lower().compile()``) is reported separately from run
time; run time is the median of repeated calls, each ended by ``block_until_ready``. The ratio column
is the time of jaxcredit's *default* method on this backend divided by rlax's time (≤ 1 is the goal).
"""

from __future__ import annotations

import argparse
import json

import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import rlax

from jaxcredit.estimators import returns as R


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


def _inputs(T: int, B: int, seed: int = 0) -> dict:
    """Random time-major inputs with ~2% terminations and ~1% truncations."""
    rng = np.random.default_rng(seed)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    term = rng.random((T, B)) < 0.02
    trunc = (rng.random((T, B)) < 0.01) & ~term
    return {
        "r": f32(rng.uniform(-1, 1, (T, B))),
        "v": f32(rng.normal(size=(T, B))),
        "nv": f32(rng.normal(size=(T, B))),
        "values": f32(rng.normal(size=(T + 1, B))),
        "discount": f32(0.99 * (1.0 - term)),
        "rho": f32(np.exp(0.3 * rng.normal(size=(T, B)))),
        "terminated": jnp.asarray(term),
        "truncated": jnp.asarray(trunc),
    }


def _cases(x: dict) -> dict[str, dict[str, tuple[Callable, tuple]]]:
    """estimator -> impl -> (function, args). All functions return [T, B]."""
    tm = lambda fn, in_axes: jax.vmap(fn, in_axes=in_axes, out_axes=1)
    lam, gamma = 0.95, 0.99
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


def run(shapes: list[tuple[int, int]], repeats: int, estimators: list[str] | None = None) -> list[Timing]:
    timings = []
    for T, B in shapes:
        x = _inputs(T, B)
        for name, impls in _cases(x).items():
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
        fmt = lambda k: f"{impls[k].median_us:10.1f}" if k in impls else f"{'-':>10}"
        ratio = f"{ours / rl.median_us:6.2f}" if rl else f"{'-':>6}"
        lines.append(f"{name:<22} {T:>5} {B:>6} {fmt('scan')} {fmt('associative')} {fmt('rlax')} "
                     f"{default:>11} {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jaxcredit bench estimators",
        description="Time jaxcredit's multistep estimators against rlax (vmapped).")
    parser.add_argument("--quick", action="store_true",
                        help="one small shape (T=128, B=1024), few repeats: a ~15 s smoke table")
    parser.add_argument("--T", type=int, nargs="+", default=[128, 1024], help="window lengths")
    parser.add_argument("--B", type=int, nargs="+", default=[1024, 8192], help="batch sizes")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per case (median)")
    parser.add_argument("--estimators", type=str, default=None,
                        help="comma-separated subset, e.g. gae,lambda_returns")
    parser.add_argument("--out", type=str, default=None, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    if any(v <= 0 for v in args.T + args.B) or args.repeats <= 0:
        parser.error("T, B and --repeats must be positive")
    shapes = [(128, 1024)] if args.quick else [(T, B) for T in args.T for B in args.B]
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    wanted = args.estimators.split(",") if args.estimators else None

    print(f"jaxcredit estimator benchmark on {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}), jax {jax.__version__}, rlax {rlax.__version__}; "
          f"median of {repeats} calls, compile separate", flush=True)
    timings = run(shapes, repeats, wanted)
    print(table(timings))
    print("ratio = jaxcredit default method / rlax (vmapped over the batch axis); ≤ 1 is the goal")
    if args.out:
        payload = {
            "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind,
            "jax": jax.__version__,
            "rlax": rlax.__version__,
            "repeats": repeats,
            "timings": [asdict(t) for t in timings],
        }
        with open(args.out, "w") as f:
            json.dump(payload, f, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())



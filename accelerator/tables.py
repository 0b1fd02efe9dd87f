"""jaxcredit's GPU tables, most important first, each part saved the moment it finishes, inside a
time budget: the driver of ``accelerator/run.sh`` (docs/scaling.md, "Running on a lent GPU").

    python3 accelerator/tables.py --size gpu --out DIR --deadline EPOCH_SECONDS [--allow-cpu]
    python3 accelerator/tables.py --render DIR --into RESULTS.md   # DIR's tables, in RESULTS.md

A lent GPU gives about 15 minutes in all, its start included, and forgets everything
between calls. So the tables are cut into *parts* (one shape, one race), each with a time
estimate; a part starts only if its estimate (scaled by how far this call's earlier parts missed
theirs) ends before ``--deadline``, and a part that does not fit is logged and left for the next
call, whose ``$OUT`` starts with this call's files (run.sh copies them in from
``accelerator/out/``). A part already done there is skipped.

Tables, in order of importance:

1. ``01_estimators``: jaxcredit's multistep estimators (scan and associative scan) against rlax
   (``jaxcredit.bench.estimators``), T up to 4096 and batches up to 65,536, each time also set
   against the HBM's limit: the bytes the estimator must move over its time, against a big
   device-to-device copy measured in the same process.
2. ``02_ppo_race``: PPO on CartPole against PureJaxRL in the same process, 4 to 65,536 envs
   (``jaxcredit.bench.races.main_race`` and ``scale_races``).
3. ``03_seed_sweep``: PPO on CartPole vmapped over 1,024 seeds, aggregate SPS, against
   PureJaxRL's ``train`` vmapped the same way.
4. ``04_fitted_credit``: the fitted credit models' cost (``estimator_races``: hca_return, c2a2c,
   hca_state against A2C+GAE).
5. ``05_minatar``: A2C+GAE and c2a2c on MinAtar in experiments/minatar_c2a2c's paper
   configuration (16 envs x 5 steps, 256-256 MLP, 8 seeds vmapped): each game's throughput and
   the projected time of the paper's budget (10M steps per seed), then, where a call has the
   time, Breakout trained at that budget.

Every timing follows ``jaxcredit.bench``'s protocol (compile apart, ``block_until_ready``,
median of repeated calls taking turns, baseline in the same process): the parts call its
functions. What comes back from the device is at most 8 files, so a table is one JSON file
(``NN_name.json``: every part's numbers and its markdown), next to ``device.md`` (one section
per call), ``results.md`` (every table so far under the device's description: RESULTS.md's
text) and ``run.log`` (run.sh's). Only the standard library is imported before the tables run,
so ``--render`` works anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Optional, Union

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Seconds kept free before the deadline: writing the last files and leaving Python.
MARGIN_S = 8.0
# A part found "running" at start died with its process (a crash, or the call's time limit):
# it is tried again, up to this many attempts in all.
MAX_ATTEMPTS = 2
GAMMA, LAMBDA = 0.99, 0.95
# What one device call brings back from $OUT: device.md, results.md, run.log and one JSON per
# table fill it exactly.
MAX_FILES = 8


@dataclasses.dataclass(frozen=True)
class TableInfo:
    number: int
    name: str
    title: str
    note: str

    @property
    def file(self) -> str:
        return f"{self.number:02d}_{self.name}.json"


TABLES = (
    TableInfo(1, "estimators", "Estimator speed: jaxcredit's scan and associative scan against "
              "rlax, and the HBM's limit",
              "µs per call (median of repeated calls taking turns, compile apart); in brackets "
              "the bandwidth the call reached, the bytes it must move (each input read once, "
              "its output written once) over its time, as a share of a device-to-device copy "
              "(`x + 1` over a large float32 array, 1 GiB at the gpu size; bytes read + "
              "written) measured in the same process. "
              "`default` is jaxcredit's method for that T on this backend, `ratio` its time "
              "over rlax's (vmapped over the batch)."),
    TableInfo(2, "ppo_race", "PPO on CartPole against PureJaxRL, 4 to 65,536 envs",
              "One process per race, calls taking turns, compile apart "
              "(`jaxcredit.bench.races`). 4 envs: PureJaxRL's own PPO settings (at the gpu size "
              "1e5 env steps per call against its 5e5: the same program per update, fewer "
              "updates); many envs: 4 updates of 128 steps per call. time/step is relative to "
              "the first row."),
    TableInfo(3, "seed_sweep", "PPO on CartPole vmapped over 1,024 seeds",
              "One compiled program trains every seed (4 envs each); SPS counts the env steps "
              "of all seeds together; compile apart."),
    TableInfo(4, "fitted_credit", "The cost of fitted credit models against A2C+GAE",
              "A2C on CartPole with each estimator, its credit model fitted inside every update "
              "(`estimator_fit_steps` Adam steps), against A2C+GAE in the same race."),
    TableInfo(5, "minatar", "MinAtar A2C and c2a2c at the paper's configuration",
              "experiments/minatar_c2a2c's learners and settings at its gpu size (16 envs x 5 "
              "steps, 256-256 MLP, 8 seeds vmapped): each game's training throughput without "
              "evaluation and the time 10M steps per seed would take, then Breakout trained "
              "at that budget where a call had the time."),
)
TABLE_BY_NAME = {t.name: t for t in TABLES}

# What each size runs. gpu: planned for one H100/H200 within two calls of about 5 minutes;
# every estimate below is a guess until a first call's log says otherwise (it prints estimate
# against actual for every part). smoke: every table at toy sizes, on a 2-core CPU in about two
# minutes (accelerator/rehearse.sh).
SIZES: dict[str, dict[str, Any]] = {
    "gpu": dict(
        # T x B pairs rather than their product: 4096 x 65536 would be 1 GiB per input array,
        # drawn on the host by numpy first.
        estimators=dict(shapes=((128, 1024), (128, 65536), (1024, 1024), (1024, 65536),
                                (4096, 1024), (4096, 16384)),
                        estimators=("gae", "lambda_returns", "vtrace"), repeats=20,
                        copy_bytes=2**30),
        # 4 envs: 1e5 steps per call instead of PureJaxRL's 5e5 (the same program per update;
        # a 4-env run is latency-bound on a GPU, several seconds per call).
        race=dict(main_timesteps=100_000, big_envs=(2048, 16384, 65536), big_updates=4,
                  repeats=3),
        seeds=dict(seeds=(1024,), timesteps=100_000, repeats=3),
        fitted=dict(estimators=("hca_return", "c2a2c", "hca_state"), fit_steps=(4, 1),
                    envs=4096, steps=16, updates=50, repeats=3),
        minatar=dict(games=("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest"),
                     throughput_updates=500, repeats=3, learn=("A2C+GAE", "c2a2c"),
                     learn_game="Breakout", paper=True),
        # Guessed costs on an H100 (seconds): a compile of one engine program, and a call.
        cost=dict(compile_s=12.0, fitted_compile_s=20.0, est_compile_s=0.6, call_4env_s=2.5,
                  call_big_s=0.5, call_seeds_s=4.0, call_fitted_s=0.6, call_minatar_s=0.8,
                  minatar_sps=500_000.0),
    ),
    "smoke": dict(
        estimators=dict(shapes=((64, 32),), estimators=("gae",), repeats=3,
                        copy_bytes=2**22),
        race=dict(main_timesteps=4 * 128 * 2, big_envs=(8,), big_updates=1, repeats=1),
        seeds=dict(seeds=(2,), timesteps=4 * 128, repeats=1),
        fitted=dict(estimators=("hca_return", "c2a2c", "hca_state"), fit_steps=(1,), envs=8,
                    steps=8, updates=1, repeats=1),
        minatar=dict(games=("Breakout",), throughput_updates=2, repeats=1, learn=("A2C+GAE",),
                     learn_game="Breakout", paper=False, seeds=2, hidden=(16,),
                     learn_steps=16 * 5 * 8),
        cost=dict(compile_s=5.0, fitted_compile_s=6.0, est_compile_s=0.3, call_4env_s=0.3,
                  call_big_s=0.3, call_seeds_s=0.3, call_fitted_s=0.2, call_minatar_s=0.2,
                  minatar_sps=20_000.0),
    ),
}


def log(message: str) -> None:
    print(f"[tables {time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes ``text`` so that a kill mid-write leaves the old file, not half a new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Parts and the budget
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Part:
    """One self-contained piece of a table (its own race, its baseline in it).

    ``estimate`` is seconds on this size's device, compile included, or a function giving them
    when the part is due (the learning runs read the throughput measured before them).
    ``run`` returns ``(data, markdown)``.
    """

    key: str
    estimate: Union[float, Callable[[], float]]
    run: Callable[[], tuple[dict, str]]

    def estimate_s(self) -> float:
        return float(self.estimate() if callable(self.estimate) else self.estimate)


class Budget:
    """The deadline, and how far this call's parts overran their estimates so far."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.estimated = 0.0
        self.actual = 0.0

    @property
    def factor(self) -> float:
        # Clamped: one part's compile-heavy miss should not rule out everything after it.
        if self.estimated <= 0:
            return 1.0
        return min(4.0, max(0.3, self.actual / self.estimated))

    def left(self) -> float:
        return self.deadline - MARGIN_S - time.time()

    def scale(self, measured: bool) -> float:
        # An estimate computed from this call's own measurements (a learning run from the
        # throughput just measured) is not a guess: it is never scaled down.
        return max(1.0, self.factor) if measured else self.factor

    def fits(self, estimate_s: float, measured: bool = False) -> bool:
        return estimate_s * self.scale(measured) <= self.left()

    def record(self, estimate_s: float, actual_s: float) -> None:
        self.estimated += estimate_s
        self.actual += actual_s


class TableFile:
    """A table's JSON file in ``out``: its finished parts, failures and attempts by key."""

    def __init__(self, out: pathlib.Path, info: TableInfo, size: str):
        self.path = out / info.file
        self.info = info
        self.size = size
        self.doc: dict[str, Any] = {"table": info.name, "number": info.number,
                                    "title": info.title, "note": info.note, "size": size,
                                    "parts": {}, "order": []}
        if self.path.exists():
            old = json.loads(self.path.read_text())
            if old.get("size") == size:
                self.doc = old
            else:  # never mix sizes: smoke results carried to a gpu call are started over
                log(f"{self.path.name} holds size {old.get('size')!r}, not {size!r}: "
                    "starting it over")

    def part(self, key: str) -> Optional[dict]:
        return self.doc["parts"].get(key)

    def save(self, order: list[str]) -> None:
        self.doc["order"] = order
        write_atomic(self.path, json.dumps(self.doc, indent=1) + "\n")


def part_due(record: Optional[dict], retry_failed: bool, skip_running: bool
             ) -> tuple[bool, str]:
    """Whether a part with this record still has to run, and why not if it has not."""
    if record is None:
        return True, ""
    status, attempts = record.get("status"), record.get("attempts", 0)
    if status == "done":
        return False, "done in an earlier call"
    if status == "failed" and not retry_failed:
        return False, (f"failed in an earlier call ({record.get('error', '?')}); "
                       "--retry-failed tries again")
    if status == "running" and skip_running:
        return False, "the process running it died in this call"
    if status == "running" and attempts >= MAX_ATTEMPTS:
        return False, f"died while running in {attempts} calls (a crash or the time limit)"
    return True, ""


def run_tables(tables: list[tuple[TableInfo, list[Part]]], out: pathlib.Path, size: str,
               budget: Budget, stamp: dict, retry_failed: bool = False,
               skip_running: bool = False) -> dict[str, list[str]]:
    """Runs every due part that fits the budget, table by table; returns what was skipped."""
    skipped: dict[str, list[str]] = {}
    for info, parts in tables:
        table = TableFile(out, info, size)
        order = [p.key for p in parts]
        for part in parts:
            label = f"{info.file[:-5]} / {part.key}"
            due, why = part_due(table.part(part.key), retry_failed, skip_running)
            if not due:
                log(f"skip {label}: {why}")
                continue
            try:
                estimate = part.estimate_s()
            except Exception as err:  # noqa: BLE001 (a broken estimate skips its part only)
                traceback.print_exc()
                log(f"skip {label}: its estimate failed: {type(err).__name__}: {err}")
                continue
            measured = callable(part.estimate)
            if not budget.fits(estimate, measured):
                factor = budget.scale(measured)
                log(f"skip {label}: needs ~{estimate * factor:.0f} s (estimate "
                    f"{estimate:.0f} s x {factor:.2f}), {max(0, budget.left()):.0f} s "
                    "left; the next call runs it")
                skipped.setdefault(info.file, []).append(part.key)
                continue
            record = table.part(part.key) or {}
            attempts = record.get("attempts", 0) + 1
            # Marked before it starts: if the process dies, the next call knows (part_due).
            table.doc["parts"][part.key] = {"status": "running", "attempts": attempts,
                                            "estimate_s": round(estimate, 1), **stamp}
            table.save(order)
            log(f"run  {label}: estimate {estimate:.0f} s, {budget.left():.0f} s left")
            start = time.perf_counter()
            try:
                data, markdown = part.run()
                entry = {"status": "done", "data": data, "markdown": markdown}
            except Exception as err:  # noqa: BLE001 (one part's failure must not end the call)
                traceback.print_exc()
                entry = {"status": "failed",
                         "error": f"{type(err).__name__}: {' '.join(str(err).split())[:400]}"}
            seconds = time.perf_counter() - start
            if entry["status"] == "done":  # a quick failure says nothing of the estimates
                budget.record(estimate, seconds)
            table.doc["parts"][part.key] = dict(entry, attempts=attempts, seconds=round(
                seconds, 1), estimate_s=round(estimate, 1), **stamp)
            table.save(order)
            log(f"{entry['status']} {label}: {seconds:.0f} s (estimate {estimate:.0f} s)")
            if entry["status"] == "done":  # the call's output shows the numbers as they come
                print(entry["markdown"], flush=True)
            write_atomic(out / "results.md", render(out))
    return skipped


# ----------------------------------------------------------------------------------------------
# The device
# ----------------------------------------------------------------------------------------------


def nvidia_smi() -> str:
    if shutil.which("nvidia-smi") is None:
        return "not on PATH"
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,"
             "clocks.max.mem", "--format=csv,noheader"], capture_output=True, text=True,
            timeout=20).stdout.strip().replace("\n", "; ")
    except (OSError, subprocess.SubprocessError) as err:
        return f"failed: {err}"


def matmul_errors() -> dict[str, float]:
    """Relative error (Frobenius) of a 2048³ float32 matrix product at JAX's default precision
    and at ``highest``, against float64 on the host: ~1e-6 is true f32, ~1e-3 TF32."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2048, 2048)).astype(np.float32) for _ in range(2))
    reference = a.astype(np.float64) @ b.astype(np.float64)
    errors = {}
    for name, precision in (("default", None), ("highest", jax.lax.Precision.HIGHEST)):
        product = np.asarray(jnp.matmul(jnp.asarray(a), jnp.asarray(b), precision=precision),
                             np.float64)
        errors[name] = float(np.linalg.norm(product - reference) / np.linalg.norm(reference))
    return errors


def precision_meaning(setting: Any, errors: dict[str, float], backend: str) -> str:
    # Rounding the inputs to TF32 (10-bit mantissa) gives about 3e-4 here, to bf16 about 3e-3.
    measured = ("full float32" if errors["default"] < 1e-5 else
                "TF32-like precision (a 10-bit mantissa)" if errors["default"] < 1.5e-3 else
                "bf16-like precision or worse")
    what = ("XLA's DEFAULT precision: on NVIDIA GPUs since Ampere it lets cuBLAS and cuDNN run "
            "float32 matrix products and convolutions on the tensor cores in TF32; "
            "`highest` (or JAX_DEFAULT_MATMUL_PRECISION=highest) asks for true float32"
            if setting in (None, "default", "DEFAULT") else f"every matmul at {setting!r}")
    return (f"`{setting}`: {what}. Measured on this {backend}: float32 matrix products at the "
            f"default ran in {measured} (relative error {errors['default']:.1e}; `highest` "
            f"{errors['highest']:.1e}). Every timing here runs at the default.")


def device_section(size: str, purejaxrl: Optional[str]) -> tuple[str, dict]:
    """The markdown of this call's device, and the stamp every part of the call carries."""
    import jax
    import jaxlib

    devices = jax.devices()
    first = devices[0]
    stats = {}
    try:
        stats = first.memory_stats() or {}
    except Exception:  # noqa: BLE001 (CPU devices have none; any failure means unknown)
        pass
    memory = (f"{stats['bytes_limit'] / 2**30:.1f} GiB for JAX (bytes_limit)"
              if "bytes_limit" in stats else "not reported")
    errors = matmul_errors()
    setting = jax.config.jax_default_matmul_precision
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith(("XLA_PYTHON_CLIENT", "JAX_", "CUDA_VISIBLE", "TF_CPP"))}
    rows = [
        ("device", f"{first.device_kind} x {len(devices)} ({jax.default_backend()}; "
                   f"{getattr(first.client, 'platform_version', '?')})"),
        ("nvidia-smi", nvidia_smi()),
        ("memory", memory),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("jax / jaxlib", f"{jax.__version__} / {jaxlib.__version__} "
                         f"({pathlib.Path(jax.__file__).parent})"),
        ("jax_default_matmul_precision", precision_meaning(setting, errors,
                                                           jax.default_backend())),
        ("XLA_FLAGS", f"`{os.environ.get('XLA_FLAGS', '')}`"),
        ("other JAX/XLA environment", ", ".join(f"`{k}={v}`" for k, v in env.items()) or "none"),
        ("jaxcredit", os.environ.get("JAXCREDIT_COMMIT", "unknown commit")),
        ("PureJaxRL", purejaxrl or "none (its races run jaxcredit alone)"),
        ("wheels carried", ", ".join(wheel_names()) or "none"),
    ]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"## Call of {now} (size {size})", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    stamp = {"device": first.device_kind, "backend": jax.default_backend(),
             "jax": jax.__version__, "when": now}
    return "\n".join(lines) + "\n", stamp


def wheel_names() -> list[str]:
    listing = ROOT / "accelerator" / "wheels.txt"
    if not listing.exists():
        return []
    return [line.strip() for line in listing.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


# ----------------------------------------------------------------------------------------------
# Rendering (standard library only: --render runs anywhere)
# ----------------------------------------------------------------------------------------------


def render(out: pathlib.Path) -> str:
    """The markdown of every table in ``out`` under its device sections: RESULTS.md's text."""
    lines = ["# jaxcredit on a lent GPU", "",
             "Made by accelerator/run.sh (docs/scaling.md, \"Running on a lent GPU\"); each "
             "part of a table names the call (and so the device) that measured it.", ""]
    device = out / "device.md"
    lines += [device.read_text().strip() if device.exists() else "(no device.md)", ""]
    for info in TABLES:
        lines += [f"## {info.number}. {info.title}", ""]
        path = out / info.file
        if not path.exists():
            lines += ["Not run yet.", ""]
            continue
        doc = json.loads(path.read_text())
        lines += [info.note, ""]
        for key in doc.get("order") or list(doc["parts"]):
            part = doc["parts"].get(key)
            if part is None or part.get("status") == "running":
                lines += [f"**{key}**: not run yet.", ""]
                continue
            where = (f"{part.get('device', '?')}, {part.get('when', '?')}, "
                     f"{part.get('seconds', 0):.0f} s")
            if part["status"] == "failed":
                lines += [f"**{key}** ({where}): failed: `{part['error']}`", ""]
            else:
                lines += [f"**{key}** ({where})", "", part["markdown"].strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


START, END = "<!-- gpu tables: start", "<!-- gpu tables: end -->"


def into_section(document: str, rendered: str) -> str:
    """``document`` with the text between its gpu-tables markers replaced by ``rendered``, each
    heading one level down (the rendered page's ``#`` title becomes a ``##`` section's text)."""
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no '{START} ... -->' and '{END}' markers to write between")
    start = document.index("-->", start) + len("-->")
    body = "\n".join("#" + line if line.startswith("#") else line
                     for line in rendered.strip().splitlines()[1:])  # the section has a title
    return document[:start] + "\n" + body.strip() + "\n" + document[end:]


# ----------------------------------------------------------------------------------------------
# The tables' parts
# ----------------------------------------------------------------------------------------------


class Context:
    """What parts of one call share: the size's plan, PureJaxRL once loaded, the copy
    bandwidth once measured."""

    def __init__(self, size: str, purejaxrl: Optional[str], workdir: pathlib.Path):
        self.size = size
        self.plan = SIZES[size]
        self.cost = self.plan["cost"]
        self.purejaxrl = purejaxrl
        self.workdir = workdir
        self._rivals = None
        self._copy: Optional[dict] = None

    def rivals(self):
        """PureJaxRL's PPO as ``jaxcredit.bench.train`` loads it (no rival without a checkout),
        its label the commit prepare.sh recorded."""
        if self._rivals is None:
            from jaxcredit.bench import races
            from jaxcredit.bench import train as train_bench

            if self.purejaxrl is None:
                self._rivals = races.Rivals()
            else:
                self._rivals = train_bench.load_rivals(
                    train_bench.TrainBench(purejaxrl=self.purejaxrl), self.workdir)
                # describe() asks git about the folder, which here sits inside jaxcredit's own
                # checkout (or none, on the device): the recorded commit is the true one.
                commit = pathlib.Path(self.purejaxrl, "COMMIT")
                if commit.exists():
                    self._rivals.ppo_label = f"purejaxrl {commit.read_text().strip()[:7]}"
        return self._rivals

    def copy_bandwidth(self) -> dict:
        """A device-to-device copy (``x + 1`` over ``copy_bytes`` of float32), timed by the
        estimator benchmark's own loop: bytes read + written over the median call."""
        if self._copy is None:
            import jax.numpy as jnp
            import numpy as np

            from jaxcredit.bench import estimators as est_bench

            nbytes = int(self.plan["estimators"]["copy_bytes"])
            x = jnp.arange(nbytes // 4, dtype=jnp.float32)
            compiled, _ = est_bench.compile_fn(lambda a: a + 1.0, (x,))
            runs = est_bench.time_interleaved({"copy": (compiled, (x,))}, repeats=20)["copy"]
            median = float(np.median(runs))
            self._copy = {"bytes": 2 * nbytes, "median_s": median,
                          "gb_per_s": 2 * nbytes / median / 1e9}
            del x
        return self._copy


def estimator_bytes(T: int, B: int) -> dict[tuple[str, str], int]:
    """The bytes each (estimator, impl) of the estimator benchmark must move at T x B: its
    inputs read once and its output written once, from the benchmark's own cases traced on
    shapes alone (no arrays of that size are made)."""
    import jax
    import numpy as np

    from jaxcredit.bench import estimators as est_bench

    small_t = 5  # the benchmark's inputs at a small T give each array's shape as T + offset
    small = est_bench._inputs(small_t, 3)
    shapes = {k: jax.ShapeDtypeStruct((T + v.shape[0] - small_t, B), v.dtype)
              for k, v in small.items()}

    def nbytes(leaf) -> int:
        return int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize

    moved = {}
    for name, impls in est_bench._cases(shapes, GAMMA, LAMBDA).items():
        for impl, (fn, args) in impls.items():
            out = jax.eval_shape(fn, *args)
            moved[(name, impl)] = (sum(nbytes(a) for a in args)
                                   + sum(nbytes(leaf) for leaf in jax.tree.leaves(out)))
    return moved


def estimators_part(ctx: Context, T: int, B: int) -> tuple[dict, str]:
    import dataclasses as dc

    from jaxcredit.bench import estimators as est_bench
    from jaxcredit.estimators import returns as R

    plan = ctx.plan["estimators"]
    copy = ctx.copy_bandwidth()
    timings = est_bench.run([(T, B)], plan["repeats"], list(plan["estimators"]), GAMMA, LAMBDA)
    moved = estimator_bytes(T, B)
    rows: dict[str, dict[str, Any]] = {}
    for t in timings:
        rows.setdefault(t.estimator, {})[t.impl] = t
    lines = [f"T={T}, B={B}: copy {copy['gb_per_s']:,.0f} GB/s "
             f"({copy['bytes'] / 2**20:,.0f} MiB read + written in {copy['median_s'] * 1e3:.2f} "
             f"ms); median of {plan['repeats']} calls", "",
             "| estimator | MB moved | scan µs | assoc µs | rlax µs | default | ratio |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    data = []
    for name, impls in rows.items():
        mb = moved[(name, next(iter(impls)))] / 1e6

        def cell(impl: str) -> str:
            if impl not in impls:
                return "-"
            seconds = impls[impl].median_us / 1e6
            share = moved[(name, impl)] / seconds / 1e9 / copy["gb_per_s"]
            return f"{impls[impl].median_us:,.1f} ({share:.0%})"

        default = R.default_method(T) if R.default_method(T) in impls else "scan"
        ratio = (f"{impls[default].median_us / impls['rlax'].median_us:.2f}"
                 if "rlax" in impls else "-")
        lines.append(f"| {name} | {mb:,.1f} | {cell('scan')} | {cell('associative')} | "
                     f"{cell('rlax')} | {default} | {ratio} |")
        for impl, t in impls.items():
            seconds = t.median_us / 1e6
            data.append(dict(dc.asdict(t), bytes=moved[(name, impl)],
                             gb_per_s=moved[(name, impl)] / seconds / 1e9))
    return {"T": T, "B": B, "copy": copy, "timings": data}, "\n".join(lines)


def race_markdown(result: dict, rival: bool) -> str:
    from jaxcredit.bench import train as train_bench

    lines = ["```", train_bench.format_race(result), "```"]
    for label, ratio in result.get("ratios", {}).items():
        lines.append(f"SPS ratio {label}: **{ratio:.3f}** (same process, calls taking turns)")
    if not rival:
        lines.append("PureJaxRL: not raced (no checkout was carried)")
    return "\n".join(lines)


def with_ratios(result: dict) -> dict:
    """The SPS ratio of the first row (jaxcredit) against each other row, as main_race gives."""
    ours = result["cases"][0]["sps"]
    result.setdefault("ratios", {f"jaxcredit/{c['label']}": round(ours / c["sps"], 3)
                                 for c in result["cases"][1:]})
    return result


def ppo_race_part(ctx: Context, envs: int) -> tuple[dict, str]:
    from jaxcredit.bench import races
    from jaxcredit.bench import train as train_bench

    plan = ctx.plan["race"]
    rivals = ctx.rivals()
    if envs == 4:  # the main race: PureJaxRL's own settings, jaxcredit with and without eval
        args = train_bench.TrainBench(total_timesteps=plan["main_timesteps"])
        result = races.main_race(args, rivals, train_bench.check(args).hparams,
                                 plan["repeats"])
    else:
        args = train_bench.TrainBench(big_envs=(envs,), seeds=(),
                                      big_updates=plan["big_updates"], compare_all=True)
        [result] = races.scale_races(args, rivals, train_bench.check(args).hparams,
                                     plan["repeats"])
    result = with_ratios(result)
    return result, race_markdown(result, rivals.ppo is not None)


def seeds_part(ctx: Context, seeds: int) -> tuple[dict, str]:
    from jaxcredit.bench import races
    from jaxcredit.bench import train as train_bench

    plan = ctx.plan["seeds"]
    rivals = ctx.rivals()
    args = train_bench.TrainBench(big_envs=(), seeds=(seeds,),
                                  seeds_timesteps=plan["timesteps"], compare_all=True)
    [result] = races.scale_races(args, rivals, train_bench.check(args).hparams, plan["repeats"])
    result = with_ratios(result)
    text = race_markdown(result, rivals.ppo is not None)
    first = result["cases"][0]
    text += (f"\nPer seed: {first['sps'] / seeds:,.0f} SPS; {plan['timesteps']:,} steps per "
             f"seed, compile {first['compile_s']:.1f} s")
    return result, text


def fitted_part(ctx: Context, fit_steps: int) -> tuple[dict, str]:
    from jaxcredit.bench import races
    from jaxcredit.bench import train as train_bench

    plan = ctx.plan["fitted"]
    args = train_bench.TrainBench(main=False, estimators=(",".join(plan["estimators"]),),
                                  fit_steps=(str(fit_steps),), estimator_envs=plan["envs"],
                                  estimator_steps=plan["steps"],
                                  estimator_updates=plan["updates"])
    checked = train_bench.check(args)
    [result] = races.estimator_races(args, checked.specs, checked.fit_steps,
                                     checked.env_options, checked.hparams, plan["repeats"])
    return result, race_markdown(result, True).replace(
        "\nPureJaxRL: not raced (no checkout was carried)", "")


def minatar_experiment():
    """experiments/minatar_c2a2c/run.py as a module: its cases, sizes and settings."""
    name = "minatar_c2a2c_run"
    if name not in sys.modules:
        path = ROOT / "experiments" / "minatar_c2a2c" / "run.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules[name]


def minatar_setting(plan: dict) -> tuple[Any, int, int, tuple]:
    """(experiment module, env steps per seed, seeds, hidden sizes): the experiment's gpu size
    (the paper's budget) or the smoke size's toys."""
    exp = minatar_experiment()
    gpu = exp.SIZES["gpu"]
    if plan["paper"]:
        return exp, gpu["steps"], gpu["seeds"], tuple(gpu["hidden"])
    return exp, plan["learn_steps"], plan["seeds"], tuple(plan["hidden"])


def minatar_throughput_part(ctx: Context, game: str) -> tuple[dict, str]:
    from jaxcredit import agents
    from jaxcredit.bench import races
    from jaxcredit.bench.timing import race

    plan = ctx.plan["minatar"]
    exp, steps, seeds, hidden = minatar_setting(plan)
    per_call = exp.NUM_ENVS * exp.NUM_STEPS * plan["throughput_updates"]
    cases = []
    for label in ("A2C+GAE", "c2a2c"):
        # The experiment's own case (learner preset, settings), shortened, evaluation off.
        case = exp.case(game, "plain", label, per_call, hidden)
        fields = dict(case.config.flat(), eval_every=0)
        cases.append(races.engine_case(label, agents, fields, case.settings[0], seeds))
    name = (f"A2C {game}-MinAtar, {exp.NUM_ENVS} envs x {exp.NUM_STEPS} steps, "
            f"{'-'.join(map(str, hidden))} MLP, {seeds} seeds vmapped, "
            f"{plan['throughput_updates']} updates per call")
    result = races.race_result(name, race(cases, plan["repeats"]))
    hours = {c["label"]: steps * seeds / c["sps"] / 3600 for c in result["cases"]}
    result["projected_hours_per_run"] = hours
    result["budget_steps_per_seed"] = steps
    text = race_markdown(result, True).replace(
        "\nPureJaxRL: not raced (no checkout was carried)", "")
    text += ("\nOne run at the budget ({:,} steps x {} seeds), training only: ".format(
        steps, seeds) + ", ".join(f"{k} {v * 60:.1f} min" for k, v in hours.items()))
    return result, text


def minatar_learn_estimate(ctx: Context, out: pathlib.Path, label: str) -> float:
    """The learning run's seconds from this table's measured throughput of the same game and
    learner (plus a compile and its evaluations), or the size's guess."""
    plan = ctx.plan["minatar"]
    _, steps, seeds, _ = minatar_setting(plan)
    sps = ctx.cost["minatar_sps"]
    path = out / TABLE_BY_NAME["minatar"].file
    if path.exists():
        part = json.loads(path.read_text())["parts"].get(f"throughput {plan['learn_game']}")
        if part and part.get("status") == "done":
            sps = {c["label"]: c["sps"] for c in part["data"]["cases"]}.get(label, sps)
    return steps * seeds / sps * 1.15 + 2 * ctx.cost["compile_s"]


def minatar_learn_part(ctx: Context, label: str) -> tuple[dict, str]:
    from jaxcredit import experiment as X

    plan = ctx.plan["minatar"]
    exp, steps, seeds, hidden = minatar_setting(plan)
    case = exp.case(plan["learn_game"], "plain", label, steps, hidden)
    with tempfile.TemporaryDirectory(prefix="minatar_", dir=ctx.workdir) as tmp:
        out = pathlib.Path(tmp)
        done = X.run_cases([case], out, num_seeds=seeds, seed=2106)  # the experiment's seed
        run_dir = out / case.name
        final = X.final(run_dir, "eval/return", last=2)
        data = {"learner": label, "game": plan["learn_game"], "steps_per_seed": steps,
                "seeds": seeds, "final_return": final.tolist(),
                "seconds": done[case.name]["seconds"]}
        text = (f"{plan['learn_game']} plain, {label}: final evaluation return "
                f"{X.mean_ci_cell(final, 2)} (mean ± 95% CI over {seeds} seeds; {steps:,} "
                f"steps per seed; {data['seconds']:.0f} s with compile)")
        try:
            gate = X.final(run_dir, "credit/gate_open", last=50)
            data["gate_open"] = gate.tolist()
            text += f"; gate open {X.mean_ci_cell(gate, 3)}"
        except ValueError:  # A2C+GAE has no gate
            pass
    return data, text


def plan_tables(ctx: Context, out: pathlib.Path) -> list[tuple[TableInfo, list[Part]]]:
    """Every table's parts at this size, with their estimates (SIZES' ``cost`` guesses)."""
    plan, cost = ctx.plan, ctx.cost
    tables: list[tuple[TableInfo, list[Part]]] = []

    est = plan["estimators"]
    n_impls = 3 * len(est["estimators"])  # scan, associative, rlax
    tables.append((TABLE_BY_NAME["estimators"], [
        Part(f"T={T} B={B}",
             # compiles, inputs drawn on the host (~20 ns per element), calls at ~3 GB/s...
             n_impls * cost["est_compile_s"] + 8 * T * B * 2e-8
             + n_impls * (est["repeats"] + 3) * max(2e-4, T * 1e-5, T * B * 40 / 1e12),
             lambda T=T, B=B: estimators_part(ctx, T, B))
        for T, B in est["shapes"]]))

    race = plan["race"]
    rival = 1 if ctx.purejaxrl else 0
    calls = race["repeats"] + 1
    parts = [Part("4 envs", (2 + rival) * (cost["compile_s"] + calls * cost["call_4env_s"]),
                  lambda: ppo_race_part(ctx, 4))]
    parts += [Part(f"{n} envs", (1 + rival) * (cost["compile_s"] + calls * cost["call_big_s"]),
                   lambda n=n: ppo_race_part(ctx, n)) for n in race["big_envs"]]
    tables.append((TABLE_BY_NAME["ppo_race"], parts))

    seeds = plan["seeds"]
    tables.append((TABLE_BY_NAME["seed_sweep"], [
        Part(f"{n} seeds", (1 + rival) * (cost["compile_s"] + (seeds["repeats"] + 1)
                                          * cost["call_seeds_s"]),
             lambda n=n: seeds_part(ctx, n)) for n in seeds["seeds"]]))

    fitted = plan["fitted"]
    n_cases = 1 + len(fitted["estimators"])
    tables.append((TABLE_BY_NAME["fitted_credit"], [
        Part(f"estimator_fit_steps={k}",
             n_cases * (cost["fitted_compile_s"] + (fitted["repeats"] + 1)
                        * cost["call_fitted_s"]),
             lambda k=k: fitted_part(ctx, k)) for k in fitted["fit_steps"]]))

    mini = plan["minatar"]
    parts = [Part(f"throughput {g}", 2 * (cost["compile_s"] + (mini["repeats"] + 1)
                                          * cost["call_minatar_s"]),
                  lambda g=g: minatar_throughput_part(ctx, g)) for g in mini["games"]]
    parts += [Part(f"learning {mini['learn_game']} {label}",
                   lambda label=label: minatar_learn_estimate(ctx, out, label),
                   lambda label=label: minatar_learn_part(ctx, label)) for label in mini["learn"]]
    tables.append((TABLE_BY_NAME["minatar"], parts))
    return tables


# ----------------------------------------------------------------------------------------------
# Command
# ----------------------------------------------------------------------------------------------


def check(out: pathlib.Path, size: str) -> int:
    """0 if ``out`` holds every part of ``size`` done, its device.md and results.md, and no
    more files than a device call brings back; else 1, each miss printed."""
    ctx = Context(size, None, out)
    misses = [name for name in ("device.md", "results.md") if not (out / name).is_file()]
    for info, parts in plan_tables(ctx, out):
        path = out / info.file
        doc = json.loads(path.read_text()) if path.exists() else {"parts": {}}
        misses += [f"{info.file}: {p.key} ({doc['parts'].get(p.key, {}).get('status', 'absent')})"
                   for p in parts if doc["parts"].get(p.key, {}).get("status") != "done"]
    files = sorted(p.name for p in out.iterdir())
    if len(files) > MAX_FILES:
        misses.append(f"{len(files)} files, more than the {MAX_FILES} a device call brings "
                      f"back: {files}")
    for miss in misses:
        print(f"check {out}: missing {miss}")
    if not misses:
        print(f"check {out}: every part of size {size} done; files: {' '.join(files)}")
    return 1 if misses else 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--out", help="folder of the tables (run.sh: $OUT)")
    parser.add_argument("--deadline", type=float, help="epoch seconds by which to be done")
    parser.add_argument("--budget-s", type=float, default=290.0,
                        help="seconds from now, where no --deadline is given")
    parser.add_argument("--allow-cpu", action="store_true", help="run even where JAX sees no GPU")
    parser.add_argument("--purejaxrl", default=str(ROOT / "accelerator" / "purejaxrl"),
                        help="PureJaxRL checkout (prepare.sh's layout); races run without it "
                        "where it is missing")
    parser.add_argument("--only", default="", help="comma-separated table names, e.g. minatar")
    parser.add_argument("--retry-failed", action="store_true",
                        help="run parts again that raised an error in an earlier call")
    parser.add_argument("--skip-running", action="store_true",
                        help="skip parts whose process died (run.sh's restart after a crash)")
    parser.add_argument("--no-purejaxrl", action="store_true",
                        help="let the gpu size race without PureJaxRL")
    parser.add_argument("--render", metavar="DIR", help="print the markdown of DIR's tables")
    parser.add_argument("--into", metavar="FILE",
                        help="with --render: write them into FILE between its gpu-tables "
                             "markers (RESULTS.md's section 'On a GPU') instead of printing")
    parser.add_argument("--check", metavar="DIR",
                        help="exit 1 unless every part of --size is done in DIR (rehearse.sh)")
    args = parser.parse_args(argv)
    if args.render:
        text = render(pathlib.Path(args.render))
        if not args.into:
            sys.stdout.write(text)
            return 0
        try:
            write_atomic(pathlib.Path(args.into), into_section(
                pathlib.Path(args.into).read_text(), text))
        except (OSError, ValueError) as error:
            print(f"tables.py: {error}", file=sys.stderr)
            return 2
        return 0
    if args.check:
        return check(pathlib.Path(args.check), args.size)
    if not args.out:
        parser.error("--out is required")
    deadline = args.deadline or time.time() + args.budget_s
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in TABLE_BY_NAME]
    if unknown:
        parser.error(f"unknown table(s) {unknown}; known: {', '.join(TABLE_BY_NAME)}")

    import jax  # only now: --render needs no jax

    if jax.default_backend() == "cpu" and not args.allow_cpu:
        print(f"tables.py: JAX sees no GPU (backend cpu, devices {jax.devices()}); "
              "pass --allow-cpu to run anyway", file=sys.stderr)
        return 3
    purejaxrl = args.purejaxrl if pathlib.Path(args.purejaxrl, "purejaxrl", "ppo.py").is_file() \
        else None
    if purejaxrl is None and args.size == "gpu" and not args.no_purejaxrl:
        print(f"tables.py: no PureJaxRL checkout at {args.purejaxrl} (accelerator/prepare.sh "
              "makes it; carry accelerator/purejaxrl), or pass --no-purejaxrl", file=sys.stderr)
        return 2
    if purejaxrl is None:
        log(f"no PureJaxRL checkout at {args.purejaxrl}: races run jaxcredit alone")
    commit = pathlib.Path(args.purejaxrl, "COMMIT")
    section, stamp = device_section(args.size, purejaxrl and (
        commit.read_text().strip() if commit.exists() else "unknown commit"))
    with (out / "device.md").open("a") as file:  # one section per call
        file.write(("\n" if file.tell() else "") + section)
    log("device:\n" + section)
    write_atomic(out / "results.md", render(out))

    with tempfile.TemporaryDirectory(prefix="jaxcredit_tables_") as tmp:
        ctx = Context(args.size, purejaxrl, pathlib.Path(tmp))
        tables = [(info, parts) for info, parts in plan_tables(ctx, out)
                  if not wanted or info.name in wanted]
        budget = Budget(deadline)
        skipped = run_tables(tables, out, args.size, budget, stamp, args.retry_failed,
                             args.skip_running)
    write_atomic(out / "results.md", render(out))
    if skipped:
        log("left for the next call: " + "; ".join(f"{f}: {', '.join(keys)}"
                                                 for f, keys in skipped.items()))
    else:
        log("every part is done or was skipped for a reason logged above")
    log(f"wrote {out / 'results.md'}; estimates ran x{budget.factor:.2f} of their guess")
    return 0


if __name__ == "__main__":
    sys.exit(main())

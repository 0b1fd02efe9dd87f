"""The host loop: a run as a few compiled chunks, with progress, metrics and checkpoints between.

``run_experiment`` trains a population (settings × seeds, ``jaxcredit.agents.sweep``) for the
config's updates, split into chunks of ``ceil(U / num_chunks)`` updates (at most two chunk
lengths, so at most two compiles). After each chunk, on the host:

1. the chunk's per-update metrics are written to ``metrics/`` (one Parquet file per chunk);
2. the whole population train state is checkpointed with orbax (params, optimiser state,
   environments, RNG keys, update counters);
3. the progress bar shows env steps, steps per second and the mean episode return.

Resume guarantee: every chunk is the same compiled ``lax.scan`` of ``Engine.update_step`` and the
train state holds everything that carries over between updates, so a run resumed from a chunk
checkpoint produces the same numbers as the uninterrupted run (bitwise on CPU; the tests check it).
Rows that a killed run wrote after its last checkpoint are dropped on resume before continuing.

Run directory layout::

    <out>/config.json     resolved config, settings, seeds, package versions
    <out>/metrics/        tidy per-update metrics, one Parquet file per chunk (runlog)
    <out>/metrics.csv     the same rows as CSV, exported at the end of each call
    <out>/curves.png      mean ± 95% CI of the episode return per setting (plotting)
    <out>/checkpoints/    orbax checkpoint of the last chunk (keep_checkpoints: more)

Memory: before the first chunk the chunk program is compiled and its memory per device (XLA's
analysis) compared with the device's limit; a program over it runs each device's members in
sequential groups inside the same program, or the run is refused with what would fit
(``jaxcredit.device_memory``, ``memory_limit`` / ``member_batch``).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import pathlib
import sys
import time
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from jaxcredit import loggers as jaxlog
from jaxcredit import credit as credit_lib
from jaxcredit import device_memory, distributed, plotting, runlog, stats
from jaxcredit.agents import sweep
from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.checkpoint import Checkpointer
from jaxcredit.watchdog import ChunkWatchdog, maybe_stall


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What defines a run besides the train config.

    Attributes:
      settings: hyper-parameter settings (dicts of ``Hparams`` fields; missing ones take defaults).
      num_seeds: seeds per setting.
      seed: master seed; seed keys are ``split(key(seed), num_seeds)``.
      num_chunks: compiled chunks the run is split into (host work happens between them).
      swept: names of the hyper-parameters that vary (for labels).
      defaults_from: ``(field, source)`` pairs: the settings that came from somewhere other
        than the engine's defaults or the user, e.g. an environment's recommended settings
        (``jaxcredit train``); written to ``config.json`` so a reader knows where they came from.
    """

    settings: tuple = ({},)
    num_seeds: int = 1
    seed: int = 0
    num_chunks: int = 10
    swept: tuple = ()
    defaults_from: tuple = ()

    def to_dict(self) -> dict:
        """The JSON form written to ``config.json`` (lists for tuples)."""
        return {"settings": [dict(s) for s in self.settings], "num_seeds": self.num_seeds,
                "seed": self.seed, "num_chunks": self.num_chunks, "swept": list(self.swept),
                "defaults_from": dict(self.defaults_from)}

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        """The spec of a ``config.json`` (its other keys are ignored)."""
        convert = {"settings": tuple, "swept": tuple,
                   "defaults_from": lambda pairs: tuple(dict(pairs).items())}
        return cls(**{f.name: convert.get(f.name, lambda v: v)(d[f.name])
                      for f in dataclasses.fields(cls) if f.name in d})


# Evaluation read-outs that are sampled, not exact or the task's own (the run's summary names
# the others).
SAMPLED_EVAL_METRICS = ("eval/return", "eval/return_greedy", "eval/length")


# Compiled functions are cached per (config, chunk length, mesh), so repeated runs of one config
# in a process (resume, notebooks, tests) compile once.
@functools.lru_cache(maxsize=8)
def _engine(config: TrainConfig):
    return make_engine(config)


@functools.lru_cache(maxsize=16)
def _init_fn(engine, mesh):
    return sweep.population_jit(engine.init, mesh)


@functools.lru_cache(maxsize=16)
def _chunk_fn(engine, num_updates: int, mesh, member_batch: int | None = None):
    return sweep.population_jit(lambda s, h: engine.run(s, h, num_updates), mesh, num_args=2,
                                member_batch=member_batch)


_COMPILED: dict = {}


def _compiled_chunk(engine, num_updates: int, mesh, state, hparams,
                    member_batch: int | None = None):
    """The chunk program compiled ahead of time for these argument shapes (cached)."""
    shapes = jax.tree.map(lambda x: (x.shape, str(x.dtype)), (state, hparams))
    key = (engine, num_updates, mesh, str(shapes), member_batch)
    if key not in _COMPILED:
        if len(_COMPILED) >= 16:  # long-lived processes (experiments) run many configs
            _COMPILED.clear()
        _COMPILED[key] = _chunk_fn(engine, num_updates, mesh, member_batch).lower(
            state, hparams).compile()
    return _COMPILED[key]


def memory_limit_bytes(memory_limit: str | int | None, mesh) -> int | None:
    """The bytes per device a chunk program may use: ``"auto"`` (the device's limit,
    ``jaxcredit.device_memory``), ``"off"``/None (no check) or a size (``"4G"``, bytes).
    Processes of a multi-process run agree on the smallest, so that all compile the same
    program."""
    if memory_limit is None or str(memory_limit).lower() == "off":
        return None
    if str(memory_limit).lower() == "auto":
        limit = device_memory.device_limit(list(mesh.devices.flat))
    else:
        limit = device_memory.parse_bytes(memory_limit)
    if jax.process_count() > 1:
        every = multihost_utils.process_allgather(np.int64(-1 if limit is None else limit))
        known = [int(v) for v in np.ravel(every) if v >= 0]
        limit = min(known) if known else None
    return limit


def fit_chunk_programs(engine, lengths, mesh, state, hparams, limit, member_batch=None,
                       recorded=None) -> tuple[dict, device_memory.Fitted]:
    """Compiles a program per chunk length, all with the member batch that fits ``limit``
    (fitted on the longest chunk). ``recorded`` is the batch of the run being resumed: kept when it
    still fits, so that the resumed run computes what the uninterrupted one did."""
    members = jax.tree.leaves(hparams)[0].shape[0] // mesh.devices.size
    longest = max(lengths)

    def compile_longest(batch):
        return _compiled_chunk(engine, longest, mesh, state, hparams, batch)

    fitted = None
    if member_batch is None and recorded is not None:
        try:
            fitted = device_memory.fit_program(compile_longest, members, limit, recorded)
        except ValueError:
            fitted = None  # the saved batch no longer fits here: choose again
    if fitted is None:
        fitted = device_memory.fit_program(compile_longest, members, limit, member_batch)
    programs = {n: _compiled_chunk(engine, n, mesh, state, hparams, fitted.member_batch)
                for n in sorted(set(lengths))}
    return programs, fitted


def check_oracle_settings(engine, settings) -> None:
    """The credit transform's check of the run's γ values (``jaxcredit.credit.check_gammas``:
    an oracle exact only at γ = 1 refuses any other)."""
    credit = getattr(engine, "credit", None)
    if credit is not None:
        credit_lib.check_gammas(credit, [float(s.get("gamma", 1.0)) for s in settings])


def chunk_lengths(num_updates: int, num_chunks: int, eval_every: int = 0) -> list[int]:
    """Updates per chunk: whole evaluation blocks, in at most two lengths.

    With evaluation every E updates a run is B = U // E blocks plus a remainder of U mod E
    updates, which joins the last chunk. Chunks hold k blocks each, k = ceil(B / num_chunks), or
    a slightly larger divisor of B when one exists (all chunks equal: one compile, not two).
    Either way every chunk length is compiled before the run starts.
    """
    block = eval_every or 1
    blocks, rest = divmod(num_updates, block)
    if blocks == 0:
        return [num_updates]
    wanted = max(1, min(num_chunks, blocks))
    per = math.ceil(blocks / wanted)
    per = next((k for k in range(per, math.ceil(2 * blocks / wanted) + 1) if blocks % k == 0),
               per)
    lengths = [per * block] * (blocks // per)
    if blocks % per:
        lengths.append((blocks % per) * block)
    lengths[-1] += rest
    return lengths


def prepare_out_dir(out: pathlib.Path, resume: bool, force: bool) -> None:
    """Checks ``out`` before anything is computed; never deletes an earlier run.

    ``force`` moves an existing directory aside to ``<out>.old-<UTC time>``.
    """
    if resume:
        if not (out / "config.json").exists():
            raise ValueError(f"cannot resume: {out} holds no run (no config.json)")
        return
    if _holds_run(out):
        if not force:
            raise ValueError(f"{out} already exists; pass --resume to continue it or --force to "
                             "start over (the old directory is moved aside, not deleted)")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        aside = out.with_name(f"{out.name}.old-{stamp}")
        out.rename(aside)
        print(f"moved the previous run in {out} to {aside}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)


def _holds_run(out: pathlib.Path) -> bool:
    """Whether ``out`` holds a run. A folder with nothing but the writer's lock (a run killed
    before it wrote its config) does not."""
    return out.exists() and any(p.name != runlog.LOCK_FILE and not p.name.endswith(".tmp")
                                for p in out.iterdir())


def check_out_dir(out: pathlib.Path, resume: bool, force: bool) -> None:
    """Raises the ValueError that claiming ``out`` would raise, touching nothing: a run that will
    be refused (a run already there, another writer) says so before it compiles."""
    if resume:
        prepare_out_dir(out, resume=True, force=False)
    elif not force and _holds_run(out):
        prepare_out_dir(out, resume=False, force=False)  # raises
    if out.exists():
        runlog.check_unlocked(out)


def run_experiment(config: TrainConfig, spec: RunSpec, out: str | pathlib.Path, *,
                   resume: bool = False, force: bool = False, progress: bool = True,
                   max_chunks: int | None = None, plot: bool = True, csv: bool = True,
                   mesh: Any = None, env: Any = None, env_params: Any = None, loggers: tuple = (),
                   watchdog_multiple: float = 0.0, watchdog_floor: float = 600.0,
                   memory_limit: str | int | None = "auto",
                   member_batch: int | None = None, keep_checkpoints: int = 1) -> dict:
    """Trains (or resumes) a run into ``out`` and returns a small summary dict.

    Args:
      config, spec: what to run. On ``resume`` both are read from ``out/config.json`` instead.
      out: run directory.
      resume: continue the run in ``out`` from its last checkpoint.
      force: move an existing ``out`` aside and start a new run.
      progress: show a tqdm bar.
      max_chunks: stop after this many chunks in this call (to split a run across calls).
      plot: write ``curves.png`` at the end.
      csv: export the metrics to ``metrics.csv`` at the end (the Parquet chunks in
        ``metrics/`` are the record either way; large sweeps may skip the export).
      mesh: device mesh for the population axis (default: all devices).
      env, env_params: an environment instance instead of ``config.env``.
      loggers: extra per-member loggers, ``("tensorboard", "wandb")`` (``jaxcredit.loggers``).
      watchdog_multiple, watchdog_floor: end the process with a stack dump when a chunk runs
        longer than ``max(floor, multiple × the longest chunk)`` seconds
        (``jaxcredit.watchdog``; ``multiple = 0``, the default here, turns it off).
      memory_limit: bytes per device the chunk program may use: ``"auto"`` (the device's
        limit), a size such as ``"4G"``, or ``"off"``. A program over it runs each device's
        members in sequential groups, or the call is refused with what would fit
        (``jaxcredit.device_memory``).
      member_batch: members each device runs at once (default: all, or as many as fit).
      keep_checkpoints: checkpoints kept, the newest (0: all). One is enough to resume: the
        previous one is deleted only after the new one is complete.

    Returns:
      ``{"out", "updates", "finished", "metric", "final_return", "task_finals", "members",
      "compile_seconds", "ranking", "program_seconds", "host_seconds", "member_batch",
      "memory_per_device", "memory_limit"}``: ``final_return`` is the mean over members
      of the last value of ``metric`` (the evaluation return where the run evaluates);
      ``ranking`` lists the settings from best to worst by it, one line each, when there are
      several; ``program_seconds`` is the time in the compiled chunks (metrics transfer
      included), ``host_seconds`` the rest of the loop (metrics files, loggers, checkpoints);
      ``member_batch`` the members each device ran at once (None: all), ``memory_per_device``
      the chunk program's bytes per device (None where XLA does not say), ``memory_limit`` the
      limit it was fitted to (None: none).

    A second process that tries to write the same run directory is refused with a ValueError
    while this one holds its lock (``runlog.lock_run_dir``).
    """
    held: list = []  # the run directory's lock, released however this call ends
    try:
        return _run_experiment(config, spec, pathlib.Path(out), resume, force, progress,
                               max_chunks, (plot, csv), mesh, env, env_params, loggers, held,
                               (watchdog_multiple, watchdog_floor),
                               (memory_limit, member_batch, keep_checkpoints))
    finally:
        for lock in held:
            lock.close()


def _run_experiment(config, spec, out: pathlib.Path, resume, force, progress, max_chunks,
                    outputs: tuple, mesh, env, env_params, loggers, held: list,
                    watch: tuple, execution: tuple) -> dict:
    """:func:`run_experiment`'s body; locks it takes go into ``held``."""
    plot, csv = outputs
    memory_limit, member_batch, keep_checkpoints = execution
    if keep_checkpoints < 0:
        raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
    if resume:
        prepare_out_dir(out, resume=True, force=False)
        saved = runlog.read_json(out / "config.json")
        config = TrainConfig.from_dict(saved["config"])
        spec = RunSpec.from_dict(saved)
    # Everything that can fail on bad input runs before the output directory is touched.
    engine = (make_engine(config, env, env_params) if env is not None
              else _engine(config.resolved()))
    config = engine.config
    population = sweep.make_population(spec.settings, spec.num_seeds, spec.seed)
    check_oracle_settings(engine, population.settings)
    mesh = sweep.sweep_mesh() if mesh is None else mesh
    sweep.check_divisible(population.size, mesh)
    # Multi-process: every process runs this function on the same run; process 0 alone holds
    # the lock and writes the files (docs/scaling.md).
    writes = jax.process_index() == 0
    distributed.check_same_everywhere(
        repr((config.to_dict(), population.settings, spec, str(out), resume, force, max_chunks)),
        "run (config, settings, seeds or --out)")
    distributed.on_first_process(functools.partial(check_out_dir, out, resume, force))
    # Where a resumed run stands, and its chunk programs fitted to the devices' memory, come
    # before the directory is touched: a sweep that does not fit is refused without a trace.
    saved_step, saved = _saved_position(out) if resume else (None, {})
    done_updates = int(saved.get("update", 0))
    lengths = chunk_lengths(config.num_updates, spec.num_chunks, config.evaluation.every)
    boundaries = np.cumsum([0] + lengths)
    if done_updates not in boundaries:
        raise ValueError(f"checkpoint at update {done_updates} is not a chunk boundary of "
                         f"{list(boundaries)}")
    todo = lengths[int(np.searchsorted(boundaries, done_updates)):]
    if max_chunks is not None:
        todo = todo[:max_chunks]
    hparams = sweep.shard(population.hparams, mesh)
    keys = sweep.shard(population.keys, mesh)
    init = _init_fn(engine, mesh)
    # Compile every chunk length first, so that no compile falls inside a timed chunk.
    compile_start = time.perf_counter()
    limit = memory_limit_bytes(memory_limit, mesh)
    programs, fitted = (fit_chunk_programs(engine, todo, mesh, jax.eval_shape(init, keys),
                                           hparams, limit, member_batch, saved.get("member_batch"))
                        if todo else ({}, device_memory.Fitted(
                            None, saved.get("member_batch"), None, limit)))
    compile_seconds = time.perf_counter() - compile_start

    distributed.on_first_process(functools.partial(
        _claim_run_dir, out, resume, force, held, config, population, spec, mesh))
    progress = progress and writes  # one progress bar per run, not one per process
    state = init(keys)
    metric_names = sorted(jax.eval_shape(
        lambda s, h: engine.run(s, h, 1)[1],
        jax.tree.map(_member_shape, state), jax.tree.map(_member_shape, hparams)))
    headline = stats.headline_metric(metric_names)
    writer = runlog.MetricsWriter(out, metric_names) if writes else None
    members = list(zip(population.hparam_index.tolist(), population.seed_index.tolist()))
    extra_loggers = (jaxlog.make_loggers(loggers, out, members, config.to_dict())
                     if writes and loggers else [])
    checkpointer = Checkpointer(out / "checkpoints", max_to_keep=keep_checkpoints or None)
    if saved_step is not None:
        state, _ = checkpointer.restore(state, saved_step)
    if resume and writes:
        writer.truncate(done_updates)
        # An earlier export goes stale as soon as this call writes; re-exported at the end (csv).
        (out / runlog.CSV_EXPORT).unlink(missing_ok=True)

    steps_per_update = config.steps_per_update
    if progress and todo:
        print(f"{out.name}: compiled {len(programs)} chunk program(s) in {compile_seconds:.1f} s"
              + _memory_line(fitted, population.size // mesh.devices.size), flush=True)
    bar = tqdm(total=config.num_updates * steps_per_update * population.size, unit="step",
               unit_scale=True, initial=done_updates * steps_per_update * population.size,
               disable=not progress, dynamic_ncols=True, desc=out.name)
    last_return = float("nan")  # mean over members of the latest value of the headline metric
    watchdog = (ChunkWatchdog(out, *watch) if writes and watch[0] > 0 else None)
    # Wall time of the loop, and the part spent in the compiled chunks (with the metrics'
    # transfer); the rest goes to metrics files, loggers, checkpoints and progress.
    loop_start, program_seconds = time.perf_counter(), 0.0
    try:
        for length in todo:
            start = time.perf_counter()
            if watchdog is not None:
                watchdog.chunk_started()
            maybe_stall(out, int(np.searchsorted(boundaries, done_updates)) + 1)  # test hook
            state, metrics = programs[length](state, hparams)
            metrics = (multihost_utils.process_allgather(metrics, tiled=True)
                       if jax.process_count() > 1 else jax.device_get(metrics))
            if watchdog is not None:
                watchdog.chunk_finished()
            elapsed = time.perf_counter() - start
            program_seconds += elapsed
            if writes:
                writer.append(metrics, population.hparam_index, population.seed_index,
                              done_updates, steps_per_update)
                jaxlog.log_chunk(extra_loggers, metrics, done_updates, steps_per_update)
            done_updates += length
            checkpointer.save(done_updates, state,
                              {"update": done_updates, "member_batch": fitted.member_batch})
            returns = np.asarray(metrics[headline], np.float64)
            if np.isfinite(returns).any():
                last_return = float(np.nanmean(plotting.forward_fill(returns)[:, -1]))
            chunk_steps = length * steps_per_update * population.size
            bar.set_postfix(sps=f"{chunk_steps / elapsed:,.0f}",
                            **{headline.replace("/", "_"): f"{last_return:.3g}"})
            bar.update(chunk_steps)
    finally:
        loop_seconds = time.perf_counter() - loop_start
        bar.close()
        checkpointer.close()
        if watchdog is not None:
            watchdog.close()
        for logger in extra_loggers:
            logger.close()
    finished = done_updates == config.num_updates
    ranking, task_finals = [], {}
    if done_updates > 0 and writes:
        table = runlog.read_metrics(out)
        curves = plotting.curves_by_setting(table, headline)
        if csv:
            runlog.export_csv(out)
        # NaN when no episode ended yet (a short run of long episodes): the run still reports.
        finals = [v[:, -1] for _, v in curves.values() if v.shape[1]]
        last_return = float(np.nanmean(finals)) if finals else float("nan")
        # The exact J(π) and the task's own metrics (P(optimal first action), ...): what a
        # credit task is judged by, where the sampled return is noisy.
        for name in metric_names:
            if name.startswith("eval/") and name not in SAMPLED_EVAL_METRICS + (headline,):
                task = [v[:, -1] for _, v in plotting.curves_by_setting(table, name).values()
                        if v.shape[1]]
                task_finals[name] = float(np.nanmean(task)) if task else float("nan")
        metric = stats.ranking_metric(metric_names)
        ranked = (curves if metric == headline
                  else plotting.curves_by_setting(runlog.read_metrics(out), metric))
        ranking = stats.setting_ranking(ranked, population.settings, spec.swept, metric)
        if plot:
            plotting.plot_runs([out], out / "curves.png", headline)
    return {"out": str(out), "updates": done_updates, "finished": finished,
            "final_return": last_return, "metric": headline, "members": population.size,
            "task_finals": task_finals,
            "compile_seconds": compile_seconds if todo else 0.0, "ranking": ranking,
            "program_seconds": program_seconds,
            "host_seconds": max(loop_seconds - program_seconds, 0.0),
            "member_batch": fitted.member_batch,
            "memory_per_device": fitted.memory.total if fitted.memory else None,
            "memory_limit": fitted.limit}


def _saved_position(out: pathlib.Path) -> tuple[int | None, dict]:
    """The last checkpoint's step and record (update, member batch) of the run in ``out``."""
    checkpointer = Checkpointer(out / "checkpoints")
    try:
        step = checkpointer.latest_step()
        return step, (checkpointer.read_record(step) if step is not None else {})
    finally:
        checkpointer.close()


def _memory_line(fitted: device_memory.Fitted, members: int) -> str:
    if fitted.memory is None:
        return ""
    line = f"; {device_memory.format_bytes(fitted.memory.total)} per device"
    if fitted.limit is not None:
        line += f" (limit {device_memory.format_bytes(fitted.limit)})"
    if fitted.member_batch is not None:
        line += f", {fitted.member_batch} of its {members} members at a time"
    return line


def _claim_run_dir(out: pathlib.Path, resume: bool, force: bool, held: list, config, population,
                   spec: RunSpec, mesh) -> None:
    """Process 0's part of starting a run: the writer's lock, a fresh directory, config.json."""
    if resume or (force and out.exists()):
        held.append(runlog.lock_run_dir(out))  # one writer per run directory
    if resume:
        return
    prepare_out_dir(out, resume=False, force=force)
    held.append(runlog.lock_run_dir(out))  # (the lock taken above moved aside with the run)
    spec = dataclasses.replace(spec, settings=tuple(population.settings))
    runlog.write_json(out / "config.json", {
        "config": config.to_dict(), **spec.to_dict(), "num_updates": config.num_updates,
        "steps_per_update": config.steps_per_update,
        "devices": [str(d) for d in mesh.devices.flat], "versions": runlog.package_versions(),
    })


def _member_shape(x) -> jax.ShapeDtypeStruct:
    """The shape of one member of a population leaf (no computation, so no cross-process
    program for a global array)."""
    return jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

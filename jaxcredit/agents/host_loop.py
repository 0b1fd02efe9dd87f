"""The host loop: a run as a few compiled chunks, with progress, metrics and checkpoints between.

``run_experiment`` trains a population (settings × seeds, ``jaxcredit.sweep``) for the config's
updates, split into chunks of ``ceil(U / num_chunks)`` updates (at most two chunk lengths, so at
most two compiles). After each chunk, on the host:

1. the chunk's per-update metrics are appended to ``metrics.csv``;
2. the whole population train state is checkpointed with orbax (params, optimiser state,
   environments, RNG keys, update counters);
3. the progress bar shows env steps, steps per second and the mean episode return.

Resume guarantee: every chunk is the same compiled ``lax.scan`` of ``Engine.update_step`` and the
train state holds everything that carries over between updates, so a run resumed from a chunk
checkpoint produces the same numbers as the uninterrupted run (bitwise on CPU; the tests check it).
Rows that a killed run wrote after its last checkpoint are dropped on resume before continuing.

Run directory layout::

    <out>/config.json     resolved config, settings, seeds, package versions
    <out>/metrics.csv     tidy per-update metrics (runlog)
    <out>/curves.png      mean ± 95% CI of the episode return per setting (plotting)
    <out>/checkpoints/    orbax checkpoints, the last two chunks
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import pathlib
import time
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from jaxcredit import plotting, runlog, sweep
from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.checkpoint import Checkpointer


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What defines a run besides the train config.

    Attributes:
      settings: hyper-parameter settings (dicts of ``Hparams`` fields; missing ones take defaults).
      num_seeds: seeds per setting.
      seed: master seed; seed keys are ``split(key(seed), num_seeds)``.
      num_chunks: compiled chunks the run is split into (host work happens between them).
      swept: names of the hyper-parameters that vary (for labels).
    """

    settings: tuple = ({},)
    num_seeds: int = 1
    seed: int = 0
    num_chunks: int = 10
    swept: tuple = ()


# Compiled functions are cached per (config, chunk length, mesh), so repeated runs of one config
# in a process (resume, notebooks, tests) compile once.
@functools.lru_cache(maxsize=8)
def _engine(config: TrainConfig):
    return make_engine(config)


@functools.lru_cache(maxsize=16)
def _init_fn(engine, mesh):
    return sweep.population_jit(engine.init, mesh)


@functools.lru_cache(maxsize=16)
def _chunk_fn(engine, num_updates: int, mesh):
    return sweep.population_jit(lambda s, h: engine.run(s, h, num_updates), mesh, num_args=2)


def chunk_lengths(num_updates: int, num_chunks: int) -> list[int]:
    """Updates per chunk: ``ceil(U / num_chunks)`` each, the remainder last."""
    size = math.ceil(num_updates / max(1, min(num_chunks, num_updates)))
    lengths = [size] * (num_updates // size)
    if num_updates % size:
        lengths.append(num_updates % size)
    return lengths


def prepare_out_dir(out: pathlib.Path, resume: bool, force: bool) -> None:
    """Checks ``out`` before anything is computed; never deletes an earlier run.

    ``force`` moves an existing directory aside to ``<out>.old-<UTC time>``.
    """
    if resume:
        if not (out / "config.json").exists():
            raise ValueError(f"cannot resume: {out} holds no run (no config.json)")
        return
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ValueError(f"{out} already exists; pass --resume to continue it or --force to "
                             "start over (the old directory is moved aside, not deleted)")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        out.rename(out.with_name(f"{out.name}.old-{stamp}"))
    out.mkdir(parents=True, exist_ok=True)


def run_experiment(config: TrainConfig, spec: RunSpec, out: str | pathlib.Path, *,
                   resume: bool = False, force: bool = False, progress: bool = True,
                   max_chunks: int | None = None, plot: bool = True, mesh: Any = None,
                   env: Any = None, env_params: Any = None) -> dict:
    """Trains (or resumes) a run into ``out`` and returns a small summary dict.

    Args:
      config, spec: what to run. On ``resume`` both are read from ``out/config.json`` instead.
      out: run directory.
      resume: continue the run in ``out`` from its last checkpoint.
      force: move an existing ``out`` aside and start a new run.
      progress: show a tqdm bar.
      max_chunks: stop after this many chunks in this call (to split a run across calls).
      plot: write ``curves.png`` at the end.
      mesh: device mesh for the population axis (default: all devices).
      env, env_params: an environment instance instead of ``config.env``.
    """
    out = pathlib.Path(out)
    if resume:
        prepare_out_dir(out, resume=True, force=False)
        saved = runlog.read_json(out / "config.json")
        config = TrainConfig.from_dict(saved["config"])
        spec = RunSpec(settings=tuple(saved["settings"]), num_seeds=saved["num_seeds"],
                       seed=saved["seed"], num_chunks=saved["num_chunks"],
                       swept=tuple(saved.get("swept", ())))
    # Everything that can fail on bad input runs before the output directory is touched.
    engine = (make_engine(config, env, env_params) if env is not None
              else _engine(config.resolved()))
    config = engine.config
    population = sweep.make_population(spec.settings, spec.num_seeds, spec.seed)
    mesh = sweep.sweep_mesh() if mesh is None else mesh
    sweep.check_divisible(population.size, mesh)
    # Multi-host: every process runs this function; process 0 writes the files (docs/engine.md).
    writes = jax.process_index() == 0
    if not resume and writes:
        prepare_out_dir(out, resume=False, force=force)
        runlog.write_json(out / "config.json", {
            "config": config.to_dict(), "settings": list(population.settings),
            "num_seeds": spec.num_seeds, "seed": spec.seed, "num_chunks": spec.num_chunks,
            "swept": list(spec.swept), "num_updates": config.num_updates,
            "steps_per_update": config.steps_per_update,
            "devices": [str(d) for d in mesh.devices.flat], "versions": runlog.package_versions(),
        })
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("jaxcredit:run-directory-ready")

    hparams = sweep.shard(population.hparams, mesh)
    state = _init_fn(engine, mesh)(sweep.shard(population.keys, mesh))
    metric_names = sorted(jax.eval_shape(
        lambda s, h: engine.update_step(s, h)[1],
        jax.tree.map(lambda x: x[0], state), jax.tree.map(lambda x: x[0], hparams)))
    writer = runlog.MetricsWriter(out / "metrics.csv", metric_names) if writes else None
    checkpointer = Checkpointer(out / "checkpoints")
    done_updates = 0
    if resume and checkpointer.latest_step() is not None:
        state, record = checkpointer.restore(state)
        done_updates = int(record["update"])
    if resume and writes:
        writer.truncate(done_updates)

    lengths = chunk_lengths(config.num_updates, spec.num_chunks)
    boundaries = np.cumsum([0] + lengths)
    if done_updates not in boundaries:
        raise ValueError(f"checkpoint at update {done_updates} is not a chunk boundary of "
                         f"{list(boundaries)}")
    todo = lengths[int(np.searchsorted(boundaries, done_updates)):]
    if max_chunks is not None:
        todo = todo[:max_chunks]
    steps_per_update = config.steps_per_update
    bar = tqdm(total=config.num_updates * steps_per_update * population.size, unit="step",
               unit_scale=True, initial=done_updates * steps_per_update * population.size,
               disable=not progress, dynamic_ncols=True, desc=out.name)
    last_return = float("nan")  # mean over members of the latest finished episode's return
    try:
        for length in todo:
            start = time.perf_counter()
            state, metrics = _chunk_fn(engine, length, mesh)(state, hparams)
            metrics = (multihost_utils.process_allgather(metrics, tiled=True)
                       if jax.process_count() > 1 else jax.device_get(metrics))
            elapsed = time.perf_counter() - start
            if writes:
                writer.append(metrics, population.hparam_index, population.seed_index,
                              done_updates, steps_per_update)
            done_updates += length
            checkpointer.save(done_updates, state, {"update": done_updates})
            returns = np.asarray(metrics["episode_return"], np.float64)
            if np.isfinite(returns).any():
                last_return = float(np.nanmean(plotting.forward_fill(returns)[:, -1]))
            chunk_steps = length * steps_per_update * population.size
            bar.set_postfix(sps=f"{chunk_steps / elapsed:,.0f}", ret=f"{last_return:.1f}")
            bar.update(chunk_steps)
    finally:
        bar.close()
        checkpointer.close()
    finished = done_updates == config.num_updates
    if done_updates > 0 and writes:
        curves = plotting.curves_by_setting(runlog.read_metrics(out / "metrics.csv"),
                                            "episode_return")
        last_return = float(np.nanmean([v[:, -1] for _, v in curves.values()]))
        if plot:
            plotting.plot_runs([out], out / "curves.png")
    return {"out": str(out), "updates": done_updates, "finished": finished,
            "final_return": last_return, "members": population.size}


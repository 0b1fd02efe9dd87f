"""The ``jaxcredit`` command line.

    jaxcredit train --algo ppo --env CartPole-v1 --num-envs 2048 --num-seeds 16 \\
        --total-timesteps 5e6 --out runs/x
    jaxcredit train --out runs/x --resume
    jaxcredit train --algo a2c --estimator hca_return --estimator-option model=oracle \\
        --env DelayedEffect --env-option n=10 --gamma 1 --out runs/h
    jaxcredit sweep --grid lr=1e-3,3e-4 lambda=0.9,0.95 --num-seeds 8 --out runs/grid
    jaxcredit sweep --random lr=1e-5:1e-2:log ent-coef=0:0.05 --num-samples 16 --out runs/rs
    srun jaxcredit sweep --distributed --grid lr=1e-3,3e-4 --out runs/c  # docs/scaling.md
    jaxcredit plot runs/x runs/grid [--metric eval/return] [--out overlay.png]
    jaxcredit list envs|estimators|objectives|relabellers|redistributors|algos
    jaxcredit run                  # the credit-assignment showcase (under 3 minutes on 2 cores)
    jaxcredit bench train|estimators [...]
    jaxcredit diagnose [...]

The flags of ``train`` and ``sweep`` are generated from ``TrainConfig`` and ``Hparams`` (every
field is a flag with its docstring as help; ``--lambda`` for λ), plus the run options below. Bad
input exits with status 2 and one line on stderr, before anything is written (set
``JAXCREDIT_TRACEBACK=1`` to see the full traceback instead). Compiled programs are cached on disk
(``jaxcredit.compile_cache``; ``JAXCREDIT_COMPILE_CACHE=0`` turns it off, or names the folder).
"""

from __future__ import annotations

import sys

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()  # opt-in, before anything imports jax (see jaxcredit.xla_flags)

import dataclasses  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
import typing  # noqa: E402
from typing import Annotated, Any, Callable, Optional, Sequence  # noqa: E402

import tyro  # noqa: E402

from jaxcredit import compile_cache  # noqa: E402
from jaxcredit.flags import (Repeatable, UsageError, field_docs, flat,  # noqa: E402,F401
                             parse, parse_options)
from jaxcredit.agents.config import FIELDS, OPTION_FIELDS, Hparams, TrainConfig  # noqa: E402

PROG = "jaxcredit"


# ----------------------------------------------------------------------------------------------
# Flags generated from the config dataclasses
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunOptions:
    """How the run is executed and where it goes (not part of the compiled program)."""

    num_seeds: int = 1
    """seeds per hyper-parameter setting, trained in one vmapped program"""
    seed: int = 0
    """master seed (seed keys are split from it)"""
    num_chunks: int = 10
    """compiled chunks; progress, metrics and a checkpoint after each"""
    out: Optional[str] = None
    """run directory (default: runs/<algo>-<estimator>-<env>-<time>)"""
    resume: bool = False
    """continue the run in --out from its last checkpoint (other flags are ignored)"""
    force: bool = False
    """if --out exists, move it aside to <out>.old-<time> and start over"""
    progress: bool = True
    """show a progress bar"""
    stop_after_chunks: Optional[int] = None
    """stop after this many chunks (continue later with --resume)"""
    logger: Repeatable = ()
    """extra per-seed loggers: tensorboard, wandb (pip install 'jaxcredit[loggers]')"""
    watchdog_multiple: float = 20.0
    """hang watchdog: a chunk running longer than max(floor, this × the longest chunk) ends the
    process with stack dumps in the run directory and exit status 75 (0: off)"""
    watchdog_floor: float = 600.0
    """hang watchdog: seconds a chunk may always take"""
    max_restarts: int = 0
    """resume a run that the watchdog ended, up to this many times"""
    metrics_csv: bool = True
    """also export the metrics as metrics.csv when the command ends (the Parquet files in
    metrics/ are the record; --no-metrics-csv saves time and disk on large sweeps)"""
    memory_limit: str = "auto"
    """memory per device a chunk may use: auto (the accelerator's limit, or 90 percent of the
    free host memory shared by the CPU devices), a size such as 4G or 512M, or off; a sweep over
    it runs each device's members in sequential groups, or is refused with what would fit"""
    member_batch: Optional[int] = None
    """members each device runs at once (default: all, or as many as fit in --memory-limit)"""
    keep_checkpoints: int = 1
    """checkpoints kept, the newest (0: all); one is enough to resume"""
    coordinator: Optional[str] = None
    """multi-process run: HOST:PORT of process 0's coordinator, the same in every process (with
    --num-processes and --process-id; docs/scaling.md)"""
    num_processes: Optional[int] = None
    """multi-process run: how many processes share the sweep"""
    process_id: Optional[int] = None
    """multi-process run: this process's index, 0 to --num-processes - 1"""
    local_device_ids: Optional[tuple[int, ...]] = None
    """multi-process run: the local devices this process uses (default: all it sees)"""
    distributed: bool = False
    """multi-process run with the process layout read from the cluster environment (SLURM, Open
    MPI) instead of --coordinator, --num-processes and --process-id"""


@dataclasses.dataclass
class SweepOptions:
    """What a sweep varies."""

    grid: Repeatable = ()
    """NAME=V1,V2,... per hyper-parameter; the grid is their product"""
    random: Repeatable = ()
    """NAME=LOW:HIGH[:log] per hyper-parameter, sampled --num-samples times"""
    num_samples: int = 8
    """settings drawn by --random"""
    sample_seed: int = 0
    """seed of the --random draw"""


# Repeatable flags that take one or more values each: ``--env-option n=10 --env-option sigma=1``
# and ``--env-option n=10 sigma=1`` mean the same.
def _flag_type(cls: type, name: str, annotation: Any):
    """The command-line type of a config field: options become repeatable KEY=VALUE strings,
    floats that count things accept 5e6, and the hyper-parameters' ``Any`` leaves are floats."""
    if name in OPTION_FIELDS:
        return Repeatable
    if name == "total_timesteps":
        return float
    if cls is Hparams:
        return float
    return annotation


def _flag_name(field: str) -> Optional[str]:
    """``--lambda`` for λ; ``--env-option`` (one KEY=VALUE after another) for ``env_options``."""
    if field == "lambda_":
        return "lambda"
    if field in OPTION_FIELDS:
        return field[:-1]
    return None


def _generated(name: str, sources: Sequence[type]) -> type:
    """A dataclass with every field of ``sources`` as a flag, docstrings as help."""
    fields = []
    for cls in sources:
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            flag = _flag_type(cls, f.name, hints[f.name])
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            help_text = docs.get(f.name, "")
            if f.name in OPTION_FIELDS:
                help_text += " (KEY=VALUE, several allowed)"
            arg = tyro.conf.arg(help=help_text or None, name=_flag_name(f.name))
            fields.append((f.name, Annotated[flag, arg], dataclasses.field(default=default)))
    return dataclasses.make_dataclass(name, fields)


TrainArgs = _generated("TrainArgs", (TrainConfig, Hparams, RunOptions))
TrainArgs.__doc__ = "Train one configuration over several seeds (one compiled, sharded program)."
SweepArgs = _generated("SweepArgs", (TrainConfig, Hparams, RunOptions, SweepOptions))
SweepArgs.__doc__ = "Train a grid or a random sample of hyper-parameters × seeds in one program."


@dataclasses.dataclass
class PlotArgs:
    """Overlay the learning curves (mean ± 95% CI across seeds) of one or more runs."""

    runs: tyro.conf.Positional[tuple[str, ...]]
    metric: Optional[str] = None
    """metric column (default: eval/return where the runs evaluate, else episode_return)"""
    out: Optional[str] = None
    """image path (default: curves.png in the single run, else overlay.png here)"""
    per_seed: bool = False
    """draw every seed's curve under the mean"""
    smooth: int = 1
    """average each curve over this many points first"""


@dataclasses.dataclass
class ListArgs:
    """List what can be named on the command line."""

    what: tyro.conf.Positional[str]
    """envs | estimators | objectives | relabellers | redistributors | algos"""


def _hp_name(name: str) -> str:
    name = name.replace("-", "_")
    return "lambda_" if name == "lambda" else name


def build_config(args) -> TrainConfig:
    """The resolved ``TrainConfig`` of parsed train/sweep arguments."""
    values = {}
    for f in dataclasses.fields(TrainConfig):
        value = getattr(args, f.name)
        if f.name in OPTION_FIELDS:
            value = parse_options(flat(value), "--" + f.name.replace("_", "-")[:-1])
        elif f.name == "total_timesteps":
            if value != int(value) or value <= 0:
                raise UsageError(f"total_timesteps must be a positive whole number, got {value}")
            value = int(value)
        values[f.name] = value
    return TrainConfig(**values).resolved()


def base_hparams(args) -> dict:
    return {name: getattr(args, name) for name in FIELDS}


def sweep_settings(args) -> tuple[list[dict], tuple[str, ...]]:
    from jaxcredit.agents import sweep

    grid, random = flat(args.grid), flat(args.random)
    if grid and random:
        raise UsageError("use either --grid or --random, not both")
    base = base_hparams(args)
    if grid:
        axes = {}
        for item in grid:
            if "=" not in item:
                raise UsageError(f"--grid entries look like NAME=V1,V2, got {item!r}")
            name, values = item.split("=", 1)
            try:
                axes[_hp_name(name)] = [float(v) for v in values.split(",") if v]
            except ValueError:
                raise UsageError(f"--grid {item!r}: values must be numbers") from None
        settings = sweep.grid(**axes)
    elif random:
        ranges = {}
        for item in random:
            if "=" not in item:
                raise UsageError(f"--random entries look like NAME=LOW:HIGH[:log], got {item!r}")
            name, spec = item.split("=", 1)
            parts = spec.split(":")
            try:
                ranges[_hp_name(name)] = tuple(float(p) for p in parts[:2]) + tuple(parts[2:])
            except ValueError:
                raise UsageError(f"--random {item!r}: bounds must be numbers") from None
        settings = sweep.random_search(args.sample_seed, args.num_samples, **ranges)
    else:
        raise UsageError("a sweep needs --grid NAME=V1,V2 ... or --random NAME=LOW:HIGH ...")
    swept = tuple(settings[0])
    return [{**base, **s} for s in settings], swept


def _default_out(config: TrainConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = config.estimator.replace(":", "_").replace("/", "_")
    return f"runs/{config.algo}-{name}-{config.env}-{stamp}"


def cmd_train(args, settings=None, swept=()) -> dict:
    if args.watchdog_multiple < 0 or args.watchdog_floor < 0 or args.max_restarts < 0:
        raise UsageError("--watchdog-multiple, --watchdog-floor and --max-restarts must be >= 0")
    multiprocess = check_multiprocess_flags(args)
    if args.max_restarts > 0:
        return _supervise(args)
    if args.keep_checkpoints < 0:
        raise UsageError(f"--keep-checkpoints must be >= 0, got {args.keep_checkpoints}")
    if args.member_batch is not None and args.member_batch <= 0:
        raise UsageError(f"--member-batch must be positive, got {args.member_batch}")
    if args.memory_limit.lower() not in ("auto", "off"):
        from jaxcredit.memory import parse_bytes  # noqa: PLC0415

        parse_bytes(args.memory_limit)  # a one-line error before anything starts
    watch = dict(watchdog_multiple=args.watchdog_multiple, watchdog_floor=args.watchdog_floor,
                 csv=args.metrics_csv, memory_limit=args.memory_limit,
                 member_batch=args.member_batch, keep_checkpoints=args.keep_checkpoints)
    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        changed = _changed_config_flags(args)
        if changed:
            raise UsageError(f"--resume continues the saved run as it was configured; it takes no "
                             f"config flags (got {', '.join(changed)})")
        run_experiment = _host_loop(args, multiprocess).run_experiment
        return _report(run_experiment(None, None, args.out, resume=True, progress=args.progress,
                                      max_chunks=args.stop_after_chunks, loggers=flat(args.logger),
                                      **watch))
    config = build_config(args)
    if args.num_chunks <= 0:
        raise UsageError(f"num_chunks must be positive, got {args.num_chunks}")
    host_loop = _host_loop(args, multiprocess)
    spec = host_loop.RunSpec(settings=tuple(settings or [base_hparams(args)]),
                             num_seeds=args.num_seeds, seed=args.seed,
                             num_chunks=args.num_chunks, swept=tuple(swept))
    summary = _report(host_loop.run_experiment(config, spec, args.out or _default_out(config),
                                               force=args.force, progress=args.progress,
                                               max_chunks=args.stop_after_chunks,
                                               loggers=flat(args.logger), **watch))
    steps = config.num_updates * config.steps_per_update
    if steps != config.total_timesteps:  # whole updates only: say so rather than round silently
        print(f"note: --total-timesteps {config.total_timesteps:g} ran as {config.num_updates} "
              f"updates × {config.steps_per_update} env steps = {steps} steps per seed",
              file=sys.stderr)
    return summary


def check_multiprocess_flags(args) -> bool:
    """Whether the command is one process of a multi-process run; raises UsageError on flags
    that cannot work there.

    Every process must name the same run directory, so a multi-process run needs ``--out`` (the
    default name holds the start time, which differs between processes). ``--max-restarts``
    restarts one process, which cannot rejoin the others.
    """
    explicit = (args.coordinator, args.num_processes, args.process_id)
    if not args.distributed and all(value is None for value in explicit):
        if args.local_device_ids is not None:
            raise UsageError("--local-device-ids is for a multi-process run (with --coordinator "
                             "or --distributed)")
        return False
    if not args.out:
        raise UsageError("a multi-process run needs --out (the same run directory in every "
                         "process)")
    if args.max_restarts > 0:
        raise UsageError("--max-restarts restarts one process, which cannot rejoin a "
                         "multi-process run; restart every process with --resume instead")
    from jaxcredit import distributed  # noqa: PLC0415

    distributed.check_arguments(args.coordinator, args.num_processes, args.process_id,
                                auto=args.distributed)
    return True


def _host_loop(args, multiprocess: bool):
    """The host loop module, imported only after JAX's distributed runtime has started (in a
    multi-process run): importing the engine starts JAX's backends (``jaxcredit.agents``)."""
    if multiprocess:
        from jaxcredit import distributed  # noqa: PLC0415

        distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                               args.local_device_ids, auto=args.distributed)
    from jaxcredit.agents import host_loop  # noqa: PLC0415

    return host_loop


def _supervise(args) -> int:
    """``--max-restarts K``: runs the command in a child process and, when the watchdog ends it
    (exit status 75), resumes it from its last checkpoint, up to K times."""
    import subprocess  # noqa: PLC0415

    from jaxcredit.watchdog import HANG_EXIT_STATUS  # noqa: PLC0415

    out = args.out or (_default_out(build_config(args)) if not args.resume else None)
    child = [*_ARGV, "--max-restarts", "0"] + ([] if args.out else ["--out", str(out)])
    resume = ["train", "--out", str(out), "--resume", "--max-restarts", "0",
              "--watchdog-multiple", repr(args.watchdog_multiple),
              "--watchdog-floor", repr(args.watchdog_floor),
              "--memory-limit", args.memory_limit,
              "--keep-checkpoints", str(args.keep_checkpoints)] + (
                  [] if args.metrics_csv else ["--no-metrics-csv"]) + (
                  [] if args.member_batch is None else ["--member-batch", str(args.member_batch)])
    for attempt in range(args.max_restarts + 1):
        code = subprocess.call([sys.executable, "-c", "from jaxcredit.cli import main; main()",
                                *child])
        if code != HANG_EXIT_STATUS or attempt == args.max_restarts:
            return code
        print(f"{PROG}: the run in {out} hung; resuming it from its last checkpoint "
              f"(restart {attempt + 1} of {args.max_restarts})", file=sys.stderr, flush=True)
        child = resume
    return code


def _changed_config_flags(args) -> list[str]:
    """The TrainConfig / Hparams flags given other values than their defaults."""
    changed = []
    for cls in (TrainConfig, Hparams):
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if hasattr(args, f.name) and getattr(args, f.name) != default:
                changed.append("--" + (_flag_name(f.name) or f.name).replace("_", "-"))
    return changed


def _report(summary: dict) -> dict:
    """Prints the run's summary (in a multi-process run, from process 0 only)."""
    import jax  # noqa: PLC0415 (loaded by the run already)

    if jax.process_index() != 0:
        return summary
    state = "finished" if summary["finished"] else f"stopped at update {summary['updates']}"
    print(f"{summary['out']}: {state}, {summary['members']} runs, "
          f"final mean {summary['metric']} {summary['final_return']:.4g}")
    program, host = summary.get("program_seconds", 0.0), summary.get("host_seconds", 0.0)
    if program + host > 0:
        print(f"time: {program:.1f} s in the compiled program, {host:.1f} s outside it "
              f"({100 * host / (program + host):.0f} %: metrics, checkpoints, progress)")
    if summary.get("member_batch") is not None:
        from jaxcredit.memory import format_bytes  # noqa: PLC0415

        print(f"memory: each device ran its members {summary['member_batch']} at a time, "
              f"{format_bytes(summary['memory_per_device'])} per device "
              f"(limit {format_bytes(summary['memory_limit'])})")
    for line in summary.get("ranking", []):
        print(line)
    return summary


def cmd_sweep(args) -> dict:
    if args.resume:
        return cmd_train(args)
    settings, swept = sweep_settings(args)
    return cmd_train(args, settings, swept)


def cmd_plot(args: PlotArgs) -> None:
    from jaxcredit.plotting import plot_runs

    if not args.runs:
        raise UsageError("plot needs at least one run directory")
    out = args.out or (str(pathlib.Path(args.runs[0]) / "curves.png") if len(args.runs) == 1
                       else "overlay.png")
    if args.smooth < 1:
        raise UsageError(f"smooth must be a positive integer, got {args.smooth}")
    print(plot_runs(args.runs, out, args.metric, args.per_seed, args.smooth))


LISTS = {
    "envs": ("jaxcredit.envs", "registered"),
    "estimators": ("jaxcredit.estimators", "registered"),
    "objectives": ("jaxcredit.objectives", "registered"),
    "relabellers": ("jaxcredit.relabel", "registered"),
    "redistributors": ("jaxcredit.redistribute", "registered"),
}


def cmd_list(args: ListArgs) -> None:
    if args.what == "algos":
        from jaxcredit.agents.config import ALGO_PRESETS

        for name, preset in ALGO_PRESETS.items():
            print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in preset.items()))
        return
    if args.what not in LISTS:
        raise UsageError(f"list what? choose one of {', '.join([*LISTS, 'algos'])}")
    module, function = LISTS[args.what]
    names = getattr(importlib.import_module(module), function)()
    print("\n".join(names) if names else f"(no {args.what} registered; "
          "name a 'module:factory' path or register one)")


def _lazy_main(module: str) -> Callable[[list[str]], object]:
    try:
        return importlib.import_module(module).main
    except ImportError as err:
        raise UsageError(f"{module} is not available: {err}") from None


SUBCOMMANDS = ("train", "sweep", "plot", "list", "run", "bench", "diagnose")


_ARGV: list[str] = []  # the command being run (``--max-restarts`` runs it again in a child)


def dispatch(argv: list[str]):
    _ARGV[:] = argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return None
    command, rest = argv[0], argv[1:]
    prog = f"{PROG} {command}"
    if command in ("train", "sweep", "run", "diagnose"):
        compile_cache.enable()  # jaxcredit.compile_cache; benchmarks time compiles, so not bench
    if command == "train":
        return cmd_train(parse(TrainArgs, rest, prog))
    if command == "sweep":
        return cmd_sweep(parse(SweepArgs, rest, prog))
    if command == "plot":
        return cmd_plot(parse(PlotArgs, rest, prog))
    if command == "list":
        return cmd_list(parse(ListArgs, rest, prog))
    if command == "run":
        return _lazy_main("jaxcredit.showcase")(rest)
    if command == "bench":
        return _lazy_main("jaxcredit.bench.cli")(rest)
    if command == "diagnose":
        return _lazy_main("jaxcredit.diagnostics.cli")(rest)
    raise UsageError(f"unknown command {command!r}; choose one of {', '.join(SUBCOMMANDS)}")


def parse_command(argv: Sequence[str]):
    """Parses a whole ``jaxcredit ...`` command line without running it (the documented
    commands are checked this way): the arguments object, and the config for train / sweep."""
    command, rest = argv[0], list(argv[1:])
    prog = f"{PROG} {command}"
    if command in ("train", "sweep"):
        args = parse(TrainArgs if command == "train" else SweepArgs, rest, prog)
        if not args.resume:
            build_config(args)
            if command == "sweep":
                sweep_settings(args)
        return args
    simple = {"plot": PlotArgs, "list": ListArgs}
    if command in simple:
        return parse(simple[command], rest, prog)
    if command == "run":
        from jaxcredit.showcase import Args  # noqa: PLC0415

        return parse(Args, rest, prog)
    if command == "diagnose":
        from jaxcredit.diagnostics.cli import DiagnoseArgs, config_of  # noqa: PLC0415

        args = parse(DiagnoseArgs, rest, prog)
        config_of(args)
        return args
    if command == "bench":
        from jaxcredit.bench.cli import BenchArgs  # noqa: PLC0415

        return parse(BenchArgs, rest, prog)
    raise UsageError(f"unknown command {command!r}; choose one of {', '.join(SUBCOMMANDS)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: returns 0, or exits non-zero with one line on stderr on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = dispatch(argv)
    except (ValueError, OSError) as err:  # bad input, an unwritable folder, a full disk
        if os.environ.get("JAXCREDIT_TRACEBACK"):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (continue with --resume)", file=sys.stderr)
        raise SystemExit(130) from None
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)
    return 0


if __name__ == "__main__":
    main()

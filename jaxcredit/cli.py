"""The ``jaxcredit`` command line.

    jaxcredit train --algo ppo --estimator gae --env CartPole-v1 --num-envs 2048 \\
        --num-seeds 16 --total-timesteps 5e6 --out runs/x
    jaxcredit train --out runs/x --resume
    jaxcredit sweep --grid lr=1e-3,3e-4 lambda=0.9,0.95 --num-seeds 8 --out runs/grid
    jaxcredit sweep --random lr=1e-5:1e-2:log ent-coef=0:0.05 --num-samples 16 --out runs/rs
    jaxcredit plot runs/x runs/y [--metric episode_return] [--out overlay.png]
    jaxcredit run                  # the default demo run, then the quick estimator benchmark
    jaxcredit bench train|estimators [...]
    jaxcredit diagnose [...]

Every ``TrainConfig`` field and every ``Hparams`` field is a flag (``--lambda`` for λ). Bad input
exits with status 2 and one line on stderr, before anything is written
(set ``JAXCREDIT_TRACEBACK=1`` to see the full traceback instead).
"""

from __future__ import annotations

import sys

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()  # before anything imports jax (see jaxcredit.xla_flags)

import contextlib
import dataclasses
import importlib
import io
import os
import pathlib
import time
from typing import Annotated, Callable, Optional, Sequence

import tyro

from jaxcredit.agents.config import DEFAULTS, FIELDS

PROG = "jaxcredit"


class UsageError(ValueError):
    """Bad command-line input (reported as one line)."""


@dataclasses.dataclass
class TrainArgs:
    """Train one configuration over several seeds (one compiled, device-sharded program)."""

    # The train config (what fixes the compiled program).
    algo: str = "ppo"
    """ppo | a2c | reinforce"""
    estimator: str = "gae"
    """credit estimator: gae, lambda_returns, mc, nstep, hca_return, ..."""
    estimator_option: tuple[str, ...] = ()
    """estimator options as KEY=VALUE (e.g. n=10)"""
    env: str = "CartPole-v1"
    env_option: tuple[str, ...] = ()
    """environment options as KEY=VALUE"""
    num_envs: int = 4
    num_steps: int = 128
    """rollout length T per update"""
    total_timesteps: float = 5e5
    """env steps per run (5e6 accepted)"""
    update_epochs: Optional[int] = None
    """default: 4 for ppo, 1 otherwise"""
    num_minibatches: Optional[int] = None
    """default: 4 for ppo, 1 otherwise; must divide num_envs"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    anneal_lr: bool = True
    critic: Optional[bool] = None
    """learn a critic (default: False for reinforce)"""
    normalize_advantage: Optional[bool] = None
    clip_value_loss: Optional[bool] = None
    # Hyper-parameters (pytree leaves; sweepable without recompiling).
    lr: float = DEFAULTS["lr"]
    gamma: float = DEFAULTS["gamma"]
    lambda_: Annotated[float, tyro.conf.arg(name="lambda")] = DEFAULTS["lambda_"]
    ent_coef: float = DEFAULTS["ent_coef"]
    vf_coef: float = DEFAULTS["vf_coef"]
    clip_eps: float = DEFAULTS["clip_eps"]
    max_grad_norm: float = DEFAULTS["max_grad_norm"]
    est_coef: float = DEFAULTS["est_coef"]
    # The run.
    num_seeds: int = 1
    seed: int = 0
    num_chunks: int = 10
    """compiled chunks; progress, metrics and a checkpoint after each"""
    out: Optional[str] = None
    """run directory (default: runs/<algo>-<estimator>-<env>-<time>)"""
    resume: bool = False
    """continue the run in --out from its last checkpoint (other flags are ignored)"""
    force: bool = False
    """if --out exists, move it aside to <out>.old-<time> and start over"""
    progress: bool = True
    stop_after_chunks: Optional[int] = None
    """stop after this many chunks (continue later with --resume)"""


@dataclasses.dataclass
class SweepArgs(TrainArgs):
    """Train a grid or a random sample of hyper-parameters × seeds in one program."""

    grid: tuple[str, ...] = ()
    """NAME=V1,V2,... per hyper-parameter; the grid is their product"""
    random: tuple[str, ...] = ()
    """NAME=LOW:HIGH[:log] per hyper-parameter, sampled --num-samples times"""
    num_samples: int = 8
    sample_seed: int = 0


@dataclasses.dataclass
class PlotArgs:
    """Overlay the learning curves (mean ± 95% CI across seeds) of one or more runs."""

    runs: tyro.conf.Positional[tuple[str, ...]]
    metric: str = "episode_return"
    out: Optional[str] = None
    """image path (default: curves.png in the single run, else overlay.png here)"""


@dataclasses.dataclass
class RunArgs:
    """The default demo: PPO+GAE on CartPole-v1 over 8 seeds, then the quick estimator bench.

    PureJaxRL's default setup (4 envs × 128 steps, 5e5 steps per seed) with 8 seeds vmapped:
    about 40 s on a 2-core CPU, every seed reaching the maximum return of 500.
    """

    out: str = "runs/ppo-gae-cartpole"
    num_seeds: int = 8
    num_envs: int = 4
    total_timesteps: float = 5e5
    force: bool = True
    """move an existing run directory aside (the demo never refuses to start)"""
    bench: bool = True
    """run `jaxcredit bench estimators --quick` afterwards"""
    progress: bool = True


def _hp_name(name: str) -> str:
    name = name.replace("-", "_")
    return "lambda_" if name == "lambda" else name


def parse_options(pairs: Sequence[str], what: str) -> tuple[tuple[str, object], ...]:
    """``("n=5", "method=scan")`` -> ``(("n", 5), ("method", "scan"))`` (ints, floats, bools)."""
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"{what} must look like KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out.append((key.replace("-", "_"), _literal(value)))
    return tuple(out)


def _literal(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _whole(value: float, name: str) -> int:
    if value != int(value) or value <= 0:
        raise UsageError(f"{name} must be a positive whole number, got {value}")
    return int(value)


def build_config(args: TrainArgs):
    from jaxcredit.agents.config import TrainConfig

    config = TrainConfig(
        algo=args.algo, estimator=args.estimator,
        estimator_options=parse_options(args.estimator_option, "--estimator-option"),
        env=args.env, env_options=parse_options(args.env_option, "--env-option"),
        num_envs=args.num_envs, num_steps=args.num_steps,
        total_timesteps=_whole(args.total_timesteps, "total_timesteps"),
        update_epochs=args.update_epochs, num_minibatches=args.num_minibatches,
        hidden_sizes=tuple(args.hidden_sizes), activation=args.activation,
        anneal_lr=args.anneal_lr, critic=args.critic,
        normalize_advantage=args.normalize_advantage, clip_value_loss=args.clip_value_loss,
    )
    return config.resolved()


def base_hparams(args: TrainArgs) -> dict:
    return {name: getattr(args, name) for name in FIELDS}


def sweep_settings(args: SweepArgs) -> tuple[list[dict], tuple[str, ...]]:
    from jaxcredit import sweep

    if args.grid and args.random:
        raise UsageError("use either --grid or --random, not both")
    base = base_hparams(args)
    if args.grid:
        axes = {}
        for item in args.grid:
            if "=" not in item:
                raise UsageError(f"--grid entries look like NAME=V1,V2, got {item!r}")
            name, values = item.split("=", 1)
            try:
                axes[_hp_name(name)] = [float(v) for v in values.split(",") if v]
            except ValueError:
                raise UsageError(f"--grid {item!r}: values must be numbers") from None
        settings = sweep.grid(**axes)
    elif args.random:
        ranges = {}
        for item in args.random:
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


def _default_out(args: TrainArgs) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"runs/{args.algo}-{args.estimator}-{args.env}-{stamp}"


def cmd_train(args: TrainArgs, settings=None, swept=()) -> dict:
    from jaxcredit.agents.host_loop import RunSpec, run_experiment

    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        return _report(run_experiment(None, None, args.out, resume=True, progress=args.progress,
                                      max_chunks=args.stop_after_chunks))
    config = build_config(args)
    spec = RunSpec(settings=tuple(settings or [base_hparams(args)]), num_seeds=args.num_seeds,
                   seed=args.seed, num_chunks=args.num_chunks, swept=tuple(swept))
    if args.num_chunks <= 0:
        raise UsageError(f"num_chunks must be positive, got {args.num_chunks}")
    return _report(run_experiment(config, spec, args.out or _default_out(args),
                                  force=args.force, progress=args.progress,
                                  max_chunks=args.stop_after_chunks))


def _report(summary: dict) -> dict:
    state = "finished" if summary["finished"] else f"stopped at update {summary['updates']}"
    print(f"{summary['out']}: {state}, {summary['members']} runs, "
          f"final mean episode return {summary['final_return']:.1f}")
    return summary


def cmd_sweep(args: SweepArgs) -> dict:
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
    print(plot_runs(args.runs, out, args.metric))


def cmd_run(args: RunArgs) -> None:
    train_args = TrainArgs(num_envs=args.num_envs, num_seeds=args.num_seeds,
                           total_timesteps=args.total_timesteps, out=args.out, force=args.force,
                           num_chunks=5, progress=args.progress)
    cmd_train(train_args)
    print(f"learning curves: {pathlib.Path(args.out) / 'curves.png'}")
    if args.bench:
        try:
            bench = importlib.import_module("jaxcredit.bench.estimators")
        except ImportError as err:
            print(f"(skipping the estimator benchmark: {err})")
            return
        bench.main(["--quick"])


def _lazy_main(module: str) -> Callable[[list[str]], object]:
    try:
        return importlib.import_module(module).main
    except ImportError as err:
        raise UsageError(f"{module} is not available: {err}") from None


def _parse(cls, argv: Sequence[str], prog: str):
    """tyro parsing with its boxed error messages reduced to one line."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer), contextlib.redirect_stdout(buffer):
            return tyro.cli(cls, args=list(argv), prog=prog)
    except SystemExit as exit_:
        text = buffer.getvalue()
        if not exit_.code:  # --help
            sys.stdout.write(text)
            raise
        lines = [ln.strip(" │╭╮╰╯─-") for ln in text.splitlines()]
        lines = [ln for ln in lines if ln]
        message = lines[1] if len(lines) > 1 else (lines[0] if lines else "bad arguments")
        raise UsageError(message) from None


SUBCOMMANDS = ("train", "sweep", "plot", "run", "bench", "diagnose")


def dispatch(argv: list[str]):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return None
    command, rest = argv[0], argv[1:]
    prog = f"{PROG} {command}"
    if command == "train":
        return cmd_train(_parse(TrainArgs, rest, prog))
    if command == "sweep":
        return cmd_sweep(_parse(SweepArgs, rest, prog))
    if command == "plot":
        return cmd_plot(_parse(PlotArgs, rest, prog))
    if command == "run":
        return cmd_run(_parse(RunArgs, rest, prog))
    if command == "bench":
        targets = {"train": "jaxcredit.bench.train", "estimators": "jaxcredit.bench.estimators"}
        if not rest or rest[0] not in targets:
            raise UsageError(f"usage: {PROG} bench {{{','.join(targets)}}} [options]")
        return _lazy_main(targets[rest[0]])(rest[1:])
    if command == "diagnose":
        return _lazy_main("jaxcredit.diagnostics")(rest)
    raise UsageError(f"unknown command {command!r}; choose one of {', '.join(SUBCOMMANDS)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: returns 0, or exits 2 with one line on stderr on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        dispatch(argv)
    except (ValueError, FileExistsError, FileNotFoundError, NotADirectoryError,
            PermissionError) as err:
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
    return 0


if __name__ == "__main__":
    main()

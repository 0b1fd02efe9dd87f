"""The flags of ``jaxcredit train`` and ``jaxcredit sweep``, generated from the config dataclasses.

Every field of ``TrainConfig`` (by its flat name: ``--estimator-fit-steps`` for
``estimator.fit_steps``), ``Hparams`` and the run options below is a flag, with its docstring as
help (``--lambda`` for λ, ``--env-option KEY=VALUE`` for ``env_options``). From the
parsed arguments: the resolved config (:func:`build_config`), the hyper-parameter settings of a
sweep (:func:`sweep_settings`), what a ``--resume`` was given that differs from the saved run
(:func:`resume_differences`), and the command that resumes a run with every run option it was
started with (:func:`resume_argv`, the watchdog's restart).
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Annotated, Any, Optional, Sequence

import numpy as np
import tyro

from jaxcredit.agents.config import (ALGOS, DEFAULTS, FIELDS, OPTION_FIELDS, FlatField, Hparams,
                                     TrainConfig, flat_fields)
from jaxcredit.flags import Repeatable, UsageError, field_docs, flat, parse_options


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
    """continue the run in --out from its last checkpoint (flags that differ from the saved run
    are refused)"""
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


def flag_name(field: str) -> Optional[str]:
    """``--lambda`` for λ; ``--env-option`` (one KEY=VALUE after another) for ``env_options``."""
    if field == "lambda_":
        return "lambda"
    if field in OPTION_FIELDS:
        return field[:-1]
    return None


# The config fields that name a stage, and the registry whose names their help lists (generated,
# so a newly registered part appears in --help).
STAGE_REGISTRIES = {
    "objective": ("jaxcredit.objectives", "OBJECTIVES"),
    "estimator": ("jaxcredit.estimators.registry", "ESTIMATORS"),
    "relabel": ("jaxcredit.relabel", "RELABELLERS"),
    "redistribute": ("jaxcredit.redistribute", "REDISTRIBUTORS"),
}


# --help lists TrainConfig's flags in the order they had before its fields were grouped into
# records (each stage's name and options beside the other choices, the fitting of the credit
# models after the agent's settings), so that the help reads as it did. A flag not named here
# comes after these, in the order of flat_fields().
HELP_ORDER = (
    "algo", "objective", "estimator", "estimator_options", "relabel", "relabel_options",
    "redistribute", "redistribute_options", "env", "env_options", "num_envs", "group_size",
    "num_steps", "total_timesteps", "update_epochs", "num_minibatches", "hidden_sizes",
    "activation", "anneal_lr", "critic", "normalize_advantage", "clip_value_loss",
    "policy_epsilon", "adam_eps", "estimator_fit_steps", "estimator_fit_minibatches",
    "estimator_fit_windows", "estimator_anneal_lr", "estimator_assign_before_fit",
    "estimator_fit_until_loss", "burn_in_updates", "model_warmup_updates",
    "estimator_pretrain_steps", "redistribute_fit_steps", "redistribute_fit_minibatches",
    "redistribute_fit_windows", "redistribute_anneal_lr", "redistribute_fit_until_loss",
    "buffer_size", "batch_size", "learning_starts", "gradient_steps", "target_update_every",
    "n_step", "dueling", "huber", "eval_every", "eval_episodes", "eval_max_steps",
)


def config_flags() -> list[FlatField]:
    """TrainConfig's fields by their flags (:func:`flat_fields`), in :data:`HELP_ORDER`."""
    rank = {name: i for i, name in enumerate(HELP_ORDER)}
    return sorted(flat_fields(), key=lambda f: rank.get(f.name, len(HELP_ORDER)))


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _settings_fields(cls: type) -> list[tuple[str, Any, Any, str]]:
    """``(name, type hint, default, help)`` of each flag of a settings class: TrainConfig's flat
    fields, or the fields of the others (Hparams, the run and sweep options)."""
    if cls is TrainConfig:
        return [(f.name, f.hint, f.default, f.doc) for f in config_flags()]
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    return [(f.name, hints[f.name], _default(f), docs.get(f.name, ""))
            for f in dataclasses.fields(cls)]


# --help's sections, in this order: the flags named below, then the credit stages by their
# prefixes (estimator_*, relabel_*, redistribute_*), then "agent" for every other flag.
HELP_SECTIONS = {
    "run": ("algo", "env", "env_options", "num_envs", "group_size", "num_steps",
            "total_timesteps", "num_seeds", "seed", "out", "resume", "force", "progress",
            "num_chunks", "stop_after_chunks", "logger", "metrics_csv", "grid", "random",
            "num_samples", "sample_seed"),
    "agent": (),
    "credit: estimate": ("burn_in_updates", "model_warmup_updates"),
    "credit: relabel": (),
    "credit: redistribute": (),
    "credit: objective": ("objective",),
    "off-policy (dqn, pqn)": ("buffer_size", "batch_size", "learning_starts", "gradient_steps",
                              "target_update_every", "n_step", "dueling", "huber",
                              "layer_norm", "epsilon_start", "epsilon_end", "epsilon_fraction",
                              "tau"),
    "evaluation": ("eval_every", "eval_episodes", "eval_max_steps"),
    "checkpoints and scale": ("keep_checkpoints", "watchdog_multiple", "watchdog_floor",
                              "max_restarts", "memory_limit", "member_batch", "coordinator",
                              "num_processes", "process_id", "local_device_ids",
                              "distributed"),
}
SECTION_DOCS = {
    "run": "what runs, on which environment, for how long, with how many seeds, where",
    "agent": "the policy, its critic and its optimiser",
    "credit: estimate": "the estimator and the fitting of its learned model (jaxcredit list "
                        "estimators)",
    "credit: relabel": "relabelling windows before credit (jaxcredit list relabellers)",
    "credit: redistribute": "rewards redistributed before the estimator, and the fitting of the "
                            "redistribution model (jaxcredit list redistributors)",
    "credit: objective": "the policy loss that reads the credit (jaxcredit list objectives)",
    "off-policy (dqn, pqn)": "replay, targets and exploration of --algo dqn and pqn",
    "evaluation": "evaluation episodes inside the run, with the exact return where there is one",
    "checkpoints and scale": "checkpoints, hangs and restarts, device memory, several processes",
}
_STAGE_PREFIXES = {"estimator": "credit: estimate", "relabel": "credit: relabel",
                   "redistribute": "credit: redistribute",
                   "redistributor": "credit: redistribute"}


def help_section(field: str) -> str:
    """The --help section of a flag's field (:data:`HELP_SECTIONS`)."""
    for section, names in HELP_SECTIONS.items():
        if field in names:
            return section
    for prefix, section in _STAGE_PREFIXES.items():
        if field.startswith(prefix):
            return section
    return "agent"


def _generated(name: str, sources: Sequence[type]) -> type:
    """A dataclass with every field of ``sources`` as a flag, docstrings as help; its
    ``sectioned`` attribute is the same flags grouped into --help's sections (what the command
    line parses, :func:`jaxcredit.flags.parse`, which gives back this flat class)."""
    fields = []
    for cls in sources:
        for field, hint, default, help_text in _settings_fields(cls):
            flag = _flag_type(cls, field, hint)
            if field in STAGE_REGISTRIES:
                module, table = STAGE_REGISTRIES[field]
                names = getattr(importlib.import_module(module), table).registered()
                help_text += f" (registered: {', '.join(names)})"
            if field in OPTION_FIELDS:
                help_text += " (KEY=VALUE, several allowed)"
            if field == "algo":
                help_text += f": {' | '.join(ALGOS)}"
            # A help that states its default in words (the algorithm's preset fills a None)
            # shows that one only, not tyro's "(default: None)" after it.
            hint_text = "" if "(default" in help_text else None
            arg = tyro.conf.arg(help=help_text or None, name=flag_name(field),
                                help_behavior_hint=hint_text)
            fields.append((field, Annotated[flag, arg], dataclasses.field(default=default)))
    flat_cls = dataclasses.make_dataclass(name, fields)
    sections = {}
    for field in fields:
        sections.setdefault(help_section(field[0]), []).append(field)
    parts = []
    for section in HELP_SECTIONS:
        if section not in sections:
            continue
        part = dataclasses.make_dataclass(_section_name(section), sections[section])
        part.__doc__ = SECTION_DOCS[section]
        parts.append((_section_name(section), Annotated[part, tyro.conf.OmitArgPrefixes],
                      dataclasses.field(default_factory=part)))
    flat_cls.sectioned = dataclasses.make_dataclass(name + "Sections", parts)
    return flat_cls


def _section_name(section: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in section).strip("_").replace("__", "_")


TrainArgs = _generated("TrainArgs", (TrainConfig, Hparams, RunOptions))
_RECOMMENDED = (" An environment with ground truth may recommend settings (DelayedEffect: "
                "whole-episode windows, lr 3e-3 not annealed, gamma 1, evaluation on); they "
                "apply where no flag is given, are printed, and are recorded in the run's "
                "config.json (defaults_from).")
TrainArgs.__doc__ = TrainArgs.sectioned.__doc__ = (
    "Train one configuration over several seeds (one compiled, sharded program)." + _RECOMMENDED)
SweepArgs = _generated("SweepArgs", (TrainConfig, Hparams, RunOptions, SweepOptions))
SweepArgs.__doc__ = SweepArgs.sectioned.__doc__ = (
    "Train a grid or a random sample of hyper-parameters × seeds in one program." + _RECOMMENDED)


def hp_name(name: str) -> str:
    name = name.replace("-", "_")
    return "lambda_" if name == "lambda" else name


def build_config(args) -> TrainConfig:
    """The resolved ``TrainConfig`` of parsed train/sweep arguments."""
    values = {}
    for f in flat_fields():
        value = getattr(args, f.name)
        if f.name in OPTION_FIELDS:
            value = parse_options(flat(value), "--" + f.name.replace("_", "-")[:-1])
        elif f.name == "total_timesteps":
            if value != int(value) or value <= 0:
                raise UsageError(f"total_timesteps must be a positive whole number, got {value}")
            value = int(value)
        values[f.name] = value
    return TrainConfig.from_flat(**values).resolved()


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
            name, values = _numbers(item, "--grid", "NAME=V1,V2", values_sep=",")
            axes[name] = values
        settings = sweep.grid(**axes)
    elif random:
        ranges = {}
        for item in random:
            name, bounds = _numbers(item, "--random", "NAME=LOW:HIGH[:log]", values_sep=":")
            ranges[name] = bounds
        settings = sweep.random_search(args.sample_seed, args.num_samples, **ranges)
    else:
        raise UsageError("a sweep needs --grid NAME=V1,V2 ... or --random NAME=LOW:HIGH ...")
    swept = tuple(settings[0])
    return [{**base, **s} for s in settings], swept


def _numbers(item: str, flag: str, form: str, values_sep: str) -> tuple[str, Any]:
    """``NAME=...`` of a --grid (``V1,V2``: a list of numbers) or --random (``LOW:HIGH[:log]``:
    two numbers and the scale) entry, the name as the Hparams field; one-line UsageErrors."""
    if "=" not in item:
        raise UsageError(f"{flag} entries look like {form}, got {item!r}")
    name, text = item.split("=", 1)
    parts = text.split(values_sep)
    try:
        if values_sep == ",":
            return hp_name(name), [float(v) for v in parts if v]
        return hp_name(name), tuple(float(p) for p in parts[:2]) + tuple(parts[2:])
    except ValueError:
        what = "values" if values_sep == "," else "bounds"
        raise UsageError(f"{flag} {item!r}: {what} must be numbers") from None


def _flag(name: str) -> str:
    return "--" + (flag_name(name) or name).replace("_", "-")


def _config_value(name: str, value: Any) -> Any:
    """A config field's flag value as the resolved ``TrainConfig`` holds it."""
    if name in OPTION_FIELDS:
        return dict(parse_options(flat(value), _flag(name)))
    if name == "hidden_sizes":
        return tuple(int(h) for h in value)
    return value


def _same(given: Any, saved: Any) -> bool:
    numbers = (int, float, np.number)
    if isinstance(given, numbers) and isinstance(saved, numbers):
        return bool(np.float32(given) == np.float32(saved))  # Hparams leaves are float32
    return given == saved


def apply_recommended_settings(args: Any, written: set[str]) -> dict[str, Any]:
    """Sets on parsed ``train`` / ``sweep`` arguments the environment's recommended settings
    (``env.recommended_settings(params)``, e.g. DelayedEffect's whole-episode windows and rate)
    that no flag on the command line sets, and returns those it changed, ``{field: value}``.

    Only the command line reads them: a ``TrainConfig`` built in Python and the experiments,
    which set everything, keep the engine's defaults. An environment that cannot be built
    changes nothing here (building the config reports it in one line).

    Args:
      args: the parsed arguments.
      written: the flags written on the command line (:func:`given_flags`).
    """
    from jaxcredit import envs  # noqa: PLC0415

    try:
        env, params = envs.make(args.env, **dict(parse_options(flat(args.env_options),
                                                               "--env-option")))
    except Exception:  # noqa: BLE001 (reported when the config is built)
        return {}
    recommend = getattr(env, "recommended_settings", None)
    applied = {}
    for name, value in (recommend(params) if recommend else {}).items():
        if _flag(name) in written or getattr(args, name) == value:
            continue
        setattr(args, name, value)
        applied[name] = value
    return applied


def given_flags(argv: Sequence[str]) -> set[str]:
    """The flags written on a command line, as :func:`_flag` spells them: ``--algo ppo`` and
    ``--algo=ppo`` give ``--algo``, ``--num_envs`` gives ``--num-envs``, and a boolean's
    ``--no-layer-norm`` gives ``--layer-norm``."""
    flags = set()
    for word in argv:
        if word.startswith("--"):
            flag = "--" + word[2:].split("=", 1)[0].replace("_", "-")
            flags.add(flag)
            if flag.startswith("--no-"):
                flags.add("--" + flag[5:])
    return flags


def resume_differences(args: Any, saved: dict, written: Sequence[str] = ()) -> list[str]:
    """The flags given to a ``--resume`` whose values differ from the saved run's, one entry
    each (``--lr 0.001 (the run has 0.0003)``). A flag counts as given when it is among
    ``written`` (the flags on the command line, :func:`given_flags`) or is not at its default:
    ``--algo ppo`` written against a saved A2C run is refused though PPO is the default.

    Args:
      args: the parsed ``train`` / ``sweep`` arguments.
      saved: the run directory's ``config.json``.
      written: the flags written on the command line.
    """
    written = set(written)
    config = TrainConfig.from_dict(saved["config"]).flat()
    settings = saved.get("settings") or [{}]
    differences = []
    for f in flat_fields():
        given = getattr(args, f.name, None)
        if not hasattr(args, f.name) or (given == f.default and _flag(f.name) not in written):
            continue
        if given is None and f.default is None:  # None: the preset's value, whatever it was
            continue
        old = dict(config[f.name]) if f.name in OPTION_FIELDS else config[f.name]
        given = _config_value(f.name, given)
        if not _same(given, old):
            differences.append(f"{_flag(f.name)} {given} (the run has {old})")
    for f in dataclasses.fields(Hparams):
        given = getattr(args, f.name, None)
        if not hasattr(args, f.name) or (given == _default(f) and _flag(f.name) not in written):
            continue
        values = {float(np.float32(s.get(f.name, DEFAULTS[f.name]))) for s in settings}
        if len(values) > 1:
            differences.append(f"{_flag(f.name)} {given} (the run sweeps it)")
        elif not _same(given, values.pop()):
            differences.append(f"{_flag(f.name)} {given} (the run has "
                               f"{settings[0].get(f.name, DEFAULTS[f.name])})")
    for name in RUN_SPEC_OPTIONS:
        given = getattr(args, name)
        if ((given != _default(_RUN_FIELDS[name]) or _flag(name) in written)
                and given != saved.get(name, given)):
            differences.append(f"{_flag(name)} {given} (the run has {saved[name]})")
    return differences


# The run options that define the run (saved with it in RunSpec); the others say how this
# process executes it and may change from one resume to the next.
RUN_SPEC_OPTIONS = ("num_seeds", "seed", "num_chunks")
_RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunOptions)}
# Run options a resumed process does not take from the command it resumes: where the run is and
# that it is resumed are given, a restart never restarts, and --force would start over.
_NOT_RESUMED = ("out", "resume", "max_restarts", "force")


def option_argv(options: Any, names: Sequence[str]) -> list[str]:
    """The flags that set each field ``names`` of ``options`` to its value (nothing for a field
    at its default): ``--flag value``, ``--flag``/``--no-flag`` for booleans, ``--flag v1 v2``
    for tuples."""
    argv = []
    for name in names:
        value, default = getattr(options, name), _default(_RUN_FIELDS[name])
        if value == default:
            continue
        flag = _flag(name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (tuple, list)):  # a Repeatable holds one tuple per occurrence
            items = flat(value) if all(isinstance(v, (tuple, list)) for v in value) else value
            argv += [flag, *map(str, items)] if items else []
        elif value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    return argv


def resume_argv(args: Any, out: str) -> list[str]:
    """The ``jaxcredit train`` command that resumes the run in ``out`` with every run option of
    ``args`` (the watchdog's restart), as a list of arguments."""
    names = [n for n in _RUN_FIELDS if n not in _NOT_RESUMED]
    return ["train", "--out", str(out), "--resume", "--max-restarts", "0",
            *option_argv(args, names)]

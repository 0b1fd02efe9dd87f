"""The command-line shell of an experiment script: its shared flags (:class:`OutputArgs`), its
size, ``--set`` / ``--hparam`` overrides, the output folder, the runs, the report and
``--publish`` (:func:`main`)."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shutil
import subprocess
import sys
import time
import typing
from typing import Any, Callable, Optional, Sequence

import tyro

from jaxcredit.agents.config import OPTION_FIELDS, Hparams, flat_fields
from jaxcredit.experiment.runs import Case, default_out, run_cases
from jaxcredit.flags import Repeatable, flat, literal, parse_options


def publish(out: pathlib.Path, results: pathlib.Path, files: Sequence[str],
            force: bool = False) -> list[pathlib.Path]:
    """Copies report ``files`` from ``out`` into the committed ``results`` folder.

    Refuses (one-line ValueError, nothing copied) if a file would be replaced and not ``force``.
    """
    out, results = pathlib.Path(out), pathlib.Path(results)
    clashes = [name for name in files if (results / name).exists()]
    if clashes and not force:
        raise ValueError(f"{results} already holds {', '.join(clashes)}; pass --force to "
                         "replace the published results")
    results.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in files:
        shutil.copy2(out / name, results / name)
        copied.append(results / name)
    return copied


@dataclasses.dataclass
class OutputArgs:
    """Where an experiment script writes (the flags every ``experiments/*/run.py`` shares)."""

    out: str | None = None
    """output folder (default: a new one under runs/experiments/); rerun with the same folder to
    resume an interrupted experiment"""
    publish: bool = False
    """copy the report into the experiment's committed results/ folder"""
    force: bool = False
    """with --publish: replace the published report"""
    seed: Optional[int] = None
    """base seed of the runs (default: the experiment's own, that of its published results);
    another seed gives a held-out replicate, e.g. for a setting chosen on the published seeds"""
    set: Repeatable = ()
    """FIELD=VALUE: a train-config field (by its flag name, underscores: estimator_fit_steps=8)
    set in every run, for an ablation of the published settings (give it its own --out)"""
    hparam: Repeatable = ()
    """FIELD=VALUE: a hyper-parameter (Hparams: estimator_lr=1e-2) set in every run"""
    chunks: Optional[int] = None
    """compiled chunks per run, with a checkpoint after each (default: the experiment's own);
    more for a long run that may be stopped and resumed. A resumed run keeps its first count"""


def chosen_size(sizes: dict, args: Any) -> dict:
    """The settings of the size ``args.size``, with the script's ``--seeds`` and ``--updates``
    (where it has them) overriding the size's; a ValueError for an unknown size or fewer than
    2 seeds (no confidence interval)."""
    if args.size not in sizes:
        raise ValueError(f"--size must be one of {', '.join(sizes)}")
    size = dict(sizes[args.size])
    for name in ("seeds", "updates"):
        if getattr(args, name, None):
            size[name] = getattr(args, name)
    if size["seeds"] < 2:
        raise ValueError("need at least 2 seeds")
    return size


def source_revision() -> Optional[str]:
    """The git commit of the jaxcredit checkout that ran (``+`` when it had uncommitted
    changes), recorded with every report so a table can be reproduced exactly; None outside
    a git checkout."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "jaxcredit"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+" if dirty else "")


def run_and_report(name: str, here: pathlib.Path, args: OutputArgs, cases: Sequence[Case],
                   meta: dict, report: Callable, num_seeds: int, seed: int,
                   argv: Sequence[str] | None = None, num_chunks: int = 4) -> int:
    """An experiment script's second half: train ``cases`` into ``args.out`` (or a new folder),
    write ``report(out, cases, meta) -> files`` with the timings and the command added to
    ``meta``, and publish into ``here/results`` if asked. Returns the exit status (2 when the
    published results would be replaced without ``--force``)."""
    if getattr(args, "chunks", None) is not None:
        if args.chunks < 1:
            raise ValueError(f"--chunks must be at least 1, got {args.chunks}")
        num_chunks = args.chunks
    out = pathlib.Path(args.out) if args.out else default_out(name)
    out.mkdir(parents=True, exist_ok=True)
    start, commit = time.time(), source_revision()  # the code that trains, read before it does
    seed = seed if args.seed is None else args.seed
    timings = run_cases(cases, out, num_seeds=num_seeds, seed=seed, num_chunks=num_chunks)
    meta = dict(meta, seed=seed, commit=commit,
                seconds={k: v["seconds"] for k, v in timings.items()},
                train_seconds=sum(v["seconds"] or 0.0 for v in timings.values()),
                wall_seconds=time.time() - start,
                command=f"python experiments/{name}/run.py " + " ".join(
                    sys.argv[1:] if argv is None else argv))
    files = report(out, cases, meta)
    print(f"report in {out}: {', '.join(files)}")
    return publish_if_asked(args, out, here, files)


def with_overrides(cases: Sequence[Case], fields: Sequence[tuple[str, Any]],
                   hparams: Sequence[tuple[str, Any]]) -> list[Case]:
    """``cases`` with the train-config ``fields`` (flat names) and the hyper-parameters
    ``hparams`` set in every one (``--set``, ``--hparam``); a ValueError names an unknown
    field."""
    unknown = sorted({name for name, _ in hparams} - {f.name for f in
                                                       dataclasses.fields(Hparams)})
    if unknown:
        raise ValueError(f"--hparam: Hparams has no field(s) {', '.join(unknown)}")
    hints = {f.name: f.hint for f in flat_fields()}
    unknown = sorted({name for name, _ in fields} - set(hints))
    if unknown:
        raise ValueError(f"--set: the train config has no field(s) {', '.join(unknown)}")
    out = []
    for case in cases:
        config = case.config
        if fields:
            flat = config.flat()
            config = config.replace(**{name: _as_field(name, value, hints[name], flat[name])
                                       for name, value in fields})
            config.resolved()  # the config's own checks, before anything trains
        out.append(dataclasses.replace(case, config=config, settings=tuple(
            dict(setting, **dict(hparams)) for setting in case.settings)))
    return out


# Where a --set options value's items part: a comma before the next "key=" (so an option's own
# value may hold commas: hidden=64,64).
_OPTION_ITEMS = re.compile(r",(?=\s*[A-Za-z_][\w-]*=)")


def _as_field(name: str, value: Any, hint: Any, current: Any) -> Any:
    """A ``--set`` value (as :func:`jaxcredit.flags.literal` read it) in the form of its field's
    type ``hint``; a ValueError names the field. A tuple field takes comma-separated items
    (``hidden_sizes=128,128``); an options field takes ``key=value`` items that are set over
    the case's own options (``redistribute_options=inputs=agent_state,features=32``), and an
    empty value clears them."""
    def bad(kind: str):
        return ValueError(f"--set {name}: expected {kind}, got {value!r}")

    if typing.get_origin(hint) is typing.Union:  # Optional[X]
        if value is None:
            return None
        hint = next(h for h in typing.get_args(hint) if h is not type(None))
    if name in OPTION_FIELDS:
        text = "" if value is None else str(value).strip()
        items = [item.strip() for item in _OPTION_ITEMS.split(text) if item.strip()]
        return tuple({**dict(current), **dict(parse_options(items, f"--set {name}"))}.items()) \
            if items else ()
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        items = [item.strip() for item in str(value).strip("()[] ").split(",") if item.strip()]
        return tuple(_as_field(name, literal(item), element, None) for item in items)
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 1e6
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        return value
    if hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad("a number")
        return float(value)
    if value is None:
        raise bad("a value")
    return str(value)


def main(name: str, here: pathlib.Path, args_type: type, sizes: dict,
         plan: Callable[[Any, dict], tuple[Sequence[Case], dict]], report: Callable,
         seed: int, argv: Sequence[str] | None = None, num_chunks: int = 4,
         prepare: Optional[Callable[[pathlib.Path, Any, dict], None]] = None,
         passed: Optional[Callable[[pathlib.Path], bool]] = None) -> int:
    """The ``main`` of an experiment script (``experiments/<name>/run.py``).

    Parses the flags of ``args_type`` (an :class:`OutputArgs` with a ``size``), reads the size
    (:func:`chosen_size`) and asks ``plan(args, size)`` for ``(cases, meta)``; a ``ValueError``
    there is the user's mistake, one ``run.py: error:`` line and exit status 2, before anything
    trains. Then ``prepare(out, args, size)`` (work of the script's own that is not an engine
    run), the cases and the report (:func:`run_and_report`, ``meta`` with the size's name and
    seeds added), and exit status 1 where ``passed(out)`` says the report misses its bars.
    ``seed``: the base seed of the published results."""
    args = tyro.cli(args_type, args=argv)
    try:
        size = chosen_size(sizes, args)
        cases, meta = plan(args, size)
        cases = with_overrides(cases, parse_options(flat(args.set), "--set"),
                               parse_options(flat(args.hparam), "--hparam"))
        if args.chunks is not None and args.chunks < 1:
            raise ValueError(f"--chunks must be at least 1, got {args.chunks}")
    except (ValueError, TypeError) as err:  # TypeError: a config check meeting a wrong type
        print(f"run.py: error: {err}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out) if args.out else default_out(name)
    args.out = str(out)
    if prepare is not None:
        out.mkdir(parents=True, exist_ok=True)
        prepare(out, args, size)
    meta = {"size": args.size, "seeds": size["seeds"], **meta}
    if args.set or args.hparam:
        meta["overrides"] = {"set": list(flat(args.set)), "hparam": list(flat(args.hparam))}
    status = run_and_report(name, here, args, cases, meta, report, size["seeds"], seed, argv,
                            num_chunks)
    if status == 0 and passed is not None and not passed(out):
        return 1
    return status


def publish_if_asked(args: OutputArgs, out: pathlib.Path, here: pathlib.Path,
                     files: Sequence[str], script: str = "run.py") -> int:
    """A script's last step: with ``--publish``, copy ``files`` into ``here/results``
    (:func:`publish`). Returns the exit status: 2 with one line on stderr when published results
    would be replaced without ``--force``, else 0."""
    if not args.publish:
        return 0
    try:
        publish(out, pathlib.Path(here) / "results", files, args.force)
    except ValueError as err:
        print(f"{script}: error: {err}", file=sys.stderr)
        return 2
    print(f"published to {pathlib.Path(here) / 'results'}")
    return 0


def print_report(make_lines: Callable[[], Sequence[str]], out: Optional[str] = None,
                 errors: tuple = (ValueError, OSError, KeyError)) -> int:
    """The ``main`` of a script that reads finished runs and prints a markdown report: the
    lines ``make_lines()`` builds, printed and, with ``out``, written there; a user's mistake
    (a missing run, a run without the metric) is one ``error:`` line and exit status 2."""
    try:
        text = "\n".join(make_lines())
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    if out:
        pathlib.Path(out).write_text(text)
    return 0

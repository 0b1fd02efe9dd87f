"""jaxcredit's engine at another git revision, importable beside the current one in one process.

``jaxcredit bench train --baseline-rev REV`` races the current engine against the engine of REV
(a commit of the jaxcredit checkout that is running): ``git archive`` writes REV's ``jaxcredit/``
into a temporary folder under another package name, ``jaxcredit_<commit>``, with every reference
to the package rewritten (imports, and the ``"jaxcredit.module:factory"`` strings of its
registries), and imports it. The two engines then share one jax, one device and one machine
load, and their calls alternate, so their ratio is a fair comparison of the code alone.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import pathlib
import re
import subprocess
import sys
import tarfile
import types
from typing import Any

import jaxcredit

PACKAGE = "jaxcredit"
# The package name as a whole word: not inside another identifier, a path or a module path's tail.
_NAME = re.compile(r"(?<![\w./-])jaxcredit(?![\w-])")


def repository_root() -> pathlib.Path:
    """The git checkout that holds the running jaxcredit package, or a ValueError."""
    root = pathlib.Path(jaxcredit.__file__).resolve().parent.parent
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             check=True, capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        raise ValueError(f"--baseline-rev needs jaxcredit to run from a git checkout; {root} "
                         "is not one") from None
    return pathlib.Path(top)


def resolve(rev: str, root: pathlib.Path) -> str:
    """The full commit id of ``rev`` in the checkout at ``root``, or a ValueError."""
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet",
                               f"{rev}^{{commit}}"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        raise ValueError(f"--baseline-rev {rev!r} is not a commit of {root}") from None


def rename_package(source: str, name: str) -> str:
    """``source`` with every reference to the ``jaxcredit`` package pointing at ``name``."""
    return _NAME.sub(name, source)


def extract(commit: str, root: pathlib.Path, workdir: pathlib.Path) -> str:
    """Writes ``jaxcredit/`` at ``commit`` into ``workdir`` as package ``jaxcredit_<commit[:7]>``
    (Python files renamed inside, other files as they are); returns the package name."""
    name = f"{PACKAGE}_{commit[:7]}"
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit, PACKAGE],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            relative = pathlib.PurePosixPath(member.name).relative_to(PACKAGE)
            target = workdir / name / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()
            if target.suffix == ".py":
                data = rename_package(data.decode("utf-8"), name).encode("utf-8")
            target.write_bytes(data)
    return name


def import_revision(rev: str, workdir: pathlib.Path) -> tuple[types.ModuleType, str]:
    """``(agents module, short commit)`` of jaxcredit at ``rev``, extracted into ``workdir``
    (which must outlive the module: its submodules load lazily)."""
    root = repository_root()
    commit = resolve(rev, root)
    try:
        name = extract(commit, root, workdir)
    except (subprocess.CalledProcessError, OSError, tarfile.TarError, ValueError) as err:
        detail = getattr(err, "stderr", b"") or str(err).encode()
        raise ValueError(f"cannot extract jaxcredit/ at {rev} ({commit[:7]}): "
                         f"{' '.join(detail.decode(errors='replace').split())}") from None
    sys.path.insert(0, str(workdir))
    try:
        agents = importlib.import_module(f"{name}.agents")
    except Exception as err:  # noqa: BLE001 (old code: any failure is one message)
        raise ValueError(f"cannot import jaxcredit at {rev} ({commit[:7]}): "
                         f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    finally:
        sys.path.remove(str(workdir))
    return agents, commit[:7]


def make_config(agents: types.ModuleType, **fields: Any) -> Any:
    """The resolved ``TrainConfig`` of an engine (current or baseline) with exactly ``fields``,
    by their flat (flag) names; a ValueError naming the fields that engine's TrainConfig does
    not have."""
    config_type = agents.TrainConfig
    # Revisions from before TrainConfig grouped its fields into records take the flat names as
    # their fields; later ones through from_flat.
    grouped = hasattr(config_type, "from_flat")
    known = set(config_type().flat()) if grouped else {
        f.name for f in dataclasses.fields(config_type)}
    missing = sorted(set(fields) - known)
    if missing:
        raise ValueError(f"{agents.__name__}.TrainConfig has no field(s) {', '.join(missing)}")
    return (config_type.from_flat(**fields) if grouped else config_type(**fields)).resolved()

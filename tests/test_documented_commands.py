"""Every command the documentation shows still parses: ``jaxcredit ...`` lines in the README, the
docs, the experiment READMEs and the notebooks (with their config checks, without running them),
and the experiment scripts' ``python experiments/.../run.py ...`` lines."""

import importlib.util
import json
import pathlib
import re
import shlex
import sys

import pytest
import tyro

from jaxcredit import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "experiments").glob("**/README.md")),
             *sorted((ROOT / "notebooks").glob("*.ipynb"))]


def _commands(text: str) -> list[str]:
    """Command lines inside code (fenced blocks or 4-space indented blocks), continuation lines
    joined, pipes and trailing comments cut."""
    out, joined, fenced = [], "", False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        in_code = fenced or line.startswith("    ")
        stripped = line.strip()
        if joined:
            joined += " " + stripped.rstrip("\\").strip()
            if not stripped.endswith("\\"):
                out.append(joined)
                joined = ""
            continue
        match = re.match(r"^(?:[A-Z_]+=\S+ )*((?:\.venv/bin/)?(?:jaxcredit|python) .*)$", stripped)
        if in_code and match:
            command = match.group(1)
            if command.endswith("\\"):
                joined = command.rstrip("\\").strip()
            else:
                out.append(command)
    return [c.split(" | ")[0].split("  #")[0].split(" # ")[0].strip() for c in out]


def _text(doc: pathlib.Path) -> str:
    """A document's text; a notebook's is its cells' sources."""
    if doc.suffix == ".ipynb":
        cells = json.loads(doc.read_text())["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells)
    return doc.read_text()


COMMANDS = sorted({(doc.relative_to(ROOT).as_posix(), c) for doc in DOCUMENTS
                   for c in _commands(_text(doc))})


def test_the_documents_show_commands():
    assert sum(c.split()[0].endswith("jaxcredit") for _, c in COMMANDS) >= 10


def _script_args(path: pathlib.Path):
    name = f"documented_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.Args


@pytest.mark.parametrize("document, command", COMMANDS)
def test_documented_command_parses(document, command):
    words = shlex.split(command)
    if words[0].endswith("jaxcredit"):
        if words[1:] in ([], ["--help"]) or words[1] in ("bench",) and len(words) == 2:
            return
        cli.parse_command(words[1:])
        return
    if words[0].endswith("python") and len(words) > 1 and words[1].startswith("experiments/"):
        args = _script_args(ROOT / words[1])
        tyro.cli(args, args=words[2:])
        return
    if words[0].endswith("python") and words[1:3] == ["-m", "jaxcredit.cli"]:
        cli.parse_command(words[3:])

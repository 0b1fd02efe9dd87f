"""Every notebook in notebooks/ runs top to bottom without error.

Each notebook's code cells run in order in one namespace of this process, with matplotlib on
its Agg backend and the working directory a fresh folder. None uses IPython magics or shell
escapes (checked below), so this is what a kernel would run; a kernel per notebook cost
about 4 s of start-up and imports each on 2 cores, and its programs could not be shared with
the rest of this worker's.

The notebooks run at a tiny size here: each reads ``JAXCREDIT_NOTEBOOK_SMOKE`` in its first code
cell (its compiled programs are the same at any size; their training and fitting loops are what
the switch shortens). Users, who do not set it, run them at the size their text describes."""

from __future__ import annotations

import pathlib

import nbformat
import pytest

# credit_in_your_loop.ipynb runs in tests/test_credit_transform.py instead, where its learning
# curves are checked (running it here too would train the same loop twice).
RUN_ELSEWHERE = {"credit_in_your_loop.ipynb"}
ALL_NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
NOTEBOOKS = [p for p in ALL_NOTEBOOKS if p.name not in RUN_ELSEWHERE]


def code_cells(path: pathlib.Path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def test_no_notebook_needs_a_kernel():
    """No magic (``%``) or shell escape (``!``) line, which only a kernel would run."""
    for path in ALL_NOTEBOOKS:
        for index, source in enumerate(code_cells(path)):
            escapes = [line for line in source.splitlines() if line.lstrip().startswith(("%", "!"))]
            assert not escapes, f"{path.name} cell {index}: {escapes}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    monkeypatch.setenv("JAXCREDIT_NOTEBOOK_SMOKE", "1")
    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__main__"}
    try:
        for index, source in enumerate(code_cells(path)):
            exec(compile(source, f"{path.name} cell {index}", "exec"), scope)  # noqa: S102
    finally:
        plt.close("all")

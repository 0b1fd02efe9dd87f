"""Every notebook in notebooks/ runs top to bottom without error (nbclient, fresh kernel).

The notebooks run at a tiny size here: each reads ``JAXCREDIT_NOTEBOOK_SMOKE`` in its first code
cell (its compiled programs are the same at any size; their training and fitting loops are what
the switch shortens). Users, who do not set it, run them at the size their text describes."""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

# credit_in_your_loop.ipynb runs in tests/test_credit_transform.py instead, in-process, where its
# learning curves are checked (running it here too would train the same loop twice).
RUN_ELSEWHERE = {"credit_in_your_loop.ipynb"}
NOTEBOOKS = sorted(p for p in (pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob(
    "*.ipynb") if p.name not in RUN_ELSEWHERE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("JAXCREDIT_NOTEBOOK_SMOKE", "1")  # the kernel inherits it
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [out for cell in notebook.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors, errors

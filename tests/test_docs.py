"""The documentation runs: every ``python`` block of docs/extending.md executes as written."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS / "extending.md").read_text(), re.S)


def test_extending_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_extending_example_runs(index):
    exec(compile(BLOCKS[index], f"docs/extending.md block {index}", "exec"),
         {"__name__": "extending_example"})


def test_readme_training_example_runs():
    """The README's "a run is one function" block trains and reports evaluation metrics."""
    readme = (DOCS.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "make_train" in b)
    scope = {"__name__": "readme_example"}
    exec(compile(block, "README.md training example", "exec"), scope)
    p_optimal = scope["metrics"]["eval/p_optimal_first_action"]
    assert p_optimal.shape == (200,)
    assert 0.0 <= float(p_optimal[-1]) <= 1.0

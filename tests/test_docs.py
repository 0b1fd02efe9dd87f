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

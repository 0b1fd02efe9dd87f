"""The documentation runs: every ``python`` block of docs/extending.md executes as written, every
``python`` block of the README runs and gives what it says (the training example learns), and the
docstring examples give the output they show."""

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


README_BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS.parent / "README.md").read_text(), re.S)


def test_every_readme_python_block_is_checked():
    """Each block of the README is run by one of the tests below (the tour's three)."""
    assert len(README_BLOCKS) == 3
    assert "E.gae" in README_BLOCKS[0] and "jc.make" in README_BLOCKS[1]
    assert "make_train" in README_BLOCKS[2]


def test_readme_estimator_example_prints_the_discounted_credit(capsys):
    exec(compile(README_BLOCKS[0], "README.md estimator example", "exec"), {"__name__": "x"})
    printed = [float(x) for x in capsys.readouterr().out.strip("[] \n").split()]
    assert printed == pytest.approx([0.9 ** 4, 0.9 ** 3, 0.9 ** 2, 0.9, 1.0], abs=1e-4)


def test_readme_credit_transform_example_gives_the_exact_credit(capsys):
    """The oracle's credit of the first action at the uniform policy on DelayedEffect (reward 1
    for the right first action, 0 else): +0.5 where it was right, -0.5 where it was wrong; the
    fitted model's is smaller after its first fit."""
    scope = {"__name__": "readme_credit_example"}
    exec(compile(README_BLOCKS[1], "README.md credit example", "exec"), scope)
    lines = dict(line.split(" ", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert set(lines) == {"mlp", "oracle"}
    oracle = [float(x) for x in lines["oracle"].strip("[] ").split()]
    assert sorted(set(oracle)) in ([-0.5, 0.5], [0.5], [-0.5]) and len(oracle) == 4
    fitted = [abs(float(x)) for x in lines["mlp"].strip("[] ").split()]
    assert max(fitted) < 0.5


def test_readme_training_example_runs():
    """The README's "a run is one function" block trains and reports evaluation metrics."""
    readme = (DOCS.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "make_train" in b)
    scope = {"__name__": "readme_example"}
    exec(compile(block, "README.md training example", "exec"), scope)
    p_optimal = scope["metrics"]["eval/p_optimal_first_action"]
    assert p_optimal.shape == (200,)
    # It learns the delayed effect: P(optimal first action) from 0.55 at the first evaluation
    # (update 10) to 0.998 at update 200 with this seed (seeds 1 and 2: 0.69 -> 0.9997 and
    # 0.66 -> 0.9991); a broken estimator or engine stays near 0.5.
    assert float(p_optimal[9]) < 0.8
    assert float(p_optimal[-1]) > 0.95
    assert float(scope["metrics"]["eval/exact_return"][-1]) > 0.9


def _modules_with_examples():
    root = DOCS.parent / "jaxcredit"
    for path in sorted(root.rglob("*.py")):
        if ">>> " in path.read_text():
            yield ".".join(path.relative_to(root.parent).with_suffix("").parts)


@pytest.mark.parametrize("module", list(_modules_with_examples()))
def test_docstring_examples_run(module):
    """Every ``>>>`` example in the package's docstrings gives the output it shows."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result

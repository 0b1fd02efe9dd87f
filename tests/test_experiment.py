"""Experiments never overwrite published results unless asked: every script writes into a fresh
folder by default, and ``publish`` refuses to replace files without ``force``."""

import importlib.util
import pathlib
import sys

import pytest

from jaxcredit import experiment as X

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "experiments").glob("*/run.py"))


def _args_of(path):
    name = f"experiment_{path.parent.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.Args


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parent.name)
def test_scripts_default_to_a_fresh_folder(script):
    args = _args_of(script)()
    assert args.out is None and not args.publish and not args.force


def test_default_out_is_new_and_outside_results():
    out = X.default_out("hca_tasks")
    assert out.parts[:2] == ("runs", "experiments") and out.name.startswith("hca_tasks-")
    assert "results" not in out.parts


def test_publish_refuses_to_replace_without_force(tmp_path):
    out, results = tmp_path / "run", tmp_path / "results"
    out.mkdir()
    results.mkdir()
    (out / "table.md").write_text("new")
    (out / "curves.png").write_bytes(b"png")
    (results / "table.md").write_text("published")
    with pytest.raises(ValueError, match="already holds table.md; pass --force"):
        X.publish(out, results, ["table.md", "curves.png"])
    assert (results / "table.md").read_text() == "published"
    assert not (results / "curves.png").exists()  # nothing copied when refused
    X.publish(out, results, ["table.md", "curves.png"], force=True)
    assert (results / "table.md").read_text() == "new" and (results / "curves.png").exists()


def test_purejaxrl_dqn_bad_sources_are_one_line_errors(tmp_path, capsys):
    """experiments/cartpole_baselines/purejaxrl_dqn.py: no PureJaxRL source, or one without
    dqn.py, is one line and exit status 2 before anything trains."""
    path = ROOT / "experiments" / "cartpole_baselines" / "purejaxrl_dqn.py"
    spec = importlib.util.spec_from_file_location("experiment_purejaxrl_dqn", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    for argv, message in (([], "give one of --purejaxrl CHECKOUT or --purejaxrl-git DIR"),
                          (["--purejaxrl", str(tmp_path)], "no purejaxrl/dqn.py there")):
        assert module.main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err

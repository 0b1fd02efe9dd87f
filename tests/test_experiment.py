"""Experiments never overwrite published results unless asked: every script writes into a fresh
folder by default, and ``publish`` refuses to replace files without ``force``."""

import dataclasses
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


# Every script with the shared flags, the run.py scripts and the others beside them.
FLAGGED = sorted(p for p in (ROOT / "experiments").glob("*/*.py")
                 if "OutputArgs" in p.read_text())


@pytest.mark.parametrize("script", FLAGGED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_script_applies_or_refuses_the_overrides(script, tmp_path, capsys):
    """No script takes ``--set`` and then ignores it: an unknown field is refused in one line
    (exit 2) before anything trains, by the shared ``main`` or by the script's own refusal."""
    name = f"experiment_{script.parent.name}_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "out"
    assert module.main(["--set", "no_such_field=1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "--set" in err[0], err
    assert not out.exists()


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


@dataclasses.dataclass
class _HookArgs(X.OutputArgs):
    size: str = "s"
    bad: bool = False


def _hook_experiment(tmp_path, calls: list, bars_met: bool):
    """A script with no runs: what ``X.main`` does around them (the error line, prepare,
    report, publish, the bars' exit status)."""

    def plan(args, size):
        if args.bad:
            raise ValueError("--bad was given")
        return [], {"extra": 1}

    def report(out, cases, meta):
        calls.append(("report", meta["size"], meta["seeds"], meta["extra"], cases))
        assert "commit" in meta and "command" in meta  # what reproduces the table
        (out / "table.md").write_text("t")
        return ["table.md"]

    def main(argv):
        return X.main("hooks", tmp_path / "here", _HookArgs, {"s": dict(seeds=2)}, plan, report,
                      0, argv, prepare=lambda out, args, size: calls.append(("prepare", out)),
                      passed=lambda out: bars_met)

    return main


def test_main_runs_prepare_report_and_publish(tmp_path):
    calls = []
    main = _hook_experiment(tmp_path, calls, bars_met=True)
    assert main(["--out", str(tmp_path / "out"), "--publish"]) == 0
    assert calls == [("prepare", tmp_path / "out"), ("report", "s", 2, 1, [])]
    assert (tmp_path / "here" / "results" / "table.md").read_text() == "t"
    # published results are not replaced without --force
    assert main(["--out", str(tmp_path / "out"), "--publish"]) == 2


def test_main_exit_status_one_when_bars_are_missed(tmp_path):
    main = _hook_experiment(tmp_path, [], bars_met=False)
    assert main(["--out", str(tmp_path / "out")]) == 1


def test_main_plan_errors_are_one_line_before_anything_runs(tmp_path, capsys):
    calls = []
    main = _hook_experiment(tmp_path, calls, bars_met=True)
    for argv, message in ((["--bad"], "--bad was given"),
                          (["--size", "huge"], "--size must be one of s"),
                          (["--chunks", "0"], "--chunks must be at least 1, got 0")):
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"run.py: error: {message}"]
    assert calls == [] and not (tmp_path / "out").exists()


def test_chunks_flag_sets_the_runs_chunk_count(tmp_path, monkeypatch):
    """``--chunks`` reaches the runs (a checkpoint after each chunk); without it the script's
    own count stands."""
    import jaxcredit.experiment.script as script

    seen = []
    monkeypatch.setattr(script, "run_cases",
                        lambda cases, out, num_seeds, seed, num_chunks: seen.append(num_chunks)
                        or {})
    for argv, expected in ((["--chunks", "12"], 12), ([], 3)):
        assert X.main("hooks", tmp_path, _HookArgs, {"s": dict(seeds=2)}, lambda a, s: ([], {}),
                      lambda *a: [], 0, [*argv, "--out", str(tmp_path / "out")],
                      num_chunks=3) == 0
        assert seen.pop() == expected


def test_every_repeated_set_and_hparam_counts():
    """``--set a --set b`` keeps both (a plain tuple flag would keep only the last, silently),
    and ``--set a b`` still works."""
    import tyro

    from jaxcredit.flags import flat

    args = tyro.cli(_HookArgs, args=["--set", "hidden_sizes=128,128", "--set", "activation=relu",
                                     "num_envs=2", "--hparam", "lr=1", "--hparam", "gamma=0.9"])
    assert flat(args.set) == ("hidden_sizes=128,128", "activation=relu", "num_envs=2")
    assert flat(args.hparam) == ("lr=1", "gamma=0.9")


def test_overrides_set_config_fields_and_hparams_in_every_case():
    from jaxcredit.agents import TrainConfig

    config = TrainConfig.from_flat(algo="a2c", estimator="hca_return")
    cases = [X.Case("a", config, ({"lr": 1e-3}, {"lr": 3e-3})), X.Case("b", config)]
    new = X.with_overrides(cases, (("estimator_fit_steps", 8), ("num_envs", 2)),
                           (("estimator_lr", 0.01),))
    assert [c.config.flat()["estimator_fit_steps"] for c in new] == [8, 8]
    assert new[0].config.replace(estimator_fit_steps=4, num_envs=config.num_envs) == config
    assert new[0].settings == ({"lr": 1e-3, "estimator_lr": 0.01},
                               {"lr": 3e-3, "estimator_lr": 0.01})
    assert new[1].settings == ({"estimator_lr": 0.01},)
    assert X.with_overrides(cases, (), ()) == cases


def test_overrides_read_tuple_and_options_fields_from_their_text():
    from jaxcredit.agents import TrainConfig

    cases = [X.Case("a", TrainConfig.from_flat(algo="a2c", estimator="hca_return"))]
    for text in ("128,64", "(128, 64)", "[128,64]"):
        new = X.with_overrides(cases, (("hidden_sizes", text),), ())
        assert new[0].config.flat()["hidden_sizes"] == (128, 64)
    assert X.with_overrides(cases, (("hidden_sizes", 32),), ())[0].config.hidden_sizes == (32,)
    new = X.with_overrides(cases, (("estimator_options", "state_input=agent_state,bins=5"),), ())
    assert dict(new[0].config.flat()["estimator_options"]) == {"bins": 5,
                                                               "state_input": "agent_state"}
    assert X.with_overrides(cases, (("total_timesteps", 1e6),), ())[0].config.total_timesteps \
        == 1_000_000


def test_overrides_set_options_over_each_cases_own():
    """An options value is merged into each case's options (a case keeps the options that make
    it what it is), its items may hold commas, and an empty value clears them."""
    from jaxcredit.agents import TrainConfig

    rudder = TrainConfig.from_flat(algo="ppo", redistribute="rudder")
    cases = [X.Case("obs", rudder),
             X.Case("state", rudder.replace(redistribute_options=(("inputs", "agent_state"),)))]
    new = X.with_overrides(cases, (("redistribute_options", "features=32,hidden=64,64"),), ())
    assert [dict(c.config.flat()["redistribute_options"]) for c in new] == [
        {"features": 32, "hidden": "64,64"},
        {"inputs": "agent_state", "features": 32, "hidden": "64,64"}]
    cleared = X.with_overrides(cases, (("redistribute_options", ""),), ())
    assert [c.config.flat()["redistribute_options"] for c in cleared] == [(), ()]


def test_bad_overrides_are_one_line_before_anything_runs(tmp_path, capsys):
    from jaxcredit.agents import TrainConfig

    def plan(args, size):
        return [X.Case("a", TrainConfig.from_flat(algo="a2c"))], {}

    for argv, message in ((["--set", "estimator_fit_stepz=8"], "no field(s) estimator_fit_stepz"),
                          (["--set", "eight"], "--set must look like KEY=VALUE"),
                          (["--set", "hidden_sizes=-3,4"], "hidden_sizes must be positive"),
                          (["--set", "num_envs=0"], "num_envs must be a positive integer"),
                          (["--set", "adam_eps=abc"], "--set adam_eps: expected a number"),
                          (["--set", "anneal_lr=abc"], "--set anneal_lr: expected true or false"),
                          (["--set", "hidden_sizes=1.5,2"], "--set hidden_sizes: expected an "
                                                            "integer, got 1.5"),
                          (["--hparam", "lrr=1"], "--hparam: Hparams has no field(s) lrr")):
        status = X.main("hooks", tmp_path, _HookArgs, {"s": dict(seeds=2)}, plan,
                        lambda *a: [], 0, [*argv, "--out", str(tmp_path / "out")])
        assert status == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()

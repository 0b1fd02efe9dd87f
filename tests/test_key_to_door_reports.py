"""The KeyToDoor report scripts read finished runs: credit_split.py (the credit error by reward
value and the gradient ratios) and first_steps.py (the agent's first updates and its gradient
norms' tails), on a tiny run of the engine, and a missing run is a one-line error."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from jaxcredit import experiment as X
from jaxcredit import runlog
from jaxcredit.agents import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _script(name):
    path = ROOT / "experiments" / "key_to_door" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"key_to_door_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """cocoa_reward on KeyToDoor L = 6 with two warm-up updates, evaluated every 2 updates."""
    out = tmp_path_factory.mktemp("key_to_door_reports")
    config = TrainConfig.from_flat(algo="a2c", estimator="cocoa_reward", env="KeyToDoor",
                                   env_options=(("length", 6),), num_envs=4, num_steps=6,
                                   total_timesteps=4 * 6 * 8, eval_every=2, eval_episodes=4,
                                   hidden_sizes=(8,), model_warmup_updates=2)
    X.run_cases([X.Case(name="cocoa/L6/cocoa_reward", config=config,
                        settings=({"gamma": 1.0},))], out, num_seeds=2, log=lambda _: None)
    return out / "cocoa" / "L6" / "cocoa_reward"


def test_first_steps_counts_from_the_agents_first_step(run, capsys):
    first_steps = _script("first_steps")
    assert first_steps.agent_start(run) == 2
    code = first_steps.main([str(run), "--grad-points", "1", "2", "--eval-points", "2", "4",
                             "--parts", "0", "2", "6"])
    text = capsys.readouterr().out
    assert code == 0
    metrics = runlog.read_metrics(run)
    # Agent update 2 is engine update 4 (two warm-up updates): its mean gradient norm.
    expected = np.nanmean(metrics["grad_norm"][metrics["update"] == 4])
    assert f"{expected:.4g}" in text
    assert f"| {run.parts[-4]}/cocoa_reward | 2 |" in text  # the run, its agent's start
    assert "share > 10× median" in text


def test_credit_split_reports_the_ratios(run, capsys):
    credit_split = _script("credit_split")
    assert credit_split.main([str(run), "--quarters", "2"]) == 0
    text = capsys.readouterr().out
    assert "ascent, fitted / exact model" in text and "… from the treasure" in text


def test_feature_grain_counts_distinct_features_by_outcome_by_hand():
    """Three states × two actions. Zero-reward pairs: (0,0) and (1,0); apple pairs: (1,1)
    without the key, (0,1) twice with it (no vector in both); treasure: (0,0), which a
    zero-reward pair also has."""
    grain = _script("feature_grain").grain
    features = np.array([[[0, 0], [0, 0]],    # state 0, no key: actions 0, 1
                         [[1, 1], [1, 0]],    # state 1, no key
                         [[0, 1], [0, 1]]])   # state 2, has the key
    apple = "low apple/high apple"
    outcome = np.array([["0", "treasure"], [apple, "0"], [apple, apple]])
    counts = grain(features, outcome, np.array([False, False, True]))
    assert counts == {"pairs": 6, "distinct": 4, "0": 2, apple: 2, "treasure": 1,
                      "apple_with_key": 1, "apple_without_key": 1, "apple_both": 0}


@pytest.mark.parametrize("name", ["first_steps", "credit_split", "feature_grain", "dead_gates"])
def test_a_missing_run_is_one_line(name, tmp_path, capsys):
    assert _script(name).main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


@pytest.mark.parametrize("regime", ["jaxcredit", "cocoa"])
def test_hca_state_samples_pairs_beyond_l32_unless_the_learner_names_its_pairs(regime):
    """run.py's cases: HCA+ draws 16 later steps per step beyond L = 32 (O(L²) pairs are too
    many on a CPU), and "hca_state all-pairs" keeps every pair in both regimes."""
    run = _script("run")

    def options(label, length):
        return dict(run.case(length, label, 10, regime=regime).config.estimator.options)

    assert options("hca_state", 63)["pairs"] == "sampled"
    assert options("hca_state", 63)["num_pairs"] == 16
    assert options("hca_state", 23).get("pairs", "all") == "all"
    assert options("hca_state all-pairs", 63)["pairs"] == "all"

"""An environment's recommended settings: what `jaxcredit train` and `sweep` apply where the user
gives no flag (envs/base.py ``recommended_settings``; the HCA tasks recommend the HCA-tasks
experiment's settings), said on stderr and recorded in config.json; a config built in Python
never reads them."""

import json

import numpy as np
import pytest

from jaxcredit import cli, runlog
from jaxcredit.agents import TrainConfig
from jaxcredit.flags import parse
from jaxcredit.train_flags import TrainArgs, apply_recommended_settings, given_flags

ISSUE_COMMAND = ["train", "--algo", "a2c", "--env", "DelayedEffect", "--env-option", "n=30",
                 "--env-option", "sigma=1", "--gamma", "1", "--total-timesteps", "18600",
                 "--num-seeds", "16", "--no-progress"]


def _applied(argv):
    args = parse(TrainArgs, argv, "jaxcredit train")
    return args, apply_recommended_settings(args, given_flags(argv))


def test_the_environment_fills_only_the_flags_not_given():
    args, applied = _applied(["--env", "DelayedEffect", "--env-option", "n=30", "--lr", "1e-2",
                              "--anneal-lr", "True"])
    # Whole episodes of n + 1 steps, 4 per update, a constant rate, evaluation on.
    assert applied == {"num_steps": 31, "ent_coef": 0.003, "max_grad_norm": 1.0,
                       "estimator_lr": 3e-3, "eval_every": 10, "gamma": 1.0}
    assert args.num_steps == 31 and args.num_envs == 4 and args.gamma == 1.0
    assert args.lr == 1e-2 and args.anneal_lr  # written: the user's


def test_environments_without_recommendations_keep_the_engine_defaults():
    for env in (["--env", "CartPole-v1"], ["--env", "KeyToDoor"], ["--env", "NoSuchEnv"]):
        args, applied = _applied(env)
        assert applied == {} and args.num_steps is None  # the algorithm preset's, later
    assert TrainConfig(env="DelayedEffect").resolved().num_steps == 128  # Python never reads them


def test_the_issue_command_learns_and_records_where_its_settings_came_from(tmp_path, capsys):
    """The command a new user types (DelayedEffect n=30 σ=1, 600 episodes) learns the delayed
    effect with the recommended settings: mean final P(optimal first action) 0.781 over seeds
    0-15 (and 0.749 with --seed 1), where the engine's defaults left it at 0.504."""
    out = tmp_path / "run"
    assert cli.main([*ISSUE_COMMAND, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: the run used DelayedEffect's recommended settings for the flags not given: " \
           "num_steps=31 lr=0.003 anneal_lr=False" in err
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["num_steps"] == 31 and saved["settings"][0]["lr"] == pytest.approx(3e-3)
    assert "lr" in saved["defaults_from"] and "gamma" not in saved["defaults_from"]  # --gamma 1
    metrics = runlog.read_metrics(out)
    last = np.asarray(metrics["update"]) == max(metrics["update"])
    assert np.asarray(metrics["eval/p_optimal_first_action"])[last].mean() > 0.7

"""TrainConfig's records and its one flat namespace: the flat names are the flags they always were,
``from_flat``/``flat`` and ``from_dict``/``to_dict`` round-trip a config with every record set,
the flat ``config.json`` of older run directories still reads, and each record validates its own
fields with messages that name the flag."""

import json

import pytest

from jaxcredit.agents import (EstimatorConfig, EvalConfig, FittedStageConfig, OffPolicyConfig,
                              StageConfig, TrainConfig)
from jaxcredit.agents.config import OPTION_FIELDS, flat_fields
from jaxcredit.train_flags import HELP_ORDER, TrainArgs

# The flags of TrainConfig before its fields were grouped into records, in their order then.
FLAGS_BEFORE_RECORDS = (
    "algo", "objective", "estimator", "estimator_options", "relabel", "relabel_options",
    "redistribute", "redistribute_options", "env", "env_options", "num_envs", "group_size",
    "num_steps", "total_timesteps", "update_epochs", "num_minibatches", "hidden_sizes",
    "activation", "anneal_lr", "critic", "normalize_advantage", "clip_value_loss",
    "policy_epsilon", "adam_eps", "estimator_fit_steps", "estimator_fit_minibatches",
    "estimator_fit_windows", "estimator_anneal_lr", "estimator_assign_before_fit",
    "estimator_fit_until_loss", "burn_in_updates", "model_warmup_updates",
    "estimator_pretrain_steps", "redistribute_fit_steps", "redistribute_fit_minibatches",
    "redistribute_fit_windows", "redistribute_anneal_lr", "redistribute_fit_until_loss",
    "buffer_size", "batch_size", "learning_starts", "gradient_steps", "target_update_every",
    "n_step", "dueling", "huber", "eval_every", "eval_episodes", "eval_max_steps",
)
# Fields added since, listed after those (HELP_ORDER does not rank them).
FLAGS_ADDED = ("policy", "action_dist", "normalize_env", "meta_gradient", "layer_norm",
               "reward_scale")

# A resolved config's ``config.json`` entry as the flat TrainConfig wrote it (written by the
# revision before the records, every record's fields away from their defaults somewhere).
OLD_FLAT_DICT = {
    "algo": "a2c", "objective": "pg", "estimator": "hca_state",
    "estimator_options": {"hidden": [8, 8]}, "relabel": None, "relabel_options": {},
    "redistribute": "rudder", "redistribute_options": {"features": 4}, "env": "DelayedEffect",
    "env_options": {"n": 3}, "num_envs": 2, "group_size": 1, "num_steps": 8,
    "total_timesteps": 64, "update_epochs": 1, "num_minibatches": 1, "hidden_sizes": [8],
    "activation": "tanh", "anneal_lr": True, "critic": True, "normalize_advantage": False,
    "clip_value_loss": False, "policy_epsilon": 0.0, "adam_eps": 1e-05,
    "estimator_fit_steps": 2, "estimator_fit_minibatches": 1, "estimator_fit_windows": 3,
    "estimator_anneal_lr": False, "estimator_assign_before_fit": True,
    "estimator_fit_until_loss": 0.0, "burn_in_updates": 0, "model_warmup_updates": 0,
    "estimator_pretrain_steps": 0, "redistribute_fit_steps": 4, "redistribute_fit_minibatches": 1,
    "redistribute_fit_windows": 1, "redistribute_anneal_lr": False,
    "redistribute_fit_until_loss": 0.15, "buffer_size": 64, "batch_size": 128,
    "learning_starts": 1000, "gradient_steps": 1, "target_update_every": 50, "n_step": 3,
    "dueling": False, "huber": False, "eval_every": 2, "eval_episodes": 16, "eval_max_steps": 20,
}


def every_record_set() -> TrainConfig:
    """A config with every field of every record away from its default."""
    return TrainConfig(
        algo="a2c", objective="pg", env="DelayedEffect", env_options=(("n", 3),),
        estimator=EstimatorConfig("hca_state", options=(("hidden", (8, 8)), ("model", "mlp")),
                                  fit_steps=2, fit_minibatches=2, fit_windows=3, anneal_lr=True,
                                  fit_until_loss=0.1, assign_before_fit=True, pretrain_steps=5),
        relabel=StageConfig("her", options=(("k", 2),)),
        redistribute=FittedStageConfig("rudder", options=(("features", 4),), fit_steps=7,
                                       fit_minibatches=2, fit_windows=2, anneal_lr=True,
                                       fit_until_loss=0.15),
        num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, hidden_sizes=(8, 4), policy="gru",
        burn_in_updates=1, model_warmup_updates=2, meta_gradient=("lambda", "gamma"),
        off_policy=OffPolicyConfig(buffer_size=64, batch_size=16, learning_starts=8,
                                   gradient_steps=2, target_update_every=3, n_step=2,
                                   dueling=True, huber=True, reward_scale=0.5),
        evaluation=EvalConfig(every=2, episodes=4, max_steps=20))


def test_the_flat_names_are_the_flags_they_were():
    assert sorted(f.name for f in flat_fields()) == sorted(FLAGS_BEFORE_RECORDS + FLAGS_ADDED)
    assert OPTION_FIELDS == ("estimator_options", "relabel_options", "redistribute_options",
                             "env_options")
    paths = {f.name: f.path for f in flat_fields()}
    assert paths["estimator"] == ("estimator", "name")
    assert paths["redistribute_fit_until_loss"] == ("redistribute", "fit_until_loss")
    assert paths["buffer_size"] == ("off_policy", "buffer_size")
    assert paths["eval_every"] == ("evaluation", "every")
    # --help lists them as it did; a new field would follow them.
    assert HELP_ORDER == FLAGS_BEFORE_RECORDS
    config_flags = [name for name in TrainArgs.__dataclass_fields__ if name in paths]
    assert config_flags == list(FLAGS_BEFORE_RECORDS + FLAGS_ADDED)


def test_each_flag_keeps_the_help_of_its_stage():
    docs = {f.name: f.doc for f in flat_fields()}
    assert docs["estimator"].startswith("estimate stage: a registered name")
    assert docs["relabel"].startswith("relabel stage") and docs["relabel_options"] == \
        "options of the relabel stage"
    assert docs["redistribute"].startswith("redistribute stage")
    assert docs["estimator_options"] == "options of the estimator, e.g. n=10 or model=oracle"
    assert "estimator's learning rate" in docs["estimator_anneal_lr"]
    assert "redistributor's learning rate" in docs["redistribute_anneal_lr"]
    assert docs["estimator_fit_windows"] == docs["redistribute_fit_windows"]
    assert all(docs.values())


def test_flat_and_dict_forms_round_trip_a_config_with_every_record_set():
    config = every_record_set()
    assert TrainConfig.from_flat(**config.flat()) == config
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    saved = config.to_dict()
    assert saved["estimator"]["fit_windows"] == 3 and saved["evaluation"]["every"] == 2
    assert saved["estimator"]["options"] == {"hidden": (8, 8), "model": "mlp"}
    assert saved["off_policy"]["huber"] is True and saved["hidden_sizes"] == [8, 4]
    defaults = TrainConfig()
    assert TrainConfig.from_dict(defaults.to_dict()) == defaults
    assert TrainConfig.from_flat() == defaults


def test_an_old_flat_config_dict_still_reads():
    config = TrainConfig.from_dict(OLD_FLAT_DICT)
    assert config.estimator == EstimatorConfig("hca_state", options=(("hidden", (8, 8)),),
                                               fit_steps=2, fit_windows=3,
                                               assign_before_fit=True)
    assert config.relabel == StageConfig()
    assert config.redistribute == FittedStageConfig("rudder", options=(("features", 4),),
                                                    fit_until_loss=0.15)
    assert config.off_policy == OffPolicyConfig(buffer_size=64, n_step=3)
    assert config.evaluation == EvalConfig(every=2, max_steps=20)
    assert config.env_options == (("n", 3),) and config.hidden_sizes == (8,)
    assert config.resolved() == config
    # It is the config the flat names give (fields added since at their defaults), and what
    # it writes now reads back the same.
    assert config.flat() == {**OLD_FLAT_DICT, "meta_gradient": (), "policy": "mlp",
                             "action_dist": None, "normalize_env": None,
                             "layer_norm": False, "reward_scale": 1.0, **{
        name: tuple((k, tuple(v) if isinstance(v, list) else v)
                    for k, v in sorted(OLD_FLAT_DICT[name].items())) for name in OPTION_FIELDS},
        "hidden_sizes": (8,)}
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_a_stage_given_by_name_is_that_stage_with_its_defaults():
    config = TrainConfig(estimator="gae", relabel=None, redistribute="rudder")
    assert config.estimator == EstimatorConfig(name="gae")
    assert config.relabel == StageConfig() and config.redistribute == FittedStageConfig("rudder")
    assert TrainConfig(algo="reinforce").resolved().estimator.name == "mc"
    # Presets fill the estimator's name only: its other settings stay.
    filled = TrainConfig(estimator=EstimatorConfig(fit_steps=9)).resolved().estimator
    assert filled == EstimatorConfig("gae", fit_steps=9)
    assert hash(TrainConfig().resolved()) == hash(TrainConfig().resolved())


def test_replace_and_from_flat_take_flat_names_and_name_an_unknown_one():
    config = TrainConfig(estimator=EstimatorConfig("hca_state", fit_steps=3))
    changed = config.replace(estimator="hca_return", eval_every=0, n_step=4)
    assert changed.estimator == EstimatorConfig("hca_return", fit_steps=3)
    assert changed.evaluation.every == 0 and changed.off_policy.n_step == 4
    assert config.estimator.name == "hca_state"  # frozen: a copy
    with pytest.raises(ValueError, match="no field.*estimator_fit_stepz"):
        TrainConfig.from_flat(estimator_fit_stepz=2)
    with pytest.raises(ValueError, match="no field.*fit_steps"):
        config.replace(fit_steps=2)


@pytest.mark.parametrize("flat, message", [
    (dict(eval_episodes=0), "eval_episodes must be a positive integer"),
    (dict(eval_every=-1), "eval_every must be a non-negative integer"),
    (dict(eval_max_steps=0), "eval_max_steps must be positive"),
    (dict(estimator_fit_steps=-1), "estimator_fit_steps must be a non-negative integer"),
    (dict(redistribute_fit_windows=0), "redistribute_fit_windows must be a positive integer"),
    (dict(redistribute_fit_until_loss=-0.1), "redistribute_fit_until_loss must be >= 0"),
    (dict(estimator_pretrain_steps=-1), "estimator_pretrain_steps must be a non-negative"),
    (dict(estimator_pretrain_steps=5), "estimator_pretrain_steps needs burn_in_updates >= 1"),
    (dict(num_envs=6, redistribute_fit_minibatches=4),
     "num_envs=6 is not divisible by redistribute_fit_minibatches=4"),
    (dict(buffer_size=0), "buffer_size must be a positive integer"),
    (dict(learning_starts=-1), "learning_starts must be non-negative"),
    (dict(algo="dqn", buffer_size=2, batch_size=1), "holds less than one step of the 4"),
])
def test_each_record_checks_its_fields_by_their_flags(flat, message):
    with pytest.raises(ValueError, match=message) as error:
        TrainConfig.from_flat(**{"algo": "a2c", **flat}).resolved()
    assert "\n" not in str(error.value)


def test_a_record_validates_under_the_prefix_it_is_given():
    with pytest.raises(ValueError, match="^estimator_fit_windows must be"):
        EstimatorConfig(fit_windows=0).validate("estimator_")
    with pytest.raises(ValueError, match="^eval_episodes must be"):
        EvalConfig(episodes=0).validate("eval_")
    with pytest.raises(ValueError, match="^n_step must be"):
        OffPolicyConfig(n_step=0).validate("")
    StageConfig("anything").validate("relabel_")  # the registry checks names when it builds
    assert FittedStageConfig(fit_steps=3, fit_windows=2).fit.steps == 3

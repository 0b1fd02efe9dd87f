"""Tests of jaxcredit.bench: the timing protocol and its tables, PureJaxRL loaded from a checkout
or a git directory without editing it (a stand-in PureJaxRL written here), jaxcredit at another git
revision under its own package name, the races' wiring, and small end-to-end runs of
``jaxcredit bench train`` and ``jaxcredit bench estimators``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import gymnax
import jax
import numpy as np
import pytest

from jaxcredit import cli
from jaxcredit.bench import baseline, purejaxrl, timing
from jaxcredit.bench import races as bench_races
from jaxcredit.bench import train as bench_train

BASELINE_REV = "21c2ce5"  # the last commit before the credit-pipeline refactor

# A PureJaxRL look-alike: wrappers.py imports brax and navix at the top and unpacks gymnax's old
# five-value step; ppo.py imports `wrappers` as a top-level module and keeps its defaults in a
# `config` literal under __main__, as PureJaxRL's do.
FAKE_WRAPPERS = '''
from brax import envs
from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper
import navix as nx


class LogWrapper:
    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = self._env.step(key, state, action, params)
        info["returned_episode"] = done
        return obs, state, reward, done, info


class BraxGymnaxWrapper:
    def __init__(self, env_name):
        self._env = envs.get_environment(env_name=env_name)
'''
# The stand-ins' rollout: reset every environment, then always push left, summing the rewards
# (times SCALE) and returning OUT per step.
STAND_IN_ROLLOUT = '''    def train(rng):
        keys = jax.random.split(rng, config["NUM_ENVS"])
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)

        def step(carry, key):
            state, total = carry
            keys = jax.random.split(key, config["NUM_ENVS"])
            action = jnp.zeros(config["NUM_ENVS"], jnp.int32)
            obs, state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                keys, state, action, env_params)
            return (state, total + reward.sum() * SCALE), OUT
'''

FAKE_PPO = '''
import jax
import jax.numpy as jnp
import gymnax
from wrappers import LogWrapper


def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    env = LogWrapper(env)

ROLLOUT_PPO

        steps = int(config["NUM_UPDATES"]) * config["NUM_STEPS"]
        (_, total), done = jax.lax.scan(step, (state, 0.0), jax.random.split(rng, steps))
        return {"total": total, "done": done}

    return train


if __name__ == "__main__":
    config = {"NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "GAMMA": 0.99,
              "GAE_LAMBDA": 0.95, "ENV_NAME": "CartPole-v1", "DEBUG": True}
'''.replace("ROLLOUT_PPO\n", STAND_IN_ROLLOUT.replace("SCALE", 'config["GAMMA"]')
             .replace("OUT", "done"))


@pytest.fixture(scope="module")
def fake_purejaxrl(tmp_path_factory):
    """A checkout folder and its git directory."""
    root = tmp_path_factory.mktemp("purejaxrl_checkout")
    (root / "purejaxrl").mkdir()
    (root / "purejaxrl" / "wrappers.py").write_text(textwrap.dedent(FAKE_WRAPPERS))
    (root / "purejaxrl" / "ppo.py").write_text(textwrap.dedent(FAKE_PPO))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    try:
        subprocess.run([*git, "init", "-q"], check=True, capture_output=True)
        subprocess.run([*git, "add", "."], check=True, capture_output=True)
        subprocess.run([*git, "commit", "-qm", "fake"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return root, None
    return root, root / ".git"


def git_revision_available(rev: str) -> bool:
    try:
        baseline.resolve(rev, baseline.repository_root())
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# The timing protocol and the tables
# ---------------------------------------------------------------------------------------------


def test_race_alternates_calls_and_reports_time_per_step_against_the_first_row():
    order = []

    def case(label, steps, score=None):
        c = timing.compile_case(label, lambda key: jax.random.normal(key, (8,)).sum(),
                                lambda s: (jax.random.key(s),), steps, score)
        call = c.call
        c.call = lambda seed: order.append((label, seed)) or call(seed)
        return c

    cases = timing.race([case("a", 100), case("b", 300, score=lambda out: 7.0)], repeats=3,
                        seed=10)
    # One warm-up each (seed − 1), then a, b, a, b, a, b with seeds 10, 10, 11, 11, 12, 12.
    assert order == [("a", 9), ("b", 9), ("a", 10), ("b", 10), ("a", 11), ("b", 11), ("a", 12),
                     ("b", 12)]
    for c in cases:
        c.times = [1.0, 2.0, 4.0]  # median 2 s
    result = bench_races.race_result("toy", cases)
    assert [r["sps"] for r in result["cases"]] == [50, 150]
    assert [r["time_per_step_vs_first"] for r in result["cases"]] == [1.0, round(1 / 3, 3)]
    table = bench_races.format_race(result)
    assert "toy (time/step relative to a)" in table and "150" in table
    # A scored case keeps what each timed call returned, scored after the clock stopped.
    assert "score_all" not in result["cases"][0] and result["cases"][1]["score_all"] == [7.0] * 3


def test_fit_steps_parse_and_reject_non_integers():
    assert bench_train.parse_fit_steps(("1,4", "16", "4")) == [1, 4, 16]
    for bad in (("1,x",), ("-1",), ()):
        with pytest.raises(ValueError, match="--fit-steps"):
            bench_train.parse_fit_steps(bad)


def test_estimator_races_group_by_fit_steps(monkeypatch):
    """GAE first in every race; learned estimators once per fit-steps value, a parameter-free
    one only in the first race; no compilation here (engine_case is replaced)."""
    built = []

    def fake_engine_case(label, agents, fields, hparams, seeds=1, **extra):
        built.append((label, fields.get("estimator_fit_steps"), fields["eval_every"]))
        return timing.Case(label, None, None, 1000, 0.0, times=[1.0], extra=extra)

    monkeypatch.setattr(bench_races, "engine_case", fake_engine_case)
    monkeypatch.setattr(bench_races, "race", lambda cases, repeats, seed: cases)
    args = bench_train.TrainBench(estimator_envs=4, estimator_steps=8, estimator_updates=1)
    specs = bench_train.parse_specs(["hca_return,nstep:n=3"])
    results = bench_races.estimator_races(args, specs, [1, 16], (), {"gamma": 0.9,
                                                                     "lambda_": 0.9}, 1)
    assert [[c["label"] for c in r["cases"]] for r in results] == [
        ["gae", "hca_return", "nstep:n=3"], ["gae", "hca_return"]]
    assert ("hca_return", 16, 0) in built and ("nstep:n=3", 1, 0) in built
    assert results[1]["cases"][1]["estimator_fit_steps"] == 16
    assert results[0]["cases"][2]["estimator_fit_steps"] is None


# ---------------------------------------------------------------------------------------------
# PureJaxRL from a user's checkout
# ---------------------------------------------------------------------------------------------


def test_five_value_step_gives_done_as_terminated_or_truncated():
    env, params = gymnax.make("CartPole-v1")
    wrapped = purejaxrl.FiveValueStep(env)
    key = jax.random.key(0)
    _, state = wrapped.reset(key, params)
    state = state.replace(time=params.max_steps_in_episode - 1)  # the next step times out
    out = wrapped.step(key, state, 0, params)
    assert len(out) == 5 and bool(out[3])
    assert wrapped.num_actions == env.num_actions  # everything else is the env's


@pytest.mark.parametrize("form", ["checkout", "git"])
def test_purejaxrl_loads_unedited_with_stand_ins_for_missing_packages(form, fake_purejaxrl,
                                                                      tmp_path):
    root, git_dir = fake_purejaxrl
    if form == "git":
        if git_dir is None:
            pytest.skip("git is not available")
        folder = purejaxrl.export_from_git(str(git_dir), tmp_path)
    else:
        folder = purejaxrl.source_folder(str(root))
    before = sys.modules.get("wrappers")
    ppo, defaults = purejaxrl.load_ppo(folder)
    assert sys.modules.get("wrappers") is before  # the top-level name is not left behind
    assert defaults["TOTAL_TIMESTEPS"] == 5e5 and defaults["ENV_NAME"] == "CartPole-v1"
    missing = purejaxrl.missing_packages()
    assert not any(m.split(".")[0] in missing for m in sys.modules)
    if "brax" in missing:  # a stand-in satisfied the import and refuses to be used
        with pytest.raises(ImportError, match="brax"):
            ppo.LogWrapper.__init__.__globals__["BraxGymnaxWrapper"]("ant")
    config = dict(defaults, TOTAL_TIMESTEPS=1024, NUM_STEPS=8)
    out = jax.jit(ppo.make_train(config))(jax.random.PRNGKey(0))
    assert out["done"].shape == (256, 4) and np.isfinite(float(out["total"]))


def test_purejaxrl_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="no purejaxrl/ppo.py"):
        purejaxrl.source_folder(str(tmp_path))
    with pytest.raises(ValueError, match="cannot read purejaxrl/ppo.py"):
        purejaxrl.export_from_git(str(tmp_path / "none.git"), tmp_path)


# ---------------------------------------------------------------------------------------------
# jaxcredit at another revision
# ---------------------------------------------------------------------------------------------


def test_rename_package_rewrites_imports_and_registry_paths_only():
    source = textwrap.dedent('''
        import jaxcredit
        import jaxcredit.envs as E
        from jaxcredit.agents import make_train
        ENTRIES = {"gae": "jaxcredit.estimators.classic:gae"}
        jaxcredit_like = my.jaxcredit + "runs/jaxcredit-x" + "jaxcredit_2"
    ''')
    out = baseline.rename_package(source, "jaxcredit_abc")
    assert "import jaxcredit_abc\n" in out and "import jaxcredit_abc.envs as E" in out
    assert "from jaxcredit_abc.agents import" in out
    assert '"jaxcredit_abc.estimators.classic:gae"' in out
    assert 'jaxcredit_like = my.jaxcredit + "runs/jaxcredit-x" + "jaxcredit_2"' in out


@pytest.mark.skipif(not git_revision_available(BASELINE_REV),
                    reason=f"{BASELINE_REV} is not in this checkout's history")
def test_baseline_revision_imports_beside_the_current_engine(tmp_path):
    import jaxcredit
    from jaxcredit import agents

    old, short = baseline.import_revision(BASELINE_REV, tmp_path)
    assert short == BASELINE_REV and old.__name__ == f"jaxcredit_{BASELINE_REV}.agents"
    assert sys.modules["jaxcredit"] is jaxcredit and old.TrainConfig is not agents.TrainConfig
    fields = bench_races.ppo_fields(4, 512)
    config = baseline.make_config(old, **fields)
    assert config.num_updates == 1 and config.update_epochs == 4
    # The refactored engine evaluates by default; the old one has no evaluation to turn off.
    assert baseline.make_config(agents, **fields, eval_every=0).evaluation.every == 0
    with pytest.raises(ValueError, match="has no field.*eval_every"):
        baseline.make_config(old, **fields, eval_every=0)
    with pytest.raises(ValueError, match="not a commit"):
        baseline.import_revision("no-such-revision", tmp_path)


# ---------------------------------------------------------------------------------------------
# End to end, small
# ---------------------------------------------------------------------------------------------


def run_cli(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


_purejaxrl_ppo_fields = bench_races.ppo_fields


def _small_ppo_fields(num_envs: int, total_timesteps: int) -> dict:
    """A smaller PPO than PureJaxRL's (one epoch, one minibatch, narrow MLPs): it compiles in
    about 70% of the time; both engines of a race still get the same fields."""
    return dict(_purejaxrl_ppo_fields(num_envs, total_timesteps), update_epochs=1,
                num_minibatches=1, hidden_sizes=(8,))


def test_bench_train_main_race_against_purejaxrl_and_a_baseline(fake_purejaxrl, tmp_path,
                                                                capsys, monkeypatch):
    root, _ = fake_purejaxrl
    monkeypatch.setattr(bench_races, "ppo_fields", _small_ppo_fields)
    argv = ["bench", "train", "--quick", "--total-timesteps", "512", "--purejaxrl", str(root),
            "--json", str(tmp_path / "bench.json")]
    rows = ["jaxcredit", "jaxcredit, evaluating", "purejaxrl"]
    if git_revision_available(BASELINE_REV):
        argv += ["--baseline-rev", BASELINE_REV]
        rows.append(f"jaxcredit {BASELINE_REV}")
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "bench.json").read_text())
    (race,) = saved["races"]
    assert [c["label"].split(" ")[0] if c["label"].startswith("purejaxrl") else c["label"]
            for c in race["cases"]] == rows
    assert all(c["sps"] > 0 and len(c["run_s_all"]) == 2 for c in race["cases"])
    assert race["cases"][0]["env_steps_per_call"] == 512
    assert set(race["ratios"]) == {f"jaxcredit/{label}" for label in
                                   [c["label"] for c in race["cases"][1:]]}
    assert "SPS ratio jaxcredit/purejaxrl" in out and "skipped" not in out


def test_bench_train_without_purejaxrl_says_the_comparison_was_skipped(tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setattr(bench_train, "main_race", lambda *a: {
        "race": "stub", "reference": "jaxcredit", "ratios": {},
        "cases": [{"label": "jaxcredit", "sps": 1, "compile_s": 0.0, "run_s_median": 1.0,
                   "time_per_step_vs_first": 1.0}]})
    code, out, _ = run_cli(["bench", "train", "--quick", "--json", str(tmp_path / "b.json")],
                           capsys)
    assert code == 0 and "PureJaxRL comparison skipped" in out
    assert json.loads((tmp_path / "b.json").read_text())["purejaxrl"].startswith("skipped")


@pytest.mark.parametrize("argv, message", [
    (["--redistributors", "rudr"], "unknown redistributor 'rudr'"),
    (["--redistributors", "rudder:cell=gru"], "rudder: cell must be one of"),
    (["--redistributors", "rudder", "--redistribute-fit-steps", "x"],
     "--redistribute-fit-steps takes non-negative integers"),
    (["--redistributors", "rudder", "--redistributor-env", "NoSuchEnv"],
     "Unknown environment 'NoSuchEnv'"),
    (["--redistributors", "rudder", "--redistributor-envs", "1", "--redistributor-steps", "3"],
     "not divisible"),
])
def test_bench_train_bad_redistributor_race_input_is_one_line_and_exit_2(argv, message, capsys):
    code, out, err = run_cli(["bench", "train", "--no-main", *argv], capsys)
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxcredit: error: ") and message in lines[0]


def test_bench_estimators_small(tmp_path, capsys):
    code, out, err = run_cli(["bench", "estimators", "--estimators", "n_step", "--T", "8",
                              "--B", "4", "--repeats", "2", "--gamma", "0.9", "--json",
                              str(tmp_path / "e.json")], capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "e.json").read_text())
    assert saved["gamma"] == 0.9 and {t["impl"] for t in saved["timings"]} == {"scan", "rlax"}
    assert "n_step (n=5)" in out


def test_bench_all_smoke_writes_every_table(tmp_path, capsys, monkeypatch):
    """`jaxcredit bench all` at its smallest size: the estimator table, the PPO races (main,
    many envs, many seeds), the fitted-estimator and RUDDER races, as JSON and markdown."""
    # The smaller PPO of the test above: compiling the six PPO programs is most of this test.
    monkeypatch.setattr(bench_races, "ppo_fields", _small_ppo_fields)
    code, out, err = run_cli(["bench", "all", "--size", "smoke", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "all.json").read_text())
    assert saved["size"] == "smoke"
    assert {t["estimator"].split(" ")[0] for t in saved["estimators"]["timings"]} == {
        "gae", "vtrace"}
    names = [r["race"] for r in saved["train"]["races"]]
    assert len(names) == 5 and "64 envs" in names[1] and "2 seeds vmapped" in names[2]
    # The last race: PPO+RUDDER against PPO+GAE, time per env step relative to PPO+GAE.
    gae, rudder = saved["train"]["races"][-1]["cases"]
    assert gae["label"] == "gae" and gae["redistribute"] is None
    assert rudder["label"].startswith("rudder") and rudder["redistribute_fit_steps"] == 1
    assert rudder["sps"] > 0 and rudder["time_per_step_vs_first"] > 0
    assert rudder["env_steps_per_call"] == gae["env_steps_per_call"]
    text = (tmp_path / "all.md").read_text()
    assert "### Estimators against rlax" in text and text.count("```") == 2 * (1 + len(names))


def test_bench_all_bad_size_is_one_line(capsys):
    code, out, err = run_cli(["bench", "all", "--size", "huge"], capsys)
    assert code == 2 and not out
    assert err.strip().startswith("jaxcredit: error: --size must be auto or one of")


def test_dqn_race_maps_purejaxrl_dqn_defaults_to_the_engine():
    """PureJaxRL's dqn.py counts timesteps in env steps over all NUM_ENVS environments: it learns
    when timesteps % TRAINING_INTERVAL == 0, updates the target when timesteps %
    TARGET_UPDATE_INTERVAL == 0 and anneals ε over EPSILON_ANNEAL_TIME timesteps. With its
    defaults (10 envs, interval 10, target 500, anneal 25e4) and 5e5 steps, one engine update is
    one vector step, the target moves every 500 / 10 = 50 updates and ε anneals over half the
    run; its Q-network is Dense(120) → Dense(84), ReLU, unclipped."""
    from jaxcredit.agents import TrainConfig
    from jaxcredit.bench.races import dqn_fields

    defaults = {"NUM_ENVS": 10, "BUFFER_SIZE": 10000, "BUFFER_BATCH_SIZE": 128,
                "EPSILON_START": 1.0, "EPSILON_FINISH": 0.05, "EPSILON_ANNEAL_TIME": 25e4,
                "TARGET_UPDATE_INTERVAL": 500, "LR": 2.5e-4, "LEARNING_STARTS": 10000,
                "TRAINING_INTERVAL": 10, "LR_LINEAR_DECAY": False, "GAMMA": 0.99, "TAU": 1.0}
    fields, hparams = dqn_fields(defaults, 500_000)
    expected = dict(algo="dqn", estimator="q_learning", env="CartPole-v1", num_envs=10,
                    num_steps=1, total_timesteps=500_000, buffer_size=10000, batch_size=128,
                    learning_starts=10000, gradient_steps=1, target_update_every=50,
                    hidden_sizes=(120, 84), activation="relu", anneal_lr=False, eval_every=0)
    assert fields == expected
    assert hparams == dict(lr=2.5e-4, gamma=0.99, tau=1.0, epsilon_start=1.0, epsilon_end=0.05,
                           epsilon_fraction=0.5, max_grad_norm=1e6)
    config = TrainConfig.from_flat(**fields)
    assert config.num_updates == 50_000  # PureJaxRL's NUM_UPDATES = 5e5 // 10
    # An interval of 4 vector steps of 8 envs: 4 steps per update, the target every 25.
    fields, hparams = dqn_fields(dict(defaults, NUM_ENVS=8, TRAINING_INTERVAL=32,
                                      TARGET_UPDATE_INTERVAL=800, EPSILON_ANNEAL_TIME=1e6),
                                 200_000)
    assert (fields["num_steps"], fields["target_update_every"]) == (4, 25)
    assert hparams["epsilon_fraction"] == 1.0
    with pytest.raises(ValueError, match="not a multiple of its NUM_ENVS"):
        dqn_fields(dict(defaults, TRAINING_INTERVAL=15), 500_000)


# A dqn.py look-alike, as PureJaxRL's: wandb and gymnax's own LogWrapper imported at the top, the
# old five-value step unpacked, jax.tree_map called, and its defaults in `config` inside main().
FAKE_DQN = '''
import jax
import jax.numpy as jnp
import wandb
from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper
import gymnax


def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_ENVS"]
    basic_env, env_params = gymnax.make(config["ENV_NAME"])
    env = LogWrapper(FlattenObservationWrapper(basic_env))

ROLLOUT_DQN

        steps = jax.random.split(rng, int(config["NUM_UPDATES"]))
        (_, total), ended = jax.lax.scan(step, (state, 0.0), steps)
        return jax.tree_map(jnp.sum, {"total": total, "episodes": ended})

    return train


def main():
    config = {"NUM_ENVS": 10, "BUFFER_SIZE": 10000, "BUFFER_BATCH_SIZE": 128,
              "TOTAL_TIMESTEPS": 5e5, "EPSILON_START": 1.0, "EPSILON_FINISH": 0.05,
              "EPSILON_ANNEAL_TIME": 25e4, "TARGET_UPDATE_INTERVAL": 500, "LR": 2.5e-4,
              "LEARNING_STARTS": 10000, "TRAINING_INTERVAL": 10, "LR_LINEAR_DECAY": False,
              "GAMMA": 0.99, "TAU": 1.0, "ENV_NAME": "CartPole-v1", "SEED": 0, "NUM_SEEDS": 1,
              "WANDB_MODE": "disabled"}
    wandb.init(mode=config["WANDB_MODE"])
'''.replace("ROLLOUT_DQN\n", STAND_IN_ROLLOUT.replace("SCALE", "1.0")
             .replace("OUT", 'info["returned_episode"]'))


def test_purejaxrl_dqn_loads_unedited_through_the_bridge(tmp_path):
    """dqn.py exported from git and imported as it is: gymnax ≥ 1.0's LogWrapper returns six
    values and jax has no tree_map, so the stand-in's train fails without the bridge and runs
    with it; its defaults are read from main() and map onto the engine."""
    root = tmp_path / "checkout"
    (root / "purejaxrl").mkdir(parents=True)
    (root / "purejaxrl" / "dqn.py").write_text(textwrap.dedent(FAKE_DQN))
    for name in purejaxrl.FILES:
        (root / "purejaxrl" / name).write_text("")
    _commit_all(root)
    (tmp_path / "export").mkdir()
    folder = purejaxrl.export_from_git(str(root / ".git"), tmp_path / "export",
                                       files=purejaxrl.FILES + (purejaxrl.DQN_FILE,))
    dqn, defaults = purejaxrl.load_dqn(folder)
    assert defaults["TRAINING_INTERVAL"] == 10 and defaults["TARGET_UPDATE_INTERVAL"] == 500
    fields, _ = bench_races.dqn_fields(defaults, 1000)
    assert (fields["num_envs"], fields["num_steps"], fields["target_update_every"]) == (10, 1, 50)
    out = jax.jit(dqn.make_train(dict(defaults, TOTAL_TIMESTEPS=200)))(jax.random.key(0))
    # 20 vector steps of 10 CartPoles always pushing left: reward 1 per step, and an episode
    # falls in 8–12 steps, so each environment ends one or two.
    assert float(out["total"]) == 200.0
    assert 10 <= int(out["episodes"]) <= 20
    # Unbridged, the same module cannot run on this gymnax and jax.
    with purejaxrl._stand_ins(purejaxrl.missing_packages()):
        raw = purejaxrl._load_module("purejaxrl_dqn_raw", folder / purejaxrl.DQN_FILE)
    with pytest.raises(ValueError, match="too many values to unpack"):
        raw.make_train(dict(defaults, TOTAL_TIMESTEPS=200))(jax.random.key(0))
    raw.LogWrapper = dqn.LogWrapper  # the step bridged, not jax: tree_map is still missing
    with pytest.raises(AttributeError, match="tree_map"):
        raw.make_train(dict(defaults, TOTAL_TIMESTEPS=200))(jax.random.key(0))


# A ppo_continuous_action.py look-alike, as PureJaxRL's: it builds BraxGymnaxWrapper(ENV_NAME)
# with env_params None (its Brax task), wraps it in LogWrapper, clips actions to [-1, 1] and
# steps every environment once at full push.
FAKE_CONTINUOUS = '''
import jax
import jax.numpy as jnp
from wrappers import LogWrapper, BraxGymnaxWrapper


def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    env, env_params = BraxGymnaxWrapper(config["ENV_NAME"]), None
    env = LogWrapper(env)

    def train(rng):
        keys = jax.random.split(rng, config["NUM_ENVS"])
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
        shape = (config["NUM_ENVS"],) + env.action_space(env_params).shape
        action = jnp.clip(jnp.full(shape, 5.0), -1.0, 1.0)
        obs, state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, env_params)
        return {"obs": obs, "reward": reward, "done": done, "info": info}

    return train


if __name__ == "__main__":
    config = {"NUM_ENVS": 2048, "NUM_STEPS": 10, "TOTAL_TIMESTEPS": 5e7, "ENV_NAME": "hopper",
              "NORMALIZE_ENV": True}
'''


def test_purejaxrl_continuous_runs_unedited_on_a_gymnax_task(fake_purejaxrl, tmp_path):
    """ppo_continuous_action.py's Brax task is served by jaxcredit's registry: actions in
    [-1, 1] scaled onto Pendulum's torque bounds ([-2, 2]), the five-value step with an empty
    info (its Brax wrapper's), the task's parameters for params None; other names still go to
    its own Brax wrapper. The continuous race's settings map onto the engine."""
    root, _ = fake_purejaxrl
    folder = tmp_path / "purejaxrl"
    folder.mkdir()
    (folder / "wrappers.py").write_text((root / "purejaxrl" / "wrappers.py").read_text())
    (folder / purejaxrl.CONTINUOUS_FILE).write_text(textwrap.dedent(FAKE_CONTINUOUS))
    ppo, defaults = purejaxrl.load_ppo(folder, purejaxrl.CONTINUOUS_FILE)
    assert defaults["ENV_NAME"] == "hopper"
    out = jax.jit(ppo.make_train(dict(defaults, ENV_NAME="Pendulum-v1", NUM_ENVS=3)))(
        jax.random.PRNGKey(0))
    assert out["obs"].shape == (3, 3) and set(out["info"]) == {"returned_episode"}
    # The same reset keys and a torque of 2 (full push) on gymnax's Pendulum itself.
    env, params = gymnax.make("Pendulum-v1")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    expected = jax.vmap(env.step, in_axes=(0, 0, None, None))(keys, state, np.array([2.0]),
                                                               params)[2]
    np.testing.assert_allclose(out["reward"], expected, rtol=1e-6)
    if "brax" in purejaxrl.missing_packages():  # not in the registry: PureJaxRL's own wrapper
        with pytest.raises(ImportError, match="brax"):
            ppo.make_train(dict(defaults))
    with pytest.raises(ValueError, match="actions are not continuous"):
        purejaxrl.continuous_task("CartPole-v1")
    fields, hparams = bench_races.continuous_fields(dict(
        defaults, ENV_NAME="Pendulum-v1", NUM_ENVS=64, TOTAL_TIMESTEPS=1e5, UPDATE_EPOCHS=4,
        NUM_MINIBATCHES=32, ACTIVATION="tanh", ANNEAL_LR=False, LR=3e-4, GAMMA=0.99,
        GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.0, VF_COEF=0.5, MAX_GRAD_NORM=0.5))
    from jaxcredit import agents

    config = baseline.make_config(agents, **fields)
    assert (config.num_updates, config.action_dist, config.normalize_env) == (156, "gaussian",
                                                                              True)
    assert hparams["ent_coef"] == 0.0 and not config.anneal_lr
    # Final returns: the episodes that ended in the last tenth, or else in the last update with any.
    assert bench_races.late_return(np.array([1.0, np.nan, 3.0, 5.0]), np.array([1, 0, 2, 0])) == 3
    assert np.isnan(bench_races.late_return(np.zeros((4, 2)), np.zeros((4, 2), bool)))


def _commit_all(root):
    """``git init`` in ``root`` and commit everything there (the test skips without git)."""
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    try:
        for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "fake"]):
            subprocess.run([*git, *cmd], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")


PQN_CARTPOLE = {"TOTAL_TIMESTEPS": 5e5, "TOTAL_TIMESTEPS_DECAY": 5e5, "NUM_ENVS": 32,
                "NUM_STEPS": 64, "EPS_START": 1.0, "EPS_FINISH": 0.2, "EPS_DECAY": 0.2,
                "NUM_MINIBATCHES": 16, "NUM_EPOCHS": 4, "NORM_INPUT": False,
                "HIDDEN_SIZE": 256, "NUM_LAYERS": 2, "NORM_TYPE": "layer_norm", "LR": 1e-4,
                "MAX_GRAD_NORM": 10, "LR_LINEAR_DECAY": True, "REW_SCALE": 0.1,
                "GAMMA": 0.99, "LAMBDA": 0.95, "ENV_NAME": "CartPole-v1"}


def test_pqn_race_maps_purejaxql_settings_to_the_engine():
    """purejaxql's pqn_cartpole.yaml: 32 envs × 64 steps, 16 minibatches × 4 epochs, two
    LayerNorm ReLU layers of 256, rewards × 0.1, ε 1 → 0.2 over 20 % of the decay horizon, RAdam
    at 1e-4 decayed linearly, clip 10; the engine's PQN takes each as it is."""
    from jaxcredit.agents import TrainConfig
    from jaxcredit.bench.races import pqn_fields

    fields, hparams = pqn_fields(PQN_CARTPOLE)
    assert fields == dict(algo="pqn", env="CartPole-v1", num_envs=32, num_steps=64,
                          total_timesteps=500_000, num_minibatches=16, update_epochs=4,
                          hidden_sizes=(256, 256), activation="relu", layer_norm=True,
                          reward_scale=0.1, anneal_lr=True, eval_every=0)
    assert hparams == dict(lr=1e-4, gamma=0.99, lambda_=0.95, max_grad_norm=10.0,
                           epsilon_start=1.0, epsilon_end=0.2, epsilon_fraction=0.2)
    assert TrainConfig.from_flat(**fields).num_updates == 244  # purejaxql: 5e5 // 64 // 32
    # ε decays over the decay horizon's share even when the run is shorter.
    assert pqn_fields(dict(PQN_CARTPOLE, TOTAL_TIMESTEPS=2.5e5))[1]["epsilon_fraction"] == 0.4
    with pytest.raises(ValueError, match="LayerNorm only"):
        pqn_fields(dict(PQN_CARTPOLE, NORM_TYPE="batch_norm"))


# A pqn_gymnax.py look-alike, as purejaxql's: hydra's decorator on main, omegaconf, wandb and
# safetensors imported at the top, gymnax's LogWrapper with the old five-value step, jax.tree_map.
FAKE_PQN = '''
import jax
import jax.numpy as jnp
import hydra
from omegaconf import OmegaConf
import wandb
from safetensors.flax import load_file, save_file
from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper
import gymnax


def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    env = LogWrapper(FlattenObservationWrapper(env))

    def train(rng):
        obs, state = env.reset(rng, env_params)

        def step(state, key):
            obs, state, reward, done, info = env.step(key, state, 0, env_params)
            return state, reward

        _, rewards = jax.lax.scan(step, state, jax.random.split(rng, 4))
        return jax.tree_map(jnp.sum, {"rewards": rewards})

    return train


@hydra.main(version_base=None, config_path="./config", config_name="config")
def main(config):
    return OmegaConf.to_container(config)
'''


def test_purejaxql_pqn_loads_unedited_through_the_bridge(tmp_path):
    """pqn_gymnax.py exported from a git directory and imported as it is: hydra's decorator,
    the missing packages and the five-value step are bridged, its train runs, and the settings
    come from config/alg/pqn_cartpole.yaml."""
    import yaml

    root = tmp_path / "purejaxql"
    (root / "purejaxql" / "config" / "alg").mkdir(parents=True)
    (root / "purejaxql" / "pqn_gymnax.py").write_text(FAKE_PQN)
    (root / "purejaxql" / "config" / "alg" / "pqn_cartpole.yaml").write_text(
        yaml.safe_dump(PQN_CARTPOLE))
    _commit_all(root)
    (tmp_path / "export").mkdir()
    pqn, defaults, label = purejaxrl.load_pqn(str(root / ".git"), tmp_path / "export")
    assert defaults["HIDDEN_SIZE"] == 256 and label.startswith("purejaxql ")
    out = pqn.make_train(dict(defaults, TOTAL_TIMESTEPS=2048))(jax.random.PRNGKey(0))
    assert float(out["rewards"]) == 4.0  # CartPole pays 1 a step
    # The decorator's stand-in is gone once loaded (a real hydra, if installed, stays).
    assert "hydra" not in sys.modules or sys.modules["hydra"].__spec__ is not None
    with pytest.raises(ValueError, match="cannot read purejaxql/pqn_gymnax.py"):
        purejaxrl.load_pqn(str(tmp_path / "nowhere"), tmp_path / "export")

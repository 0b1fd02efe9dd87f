"""Long-horizon agent credit: CommandChain, group baselines (GRPO, Dr. GRPO, RLOO), the belief
credit, hindsight from a known answer, group rollouts and the step-label scores."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.credit.scores import episode_returns, step_label_scores
from jaxcredit.envs import make as make_env
from jaxcredit.envs.command_chain import CommandChain, random_success_rate
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.belief import belief_update, first_uses, posterior_means
from jaxcredit.estimators.group import (episode_outcome, first_episode_mask,
                                        group_relative_advantages, leave_one_out_advantages)
from jaxcredit.types import Trajectory


# -- group baselines: hand cases --------------------------------------------------------------

# Two groups of K = 4: [1, 0, 0, 0] and [1, 1, 1, 0], then an all-fail and an all-pass group.
OUTCOMES = jnp.array([1., 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1])


def test_grpo_with_population_std_hand_case():
    a = group_relative_advantages(OUTCOMES, 4, std_normalize=True, ddof=0)
    r3 = np.sqrt(3.0)
    np.testing.assert_allclose(a[:8], [r3, -1 / r3, -1 / r3, -1 / r3,
                                       1 / r3, 1 / r3, 1 / r3, -r3], rtol=1e-5)
    np.testing.assert_array_equal(a[8:], 0.0)  # all fail, all pass: no signal, no NaN


def test_grpo_with_bessel_std_hand_case():
    a = group_relative_advantages(OUTCOMES, 4, std_normalize=True, ddof=1)
    np.testing.assert_allclose(a[:8], [1.5, -.5, -.5, -.5, .5, .5, .5, -1.5], rtol=1e-5)
    np.testing.assert_array_equal(a[8:], 0.0)


def test_dr_grpo_hand_case():
    a = group_relative_advantages(OUTCOMES, 4, std_normalize=False)
    np.testing.assert_allclose(a, [.75, -.25, -.25, -.25, .25, .25, .25, -.75] + [0.0] * 8,
                               atol=1e-6)


def test_rloo_hand_case():
    a = leave_one_out_advantages(OUTCOMES, 4)
    np.testing.assert_allclose(a, [1, -1 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, 1 / 3, -1]
                               + [0.0] * 8, atol=1e-6)


def test_rloo_is_dr_grpo_times_k_over_k_minus_1():
    outcome = jax.random.bernoulli(jax.random.key(0), 0.3, (48,)).astype(jnp.float32)
    np.testing.assert_allclose(leave_one_out_advantages(outcome, 6),
                               6 / 5 * group_relative_advantages(outcome, 6, False), atol=1e-6)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_estimators_need_a_group(name):
    with pytest.raises(ValueError, match="group_size >= 2"):
        make_estimator(name, group_size=1)
    with pytest.raises(ValueError, match="group_size"):
        make_estimator(name)


def test_first_episode_and_outcome_hand_case():
    done = jnp.array([[0, 0], [1, 0], [0, 0], [0, 1]], bool)
    reward = jnp.array([[0., 0], [1, 0], [5, 0], [0, 2]])
    np.testing.assert_array_equal(first_episode_mask(done),
                                  [[1, 1], [1, 1], [0, 1], [0, 1]])
    np.testing.assert_array_equal(episode_outcome(reward, done), [1.0, 2.0])
    np.testing.assert_array_equal(episode_returns(reward, done),
                                  [[1, 2], [1, 2], [5, 2], [5, 2]])


def _trajectory(action, reward, extras=None):
    T, N = action.shape
    zeros = jnp.zeros((T, N))
    done = jnp.zeros((T, N), bool).at[-1].set(True)
    return Trajectory(obs=zeros[..., None], action=action, reward=reward, terminated=done,
                      truncated=jnp.zeros_like(done), value=zeros, next_value=zeros,
                      log_prob=zeros, logits=jnp.zeros((T, N, 6)), extras=extras)


def test_group_credit_is_the_same_at_every_step_of_an_episode():
    reward = jnp.zeros((3, 4)).at[-1].set(jnp.array([1., 0, 1, 1]))
    traj = _trajectory(jnp.zeros((3, 4), jnp.int32), reward)
    credit = make_estimator("rloo", group_size=2).assign({}, traj, Hparams.create(), None)
    np.testing.assert_allclose(credit.advantage, np.tile([1., -1, 0, 0], (3, 1)))


# -- CommandChain ------------------------------------------------------------------------------

def _play(env, actions, instance=0):
    params = env.default_params
    _, state = env.reset_to_instance(jax.random.key(0), params, jnp.int32(instance))
    labels, agrees, rewards, dones = [], [], [], []
    for a in actions:
        extras = env.step_extras(state, jnp.int32(a), params)
        labels.append(int(extras["label"]))
        agrees.append(bool(extras["agrees"]))
        _, state, r, term, trunc, _ = env.step(jax.random.key(1), state, jnp.int32(a), params)
        rewards.append(float(r))
        dones.append(bool(term or trunc))
    return labels, agrees, rewards, dones


def test_command_chain_labels_and_known_answer_checks_hand_case():
    env = CommandChain(num_commands=6, solution_length=2, num_fatal=1, horizon=5, ordered=True,
                       num_instances=1)
    first, second = (int(c) for c in env.solutions[0])
    fatal = int(np.flatnonzero(env.fatal[0])[0])
    other = next(c for c in range(6) if c not in (first, second, fatal))
    # second before first is out of order: irrelevant, and not what the answer calls for next.
    labels, agrees, rewards, dones = _play(env, [second, first, fatal, second, other])
    assert labels == [0, 1, 2, 3, 3]  # irrelevant, necessary, fatal, after-fatal, after-fatal
    assert agrees == [False, True, False, True, False]  # the checker cannot see the fatal step
    assert rewards == [0, 0, 0, 0, 0] and dones == [False] * 4 + [True]
    _, _, rewards, _ = _play(env, [other, first, other, second, other])
    assert rewards == [0, 0, 0, 0, 1.0]


def test_command_chain_unordered_accepts_any_order():
    env = CommandChain(num_commands=6, solution_length=2, num_fatal=1, horizon=3, ordered=False,
                       num_instances=1)
    first, second = (int(c) for c in env.solutions[0])
    labels, agrees, rewards, _ = _play(env, [second, second, first])
    assert labels == [1, 0, 1] and agrees == [True, False, True] and rewards[-1] == 1.0


def test_random_success_rate_matches_simulation():
    """Exact DP against 20,000 simulated episodes of the uniform policy."""
    for ordered in (False, True):
        env = CommandChain(num_commands=5, solution_length=2, num_fatal=1, horizon=8,
                           ordered=ordered, num_instances=4)
        params = env.default_params

        def episode(key):
            reset_key, act_key = jax.random.split(key)
            _, state = env.reset(reset_key, params)
            actions = jax.random.randint(act_key, (8,), 0, 5)

            def step(state, a):
                _, state, r, *_ = env.step_env(key, state, a, params)
                return state, r
            return jax.lax.scan(step, state, actions)[1].sum()

        passed = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(3), 20_000))
        exact = random_success_rate(5, 2, 1, 8, ordered)
        se = np.sqrt(exact * (1 - exact) / 20_000)
        assert abs(float(passed.mean()) - exact) < 4 * se, (ordered, float(passed.mean()), exact)


def test_command_chain_rejects_impossible_structures():
    with pytest.raises(ValueError, match="shorter than the solution"):
        make_env("CommandChain", horizon=3, solution_length=4)
    with pytest.raises(ValueError, match="num_fatal"):
        make_env("CommandChain", num_commands=4, solution_length=3, num_fatal=2)


# -- belief credit and hindsight from the known answer ---------------------------------------

def test_belief_update_hand_case():
    """Outcomes 1, 0, 1 of three episodes of instance 0 that all issued command 2 (command 1
    only in the failed one): E[p_{0,2}] = (2 + 1)/(3 + 2) = 3/5, E[p_{0,1}] = 1/3, and the
    instance mean is 3/5 too; instance 1 keeps its prior."""
    counts = {"alpha_qa": jnp.zeros((2, 3)), "beta_qa": jnp.zeros((2, 3)),
              "alpha_v": jnp.zeros((2,)), "beta_v": jnp.zeros((2,))}
    used = jnp.array([[0, 0, 1], [0, 1, 1], [0, 0, 1]], bool)
    counts = belief_update(counts, jnp.array([0, 0, 0]), used, jnp.array([1., 0, 1]), decay=1.0)
    q, v = posterior_means(counts, prior=1.0)
    np.testing.assert_allclose(q[0], [0.5, 1 / 3, 3 / 5], rtol=1e-6)
    np.testing.assert_allclose(v, [3 / 5, 0.5], rtol=1e-6)
    # Forgetting: η = 0.5 halves the old counts before adding a pass of instance 0.
    counts = belief_update(counts, jnp.array([0]), jnp.array([[1, 0, 0]], bool),
                           jnp.array([1.0]), decay=0.5)
    np.testing.assert_allclose(counts["alpha_v"], [2.0, 0.0])
    np.testing.assert_allclose(counts["beta_v"], [0.5, 0.0])
    np.testing.assert_allclose(counts["alpha_qa"][0], [1.0, 0.0, 1.0])


def test_belief_credit_uses_the_belief_before_the_window():
    env = CommandChain(num_commands=3, solution_length=1, num_fatal=1, horizon=2,
                       num_instances=1)
    est = make_estimator("belief", env=env, prior=1.0, decay=1.0)
    action = jnp.array([[0, 1], [2, 2]], jnp.int32)
    reward = jnp.array([[0., 0], [1, 0]])
    traj = _trajectory(action, reward, {"instance": jnp.zeros((2, 2), jnp.int32)})
    params = est.init(None, traj)
    credit = est.assign(params, traj, Hparams.create(), None)
    np.testing.assert_array_equal(credit.advantage, 0.0)  # the prior: no belief yet
    params = est.update(params, traj, Hparams.create())
    credit = est.assign(params, traj, Hparams.create(), None)
    # q = [2/3, 1/3, 1/2] (command 2 in both episodes), v = 1/2.
    np.testing.assert_allclose(credit.advantage, [[1 / 6, -1 / 6], [0, 0]], atol=1e-6)


def test_only_the_first_issue_of_a_command_is_credited():
    action = jnp.array([[2, 0], [1, 0], [2, 1], [1, 1]])
    np.testing.assert_array_equal(first_uses(action, 3),
                                  [[1, 1], [1, 0], [0, 1], [0, 0]])


def test_known_answer_bonus_on_agreeing_steps_of_failed_episodes():
    # Group of two: episode 0 passed, episode 1 failed; steps 0 and 1 of episode 1 agree.
    reward = jnp.array([[0., 0], [0, 0], [1, 0]])
    agrees = jnp.array([[1, 1], [0, 1], [1, 0]], bool)
    traj = _trajectory(jnp.zeros((3, 2), jnp.int32), reward, {"agrees": agrees})
    credit = make_estimator("known_answer", group_size=2, bonus=0.5).assign(
        {}, traj, Hparams.create(), None)
    # RLOO: +1 for the pass, −1 for the failure; +0.5 on the failed episode's agreeing steps.
    np.testing.assert_allclose(credit.advantage, [[1, -0.5], [1, -0.5], [1, -1]])


def test_step_label_scores_hand_case():
    label = jnp.array([[1, 1], [2, 0], [3, 1]])
    reward = jnp.array([[0., 0], [0, 0], [0, 1]])
    advantage = jnp.array([[0.5, -1.0], [-2.0, 0.0], [0.5, 1.0]])
    traj = _trajectory(jnp.zeros((3, 2), jnp.int32), reward, {"label": label})
    scores = {k: float(v) for k, v in step_label_scores(traj, advantage, True).items()}
    assert scores["sign_necessary"] == pytest.approx(2 / 3)  # 0.5 yes, -1.0 no, 1.0 yes
    assert scores["sign_fatal"] == 1.0
    assert scores["failed_sign_necessary"] == 1.0  # column 0 failed: its necessary step has +0.5
    assert scores["failed_share"] == pytest.approx(3.0 / 5.0)
    assert scores["after_fatal_share"] == pytest.approx(0.5 / 5.0)


# -- the engine: group rollouts ---------------------------------------------------------------

def _config(**kw):
    base = dict(algo="ppo", env="CommandChain", estimator="rloo", group_size=4, num_envs=8,
                num_steps=50, total_timesteps=8 * 50 * 2, critic=False, eval_every=0,
                env_options=(("num_instances", 1000),))
    return TrainConfig.from_flat(**{**base, **kw})


def test_group_rollouts_share_the_instance_and_nothing_else():
    engine = make_engine(_config())
    state = engine.init(jax.random.key(0))
    collect = jax.jit(engine.collect)
    for i in range(3):
        window = collect(state, Hparams.create(), jax.random.key(i))
        instance = np.asarray(window.trajectory.extras["instance"])
        assert (instance == instance[0]).all()  # one instance per episode
        groups = instance[0].reshape(2, 4)
        assert (groups == groups[:, :1]).all()  # shared within a group
        assert groups[0, 0] != groups[1, 0]  # independent across groups (1000 instances)
        actions = np.asarray(window.trajectory.action).T.reshape(2, 4, -1)
        for g in range(2):  # members act independently
            assert len({tuple(a) for a in actions[g]}) == 4
        assert np.asarray(window.trajectory.terminated)[-1].all()  # one whole episode


def test_episodic_credit_config_errors():
    with pytest.raises(ValueError, match="--num-steps 50"):
        make_engine(_config(num_steps=25, total_timesteps=8 * 25 * 2))
    with pytest.raises(ValueError, match="group_size >= 2"):
        make_engine(_config(group_size=1))
    with pytest.raises(ValueError, match="does not divide"):
        make_engine(_config(group_size=3))
    with pytest.raises(ValueError, match="group_size must be 1"):
        TrainConfig(algo="dqn", estimator="q_learning", env="CommandChain", group_size=4,
                    num_envs=8, num_steps=1, total_timesteps=1000).resolved()
    with pytest.raises(ValueError, match="task instances to share"):
        make_engine(_config(env="CartPole-v1", estimator="gae", num_steps=500,
                            total_timesteps=8 * 500, env_options=()))


def test_group_estimators_run_through_jaxcredit_train(tmp_path, capsys):
    from jaxcredit import cli

    out = tmp_path / "grpo"
    code = cli.main(["train", "--env", "CommandChain", "--env-option", "horizon=10",
                     "--estimator", "grpo", "--critic", "False", "--group-size", "4",
                     "--num-envs", "8", "--num-steps", "10", "--total-timesteps", "240",
                     "--eval-every", "0", "--out", str(out)])
    assert code in (0, None), capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["group_size"] == 4 and config["estimator"]["name"] == "grpo"
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert "credit/sign_necessary" in header and "credit/equal_groups" in header

"""Evaluation and ground truth inside the run: episodes of the current policy, exact J(π) and task
metrics, evaluation that never changes training, and oracle models equal to the DP ones."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import bitwise_jit

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.exact import ground_truth as gt
from jaxcredit.agents.evaluation import play_episodes
from jaxcredit.agents.rollout import memoryless
from jaxcredit.envs import make as make_env
from jaxcredit.exact import hindsight
from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import make_estimator
from jaxcredit.networks import ActorCritic

KEY = jax.random.key(0)


def test_play_episodes_counts_each_episode_once_up_to_its_end():
    """DelayedEffect (n = 3) lasts exactly 4 steps; with σ = 0 the return is +1 if the first
    action is 0, −1 otherwise. A policy that always picks action 0 returns +1, sampled or greedy,
    although the scan runs 10 steps (the auto-reset episodes after the first are not counted)."""
    env, params = make_env("DelayedEffect", n=3, sigma=0.0)
    always_zero = lambda obs: jnp.tile(jnp.array([5.0, -5.0]), (obs.shape[0], 1))  # noqa: E731
    out = play_episodes(env, params, memoryless(always_zero), KEY, num_episodes=8, max_steps=10)
    np.testing.assert_allclose(out["return"], 1.0, atol=1e-3)
    np.testing.assert_allclose(out["return_greedy"], 1.0)
    np.testing.assert_allclose(out["length"], 4.0)
    uniform = lambda obs: jnp.zeros((obs.shape[0], 2))  # noqa: E731
    out = play_episodes(env, params, memoryless(uniform), KEY, num_episodes=4000, max_steps=4)
    assert abs(float(out["return"])) < 0.05  # ± 1 with equal odds


def test_play_episodes_stops_once_every_episode_has_ended():
    """DelayedEffect (n = 3) lasts exactly 4 steps: with room for 1,000, the policy is still
    called only 4 times (the steps after every episode's end would change nothing), and the
    returns are those of the episodes."""
    env, params = make_env("DelayedEffect", n=3, sigma=0.0)
    calls = []

    def always_zero(obs):
        jax.debug.callback(lambda: calls.append(1))
        return jnp.tile(jnp.array([5.0, -5.0]), (obs.shape[0], 1))

    out = jax.jit(lambda key: play_episodes(env, params, memoryless(always_zero), key,
                                            num_episodes=8, max_steps=1000))(KEY)
    jax.block_until_ready(out)
    assert len(calls) == 4
    np.testing.assert_allclose(out["return_greedy"], 1.0)
    np.testing.assert_allclose(out["length"], 4.0)


def _scan_to_max_steps(env, params, policy, key, num_episodes, max_steps, success, memory):
    """The reference: every one of ``max_steps`` steps with the same keys as ``play_episodes``,
    each sum masked by the episode being alive (what evaluation computed before it stopped
    early)."""
    from jaxcredit.policies import ActionDistribution

    total = 2 * num_episodes
    greedy = jnp.arange(total) >= num_episodes
    reset_key, run_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, total),
                                                         params)

    def step(carry, step_key):
        obs, state, alive, ret, length, reached, memory, first = carry
        act_key, env_key = jax.random.split(step_key)
        memory, logits = policy(memory, obs, first)
        law = ActionDistribution("categorical", logits.shape[-1])
        action = jnp.where(greedy, law.mode(logits), law.sample(act_key, logits))
        next_obs, state, reward, terminated, truncated, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None))(jax.random.split(env_key, total), state, action,
                                               params)
        ret = ret + jnp.where(alive, reward, 0.0)
        length = length + alive
        reached = reached | (alive & success(obs, info["final_observation"], reward))
        alive = alive & ~(terminated | truncated)
        return (next_obs, state, alive, ret, length, reached, memory,
                terminated | truncated), None

    ones, zeros = jnp.ones((total,), bool), jnp.zeros((total,))
    init = (obs, state, ones, zeros, zeros.astype(jnp.int32), ~ones, memory, ones)
    (_, _, _, ret, length, reached, _, _), _ = jax.lax.scan(
        step, init, jax.random.split(run_key, max_steps))
    sampled = ~greedy
    return {"return": jnp.sum(jnp.where(sampled, ret, 0.0)) / num_episodes,
            "return_greedy": jnp.sum(jnp.where(greedy, ret, 0.0)) / num_episodes,
            "length": jnp.sum(jnp.where(sampled, length, 0)) / num_episodes,
            "success_rate": jnp.sum(sampled & reached) / num_episodes,
            "success_rate_greedy": jnp.sum(greedy & reached) / num_episodes}


def test_play_episodes_gives_the_numbers_of_a_scan_to_max_steps():
    """CartPole episodes of different lengths (a noisy policy), a policy with memory (a count
    of the episode's steps, reset at its start, that tilts the logits) and a success flag: the
    early-stopping loop gives the numbers of the scan over every step, and it stops at the
    longest episode, after the shortest."""
    env, params = make_env("CartPole-v1")
    calls = []

    def policy(count, obs, first):
        jax.debug.callback(lambda: calls.append(1))
        count = jnp.where(first, 0, count) + 1
        tilt = jnp.sin(0.7 * count)[:, None] * jnp.array([1.0, -1.0])
        return count, 3.0 * obs[:, 2:3] * jnp.array([-1.0, 1.0]) + tilt

    success = lambda obs, next_obs, reward: next_obs[:, 0] > 0.05  # noqa: E731
    memory = jnp.zeros((2 * 6,), jnp.int32)
    got = jax.jit(lambda key: play_episodes(env, params, policy, key, 6, 300, success,
                                            memory))(KEY)
    got = jax.device_get(got)
    loop_steps = len(calls)
    want = jax.jit(lambda key: _scan_to_max_steps(env, params, policy, key, 6, 300, success,
                                                  memory))(KEY)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)
    assert got["length"] < loop_steps < 300  # longer than the mean episode, shorter than 300
    assert 0 < got["success_rate"] < 1


CONFIG = TrainConfig.from_flat(algo="a2c", estimator="hca_return", env="DelayedEffect",
                               env_options=(("n", 3),), num_envs=8, num_steps=4,
                               total_timesteps=8 * 4 * 6, hidden_sizes=(16,), eval_every=3,
                               eval_episodes=4)


@pytest.fixture(scope="module")
def evaluated_run():
    """CONFIG's run with its evaluations: (engine, final state, metrics). The last update ends a
    block, so its evaluation metrics are those of the final state."""
    engine = make_engine(CONFIG)
    state, metrics = bitwise_jit(engine.train)(KEY, Hparams.create(gamma=1.0))
    return engine, state, metrics


def test_evaluation_metrics_sit_at_block_ends_and_do_not_change_training(evaluated_run):
    hparams = Hparams.create(gamma=1.0)
    _, state_a, metrics_a = evaluated_run
    without = make_engine(CONFIG.replace(eval_every=0))
    state_b, metrics_b = bitwise_jit(without.train)(KEY, hparams)
    chex.assert_trees_all_equal(state_a.agent.params, state_b.agent.params)
    for name, values in metrics_b.items():
        np.testing.assert_array_equal(metrics_a[name], values, err_msg=name)
    evaluated = {k for k in metrics_a if k.startswith("eval/")} | {"estimator/kl_to_exact"}
    assert {"eval/return", "eval/return_greedy", "eval/length", "eval/exact_return",
            "eval/p_optimal_first_action"} <= evaluated
    for name in evaluated:
        finite = np.isfinite(np.asarray(metrics_a[name]))
        np.testing.assert_array_equal(finite, [False, False, True, False, False, True], name)
        assert name not in metrics_b


def test_exact_return_and_task_metric_are_those_of_the_policy_network(evaluated_run):
    engine, state, metrics = evaluated_run  # the last evaluation is the final state's
    mdp = engine.env.tabular_mdp(engine.env_params)
    logits = engine.network.apply(state.agent.params, mdp.observation, method=ActorCritic.policy)
    pi = jax.nn.softmax(logits)
    # DelayedEffect: J = P(a0 = 0) · 1 + P(a0 = 1) · (−1) = 2 π(0|s0) − 1.
    np.testing.assert_allclose(metrics["eval/p_optimal_first_action"][-1], pi[0, 0], rtol=1e-6)
    np.testing.assert_allclose(metrics["eval/exact_return"][-1], 2 * pi[0, 0] - 1, atol=1e-5)


def test_state_oracle_credit_equals_credit_from_the_dp_hindsight_table():
    """On Shortcut (unaliased one-hot states) the oracle's credit for a window equals hca_state
    with a tabular model loaded with log h_γ of the current policy's table."""
    config = TrainConfig.from_flat(algo="a2c", estimator="hca_state",
                                   estimator_options=(("model", "oracle"),), env="Shortcut",
                                   num_envs=4, num_steps=8, total_timesteps=32, hidden_sizes=(16,))
    engine = make_engine(config)
    hparams = Hparams.create(gamma=0.9)
    state = jax.jit(engine.init)(KEY)
    window = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    _, credit, _, _ = jax.jit(engine.assign_credit)(state, window.trajectory, hparams,
                                                    jax.random.key(2))
    mdp = engine.env.tabular_mdp(engine.env_params)
    pi = gt.policy_table(engine.policy_logits, state.agent.params, mdp)
    table = jnp.log(jnp.maximum(hindsight.state_hindsight(mdp, pi, 0.9), 1e-30))
    reference = make_estimator("hca_state", model=hm.state_tabular(mdp.num_states))
    traj = window.trajectory.replace(obs=window.trajectory.state)
    expected = reference.assign({"table": table}, traj, hparams, KEY)
    np.testing.assert_allclose(credit.advantage, expected.advantage, rtol=1e-5, atol=1e-5)


def test_return_oracle_matches_the_bandit_closed_form():
    """AmbiguousBandit: the oracle's log h(a | s0, Z) is the Gaussian-mixture posterior."""
    config = TrainConfig(algo="a2c", estimator="hca_return", env="AmbiguousBandit", num_envs=16,
                         num_steps=1, total_timesteps=16)
    engine = make_engine(config)
    hparams = Hparams.create(gamma=1.0)
    state = engine.init(KEY)
    traj = engine.collect(state, hparams, jax.random.key(1)).trajectory
    mdp = engine.env.tabular_mdp(engine.env_params)
    pi = gt.policy_table(engine.policy_logits, state.agent.params, mdp)
    params = gt.exact_model_params("return_hindsight", engine.ground_truth, mdp, pi,
                                   hparams.gamma)
    twin = engine.estimator.oracle()
    log_h, weight = twin.hindsight(params, traj, hparams, KEY)
    expected = hindsight.bandit_return_hindsight(mdp, pi, traj.reward)[..., 0, :]  # s0 = 0
    np.testing.assert_allclose(jnp.exp(log_h), expected, rtol=1e-5)
    np.testing.assert_allclose(weight, 1.0)

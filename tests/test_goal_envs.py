"""Goal-conditioned environments: the protocol's parts agree with the environments' own rewards,
GoalGrid by hand, and success rates in training and evaluation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.envs import make as make_env
from jaxcredit.envs.goal_grid import GoalGridState
from jaxcredit.envs.goals import goal_env, success_fn


@pytest.mark.parametrize("name,options", [("BitFlip", {"n": 4}), ("GoalGrid", {"size": 4}),
                                          ("DelayedReward-BitFlip", {"n": 3})])
def test_compute_reward_and_success_agree_with_the_environment(name, options):
    env, params = make_env(name, **options)
    goals = goal_env(env)
    assert goals is not None and goal_env(make_env("CartPole-v1")[0]) is None
    num_actions = env.action_space(params).n
    key = jax.random.key(0)
    obs, state = env.reset(key, params)
    for t in range(60):
        key, act_key, step_key = jax.random.split(key, 3)
        action = jax.random.randint(act_key, (), 0, num_actions)
        next_obs, state, reward, terminated, truncated, info = env.step(step_key, state, action,
                                                                        params)
        final = info["final_observation"]
        achieved, desired = goals.achieved_goal(final), goals.desired_goal(obs)
        reached = bool(goals.success(achieved, desired))
        assert bool(terminated) == reached
        if not name.startswith("DelayedReward"):
            assert float(goals.compute_reward(achieved, desired)) == float(reward)
        np.testing.assert_array_equal(np.asarray(goals.replace_goal(obs, desired)),
                                      np.asarray(obs))
        obs = next_obs


def test_goal_grid_by_hand():
    env, params = make_env("GoalGrid", size=3)
    assert params.max_steps_in_episode == 6
    state = GoalGridState(position=jnp.array([0, 0]), goal=jnp.array([1, 2]), time=0)
    obs = env.get_obs(state)
    np.testing.assert_allclose(np.asarray(obs), [0, 0, 0.5, 1.0])
    # left at the border stays, then right, up, up reaches the goal (1, 2).
    rewards = []
    for action in (2, 3, 0, 0):
        obs, state, reward, done, _ = env.step_env(jax.random.key(0), state, action, params)
        rewards.append(float(reward))
    assert rewards == [-1.0, -1.0, -1.0, 0.0] and bool(done)
    np.testing.assert_array_equal(np.asarray(state.position), [1, 2])
    # Resets put the goal elsewhere than the start, uniformly over the other cells.
    states = jax.vmap(lambda k: env.reset_env(k, params)[1])(
        jax.random.split(jax.random.key(1), 4000))
    assert not bool(jnp.any(jnp.all(states.position == states.goal, axis=-1)))
    cells = np.asarray(states.goal[:, 0] + 3 * states.goal[:, 1])
    assert np.bincount(cells, minlength=9).min() > 4000 / 9 * 0.8


def test_success_rate_is_reported_in_training_and_evaluation():
    # a2c runs 2 updates; dqn runs 200 (8 gradient steps each, lr 1e-3), enough to solve the
    # 3 x 3 grid. Training longer costs little next to compiling the program.
    runs = {"a2c": (dict(total_timesteps=8 * 6 * 2, eval_every=2, buffer_size=96, batch_size=8),
                    Hparams.create()),
            "dqn": (dict(total_timesteps=8 * 6 * 200, eval_every=200, buffer_size=8 * 6 * 200,
                         batch_size=32, gradient_steps=8, target_update_every=10),
                    Hparams.create(lr=1e-3))}
    for algo, (options, hparams) in runs.items():
        config = TrainConfig.from_flat(algo=algo, env="GoalGrid", env_options=(("size", 3),),
                                       num_envs=8, num_steps=6, eval_episodes=64, learning_starts=0,
                                       **options)
        engine = make_engine(config)
        _, metrics = jax.jit(engine.train)(jax.random.key(0), hparams)
        rate = np.asarray(metrics["success_rate"])
        assert np.all((rate >= 0) & (rate <= 1))
        for name in ("eval/success_rate", "eval/success_rate_greedy"):
            assert 0.0 <= float(metrics[name][-1]) <= 1.0
        if algo == "a2c":
            # A near-uniform policy on a 3 x 3 grid reaches the goal within 6 steps often
            # (an ε-greedy untrained Q-network mostly walks into a wall instead).
            assert 0.2 < float(metrics["eval/success_rate"][-1])
            assert 0.2 < float(np.nanmean(rate))
        else:
            # Every goal is at most 4 moves away, so a trained greedy agent reaches all of them:
            # 1.0 greedy and ε = 0.05 on seeds 0-5, and 0.78-0.84 of its training episodes (ε
            # decaying 1 -> 0.05 over the first half). The same runs with lr 1e-12, an agent that
            # never learns: 0.00-0.19 greedy, 0.03-0.31 at ε = 0.05, 0.08-0.30 in training.
            assert float(metrics["eval/success_rate_greedy"][-1]) > 0.9
            assert float(metrics["eval/success_rate"][-1]) > 0.8
            assert float(np.nanmean(rate)) > 0.6


def test_success_fn_reads_the_goal_of_the_step():
    env, _ = make_env("BitFlip", n=2)
    reached = success_fn(env)
    obs = jnp.array([[0, 0, 1, 0], [0, 0, 1, 0]], jnp.float32)
    next_obs = jnp.array([[1, 0, 0, 1], [0, 1, 0, 1]], jnp.float32)  # next goal is irrelevant
    np.testing.assert_array_equal(np.asarray(reached(obs, next_obs, jnp.zeros(2))), [True, False])


def test_rollout_counts_the_episodes_that_reached_their_goal():
    from jaxcredit.agents.rollout import memoryless, reset_runner, rollout

    env, params = make_env("GoalGrid", size=3)
    runner = reset_runner(env, params, jax.random.key(0), 16)
    _, tr, summary = rollout(env, params, memoryless(lambda obs: jnp.zeros(obs.shape[:-1] + (4,))),
                             runner,
                             jax.random.key(1), 40, None, success_fn(env))
    done = np.asarray(tr.terminated | tr.truncated)
    # On GoalGrid an episode reached its goal iff its last reward is 0.
    reached = done & (np.asarray(tr.reward) == 0.0)
    assert int(summary.count) == done.sum() and int(summary.success_count) == reached.sum()
    assert 0 < reached.sum() < done.sum()

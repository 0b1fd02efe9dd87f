"""T-Maze (jaxcredit.envs.tmaze): episodes walked by hand, passive and active."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs
from jaxcredit.envs.tmaze import TMaze

RIGHT, UP, LEFT, DOWN = 0, 1, 2, 3


def _walk(env, actions, goal):
    """Observations, rewards and dones of one episode with the cue ``goal`` (±1)."""
    params = env.default_params
    key = jax.random.key(0)
    _, state = env.reset_env(key, params)
    state = state.replace(goal=jnp.int32(goal))
    observations, rewards, dones = [np.asarray(env.get_obs(state))], [], []
    for action in actions:
        obs, state, reward, done, _ = env.step_env(key, state, action, params)
        observations.append(np.asarray(obs))
        rewards.append(float(reward))
        dones.append(bool(done))
    return np.array(observations), np.array(rewards), dones


def test_passive_optimal_episode_by_hand():
    env = TMaze(corridor_length=3)
    assert env.episode_length == 4 and env.default_params.penalty == pytest.approx(-1 / 3)
    obs, rewards, dones = _walk(env, [RIGHT, RIGHT, RIGHT, UP], goal=1)
    # The cue (up: 1) on the oracle cell, then corridor, junction, the up arm.
    np.testing.assert_allclose(obs, [[0, 1], [0, 0.5], [0, 0.5], [1, 0.5], [1, 1]])
    np.testing.assert_allclose(rewards, [0, 0, 0, 1])
    assert dones == [False, False, False, True]
    # The wrong arm: no reward; the cue down shows as 0.
    obs, rewards, _ = _walk(env, [RIGHT, RIGHT, RIGHT, UP], goal=-1)
    assert obs[0, 1] == 0.0 and rewards[-1] == 0.0


def test_passive_penalty_and_the_cue_shown_once():
    env = TMaze(corridor_length=3)
    # Pressing against the wall: the agent stays on the oracle cell, behind schedule at every
    # step (x = 0 < t), and the cue is not shown again.
    obs, rewards, dones = _walk(env, [LEFT, LEFT, LEFT, LEFT], goal=1)
    np.testing.assert_allclose(obs[:, 1], [1.0, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(rewards, [-1 / 3, -1 / 3, -1 / 3, 0.0], rtol=1e-6)
    assert dones[-1] and not any(dones[:-1])


def test_active_maze_needs_the_step_back():
    env = TMaze(corridor_length=3, active=1)
    assert env.episode_length == 6
    # Start one cell right of the oracle: nothing shown; step back to see the cue (down: 0).
    obs, rewards, dones = _walk(env, [LEFT, RIGHT, RIGHT, RIGHT, RIGHT, DOWN], goal=-1)
    np.testing.assert_allclose(obs[:, 1], [0.5, 0.0, 0.5, 0.5, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(obs[:, 0], [0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_allclose(rewards, [0, 0, 0, 0, 0, 1])  # never behind: x >= t - 1
    assert dones == [False] * 5 + [True]
    # Walking straight to the junction: ahead of schedule, but blind (no cue seen).
    obs, rewards, _ = _walk(env, [RIGHT, RIGHT, RIGHT, UP, UP, UP], goal=1)
    assert set(obs[:4, 1]) == {0.5}
    np.testing.assert_allclose(rewards, [0, 0, 0, 0, 0, 1])
    # Standing still at the start: the schedule allows the step back (x < t − 1), so the
    # penalty starts at the third step.
    _, rewards, _ = _walk(env, [DOWN] * 6, goal=1)
    np.testing.assert_allclose(rewards, [0, 0, -1 / 3, -1 / 3, -1 / 3, 0], rtol=1e-6)


def test_a_memoryless_walk_is_right_half_of_the_time():
    env, params = envs.make("TMaze", corridor_length=4)
    keys = jax.random.split(jax.random.key(3), 400)

    def episode(key):
        obs, state = env.reset(key, params)
        total = 0.0
        for action in [RIGHT] * 4 + [UP]:
            obs, state, reward, terminated, truncated, _ = env.step(key, state, action, params)
            total += reward
        return total, terminated

    returns, terminated = jax.vmap(episode)(keys)
    assert bool(jnp.all(terminated))
    assert set(np.unique(np.asarray(returns))) == {0.0, 1.0}
    assert abs(float(returns.mean()) - 0.5) < 0.08


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="corridor_length"):
        TMaze(corridor_length=0)
    with pytest.raises(ValueError, match="active"):
        TMaze(active=2)

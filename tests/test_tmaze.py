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


@pytest.mark.parametrize("active", [0, 1])
def test_the_tabular_mdp_is_the_environment_step_for_step(active):
    """Random episodes of the environment: at every step the tabular MDP's next state (of the
    state index) is the index of the environment's next state, its reward the environment's
    reward, its observation the environment's, and a state is terminal exactly at the end."""
    env = TMaze(corridor_length=3, active=active)
    params = env.default_params
    mdp = env.tabular_mdp(params)
    step = jax.jit(env.step_env)
    for seed in range(6):
        key = jax.random.PRNGKey(seed)
        obs, state = env.reset_env(key, params)
        for t in range(env.episode_length):
            key, act_key = jax.random.split(key)
            action = int(jax.random.randint(act_key, (), 0, 4))
            index = int(env.state_index(state))
            np.testing.assert_allclose(mdp.observation[index], obs, atol=1e-6)
            assert not bool(mdp.terminal[index])
            obs, state, reward, done, _ = step(key, state, action, params)
            nxt = int(np.argmax(mdp.transition[index, action]))
            assert nxt == int(env.state_index(state)), (seed, t)
            assert float(mdp.reward[index, action]) == pytest.approx(float(reward), abs=1e-6)
            assert bool(mdp.terminal[nxt]) == bool(done)


def test_exact_returns_of_memoryless_policies():
    """Passive, L = 3 (episodes of 4 steps, penalty −1/3): walking right then turning up at the
    junction is worth exactly 1/2 (the cue's arm half of the time, never behind schedule); the
    uniform policy's exact return equals its Monte-Carlo estimate."""
    from jaxcredit.exact import tabular

    env = TMaze(corridor_length=3)
    params = env.default_params
    mdp = env.tabular_mdp(params)
    obs = np.asarray(mdp.observation)
    at_junction = obs[:, 0] > 0.5
    pi = np.zeros((env.num_states, 4), np.float32)
    pi[:, 0] = ~at_junction  # right in the corridor
    pi[:, 1] = at_junction  # up at the junction (a policy of the observation)
    values = tabular.finite_horizon_values(mdp, jnp.asarray(pi), env.episode_length)
    assert float(mdp.initial @ values) == pytest.approx(0.5, abs=1e-6)
    uniform = tabular.uniform_policy(mdp)
    exact = float(mdp.initial @ tabular.finite_horizon_values(mdp, uniform, env.episode_length))

    def episode(key):
        key, reset_key = jax.random.split(key)
        _, state = env.reset_env(reset_key, params)

        def one(carry, k):
            state, total = carry
            a = jax.random.randint(k, (), 0, 4)
            _, state, r, _, _ = env.step_env(k, state, a, params)
            return (state, total + r), None

        (_, total), _ = jax.lax.scan(one, (state, 0.0), jax.random.split(key, env.episode_length))
        return total

    sampled = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(0), 20_000))
    assert float(sampled.mean()) == pytest.approx(exact, abs=4 * float(sampled.std()) / 141)


def test_ground_truth_only_where_small():
    from jaxcredit.envs.tmaze import MAX_TABULAR_STATES
    from jaxcredit.exact.tabular import has_ground_truth

    assert has_ground_truth(TMaze(13)) and TMaze(13).num_states <= MAX_TABULAR_STATES
    assert has_ground_truth(TMaze(12, active=1))
    assert not has_ground_truth(TMaze(14)) and not has_ground_truth(TMaze(13, active=1))

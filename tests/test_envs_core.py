"""Environments, wrappers and registry: API, vmap over 4096 copies, returns against ground truth.

Each environment is compiled once (one vmapped, scanned rollout) and every check on it is done on
that rollout's outputs in numpy.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs
from jaxcredit.exact import tabular
from jaxcredit.envs.bitflip import BitFlip, goal_reward
from jaxcredit.envs.grid import DelayedGridWorld, GridWorld
from jaxcredit.envs.hca_tasks import AmbiguousBandit, DelayedEffect, Shortcut
from jaxcredit.envs.wrappers import DelayedReward, EpisodeStats, FlattenObservation, TimeLimit

NUM_ENVS = 4096
STAT_KEYS = ("episode_return", "episode_length", "episode_done")


def rollout(env, params, policy, num_envs, num_steps, seed=0, keep_obs=False, extra=()):
    """Vmapped, scanned rollout; ``policy(key, obs, state) -> action`` for one env.

    Returns the first observation and a dict of time-major ``[T, B, ...]`` numpy arrays.
    """

    @jax.jit
    def run(key):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(reset_key, num_envs), params)

        def body(carry, step_key):
            obs, state = carry
            policy_key, env_key = jax.random.split(step_key)
            action = jax.vmap(policy)(jax.random.split(policy_key, num_envs), obs, state)
            nobs, nstate, reward, terminated, truncated, info = jax.vmap(
                env.step, (0, 0, 0, None))(jax.random.split(env_key, num_envs), state, action,
                                           params)
            out = dict(action=action, reward=reward, terminated=terminated, truncated=truncated)
            out.update({k: info[k] for k in STAT_KEYS + tuple(extra) if k in info})
            if keep_obs:
                out.update(obs=obs, final_observation=info["final_observation"])
            if hasattr(env, "state_index"):
                out["index"] = jax.vmap(env.state_index)(state)
            return (nobs, nstate), out

        _, traj = jax.lax.scan(body, (obs, state), jax.random.split(key, num_steps))
        return obs, traj

    obs, traj = run(jax.random.PRNGKey(seed))
    return obs, jax.tree.map(np.asarray, traj)


def first_episode_returns(traj, gamma):
    """Discounted return of each env's first episode (numpy); asserts it ended in the window."""
    done = traj["terminated"] | traj["truncated"]
    assert done.any(axis=0).all(), "rollout window shorter than an episode"
    in_first = np.cumsum(done, axis=0) - done == 0
    t = np.arange(done.shape[0])[:, None]
    return np.sum(np.where(in_first, gamma**t * traj["reward"], 0.0), axis=0)


def tabular_policy(env, pi):
    pi = jnp.asarray(pi)

    def policy(key, obs, state):
        return jax.random.categorical(key, jnp.log(pi[env.state_index(state)]))

    return policy


def random_policy(num_actions):
    return lambda key, obs, state: jax.random.randint(key, (), 0, num_actions)


def assert_mc_close(samples, exact, num_se=4.5, atol=1e-6):
    mean = float(np.mean(samples))
    se = float(np.std(samples) / np.sqrt(samples.size))
    assert abs(mean - float(exact)) <= num_se * se + atol, (mean, float(exact), se)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_registry_names_and_routing():
    names = envs.registered()
    for name in ("Shortcut", "DelayedEffect", "AmbiguousBandit", "KeyToDoor", "TaskInterleaving",
                 "TreeMDP", "DelayedGridWorld-v1", "DelayedGridWorld-v2", "BitFlip",
                 "CartPole-v1", "Catch-bsuite", "Breakout-MinAtar", "UmbrellaChain-bsuite"):
        assert name in names
    env, params = envs.make("DelayedEffect", n=7, sigma=0.5)
    assert isinstance(env, DelayedEffect) and env.n == 7 and params.sigma == 0.5
    assert params.max_steps_in_episode == 8
    env, params = envs.make("CartPole-v1", max_steps_in_episode=20)
    assert params.max_steps_in_episode == 20
    env, params = envs.make("DelayedReward-Catch-bsuite")
    assert isinstance(env, DelayedReward)
    env, params = envs.make("DelayedGridWorld-v2")
    assert isinstance(env, DelayedGridWorld) and env.version == 2
    assert params.max_steps_in_episode == 100
    env, _ = envs.make("BitFlip", n=50)
    assert env.num_actions == 50


def test_every_registered_name_makes_an_env():
    for name in envs.registered():
        if "MNIST" in name:  # needs a dataset download
            continue
        env, params = envs.make(name)
        assert hasattr(env, "step") and hasattr(env, "reset")
        assert hasattr(params, "max_steps_in_episode"), name


def test_registry_errors():
    with pytest.raises(ValueError, match="Did you mean: Shortcut"):
        envs.make("Shortcutt")
    with pytest.raises(ValueError, match="CartPole-v1"):
        envs.make("Cartpole-v1")
    with pytest.raises(ValueError, match="valid keywords"):
        envs.make("AmbiguousBandit", epsilonn=0.2)
    with pytest.raises(ValueError, match="fixed by the name"):
        envs.make("GridWorld-v1", version=2)
    with pytest.raises(ValueError, match="n >= 1"):
        envs.make("DelayedEffect", n=0)


# --------------------------------------------------------------------------------------------
# Environments: one compiled rollout each
# --------------------------------------------------------------------------------------------


def check_api(env, params, obs0, traj, obs_shape):
    assert obs0.shape == (NUM_ENVS, *obs_shape) and obs0.dtype == jnp.float32
    assert traj["reward"].dtype == np.float32
    assert traj["terminated"].dtype == np.bool_ and traj["truncated"].dtype == np.bool_
    # jaxcredit envs never report both flags.
    assert not (traj["terminated"] & traj["truncated"]).any()
    np.testing.assert_array_equal(traj["episode_done"], traj["terminated"] | traj["truncated"])


def check_tabular_observations(env, params, traj, time_feature=False):
    mdp = env.tabular_mdp(params)
    expected = np.asarray(mdp.observation)[traj["index"]]
    obs = traj["obs"][..., :-1] if time_feature else traj["obs"]
    expected = expected[..., :-1] if time_feature else expected
    np.testing.assert_array_equal(obs, expected)


@pytest.fixture(scope="module")
def theta_key():
    return jax.random.PRNGKey(42)


def test_shortcut(theta_key):
    env = Shortcut(n=5)
    params = env.default_params
    mdp = env.tabular_mdp(params)
    pi = tabular.softmax_policy(jax.random.normal(theta_key, (5, 2)))
    wrapped = EpisodeStats(env)
    obs0, traj = rollout(wrapped, params, tabular_policy(wrapped, pi), NUM_ENVS, 12, keep_obs=True)
    check_api(env, params, obs0, traj, (5,))
    check_tabular_observations(env, params, traj)
    assert not traj["truncated"].any()
    lengths = traj["episode_length"][traj["episode_done"]]
    assert lengths.min() == 1 and lengths.max() <= 4
    # Shortcut pays 0; long pays -1 unless it reaches the goal.
    first = traj["action"][0]
    np.testing.assert_array_equal(traj["reward"][0][first == 0], 0.0)
    for gamma in (1.0, 0.9):
        exact = mdp.initial @ tabular.state_values(mdp, pi, gamma)
        assert_mc_close(first_episode_returns(traj, gamma), exact)
    # Optimal (always shortcut) and uniform-random returns.
    v_opt = tabular.finite_horizon_optimal_values(mdp, params.max_steps_in_episode)
    assert float(v_opt[0]) == 0.0
    v_rand = tabular.state_values(mdp, tabular.uniform_policy(mdp), 1.0)
    # Uniform: V(3) = .5*0 + .5*0 = 0, V(2) = .5*(.9*(-1+0)) = -.45, V(1) = .5*.9*(-1-.45),
    # V(0) = .5*.9*(-1 + V(1)).
    v3, v2 = 0.0, 0.5 * 0.9 * (-1.0 + 0.0)
    v1 = 0.5 * 0.9 * (-1.0 + v2)
    v0 = 0.5 * 0.9 * (-1.0 + v1)
    np.testing.assert_allclose(np.asarray(v_rand[:4]), [v0, v1, v2, v3], atol=1e-6)


def test_delayed_effect_long_chain(theta_key):
    n = 100
    env, params = envs.make("DelayedEffect", n=n, sigma=1.0)
    mdp = env.tabular_mdp(params)
    pi = tabular.softmax_policy(jax.random.normal(theta_key, (mdp.num_states, 2)))
    wrapped = EpisodeStats(env)
    obs0, traj = rollout(wrapped, params, tabular_policy(wrapped, pi), NUM_ENVS, n + 1,
                         keep_obs=True)
    check_api(env, params, obs0, traj, (4,))
    # Every episode lasts exactly n + 1 steps and terminates.
    assert traj["terminated"][-1].all() and not traj["terminated"][:-1].any()
    assert not traj["truncated"].any()
    np.testing.assert_array_equal(traj["episode_length"][-1], n + 1)
    # Aliasing: every middle step shows the same observation.
    np.testing.assert_array_equal(traj["obs"][1:], np.broadcast_to([0, 1, 0, 0], (n, NUM_ENVS, 4)))
    final = traj["final_observation"][-1]
    np.testing.assert_array_equal(np.argmax(final, -1), 2 + traj["action"][0])
    check_tabular_observations(env, params, traj)
    # Noise: middle rewards N(0, 1); last reward +-1 + N(0, 1).
    middle = traj["reward"][1:-1]
    assert abs(middle.mean()) < 0.01 and abs(middle.std() - 1.0) < 0.01
    for gamma in (1.0, 0.97):
        exact = mdp.initial @ tabular.state_values(mdp, pi, gamma)
        assert_mc_close(first_episode_returns(traj, gamma), exact)


def test_ambiguous_bandit(theta_key):
    env = AmbiguousBandit()
    params = env.default_params
    mdp = env.tabular_mdp(params)
    obs0, traj = rollout(EpisodeStats(env), params, random_policy(2), NUM_ENVS, 8, keep_obs=True)
    check_api(env, params, obs0, traj, (3,))
    check_tabular_observations(env, params, traj)
    assert traj["terminated"].all() and not traj["truncated"].any()
    outcome = np.argmax(traj["final_observation"], -1) - 1  # 0 HI, 1 LO
    crossed = outcome != traj["action"]
    assert abs(crossed.mean() - 0.1) < 0.006
    reward = traj["reward"]
    assert abs(reward[outcome == 0].mean() - 2.0) < 0.03
    assert abs(reward[outcome == 1].mean() - 1.0) < 0.03
    assert abs(reward[outcome == 0].std() - 1.5) < 0.03
    assert_mc_close(reward[traj["action"] == 0], 1.9)
    assert_mc_close(reward[traj["action"] == 1], 1.1)
    # Against the tabular ground truth (the rollout's policy is uniform).
    uniform = tabular.uniform_policy(mdp)
    q0 = mdp.initial @ tabular.action_values(mdp, uniform, 1.0)
    np.testing.assert_allclose(np.asarray(q0), [1.9, 1.1], atol=1e-6)
    exact = mdp.initial @ tabular.state_values(mdp, uniform, 1.0)
    assert_mc_close(first_episode_returns(traj, 1.0), exact)


@pytest.mark.parametrize("version", [1, 2])
def test_gridworld(version, theta_key):
    env = GridWorld(version=version)
    params = env.default_params
    horizon = params.max_steps_in_episode
    mdp = env.tabular_mdp(params)
    pi = tabular.softmax_policy(jax.random.normal(theta_key, (mdp.num_states, 4)))
    wrapped = EpisodeStats(env)
    obs0, traj = rollout(wrapped, params, tabular_policy(wrapped, pi), NUM_ENVS, horizon,
                         keep_obs=version == 1)
    obs_size = 2 * env.num_cells + 1
    check_api(env, params, obs0, traj, (obs_size,))
    if version == 1:
        check_tabular_observations(env, params, traj, time_feature=True)
        # Time feature: steps since the episode start, over the limit.
        done = traj["episode_done"]
        since_start = np.zeros(NUM_ENVS)
        for t in range(horizon):
            np.testing.assert_allclose(traj["obs"][t, :, -1], since_start / horizon, atol=1e-6)
            since_start = np.where(done[t], 0, since_start + 1)
    # Truncation exactly at the limit, never together with termination.
    lengths = traj["episode_length"]
    assert (lengths[traj["truncated"]] == horizon).all()
    assert (lengths[traj["terminated"]] <= horizon).all()
    assert traj["truncated"].any()
    # Step rewards take only the specified values.
    values = {-1.0, 19.0, -101.0}
    assert set(np.unique(traj["reward"]).tolist()) <= values
    for gamma in (1.0, 0.95):
        exact = mdp.initial @ tabular.finite_horizon_values(mdp, pi, horizon, gamma)
        assert_mc_close(first_episode_returns(traj, gamma), exact)


def test_gridworld_optimal_returns():
    for version, expected in ((1, 8.0), (2, None)):
        env = GridWorld(version=version)
        params = env.default_params
        mdp = env.tabular_mdp(params)
        v_opt = tabular.finite_horizon_optimal_values(mdp, params.max_steps_in_episode)
        start = int(env.state_index(env.reset(jax.random.PRNGKey(0), params)[1]))
        if expected is not None:
            # v1: 4 steps down to the diamond, 8 steps to the goal: -12 + 20.
            assert float(v_opt[start]) == expected
        assert float(v_opt[start]) > -params.max_steps_in_episode


def test_bitflip_random_and_optimal():
    n = 50
    env = BitFlip(n=n)
    params = env.default_params
    obs0, traj = rollout(EpisodeStats(env), params, random_policy(n), NUM_ENVS, n, keep_obs=True,
                         extra=("achieved_goal", "desired_goal", "is_success"))
    check_api(env, params, obs0, traj, (2 * n,))
    # Goals differ from the start; with 50 bits random play never succeeds: all truncated at n.
    assert (obs0[:, :n] != obs0[:, n:]).any(axis=1).all()
    assert traj["truncated"][-1].all() and not traj["terminated"].any()
    np.testing.assert_array_equal(traj["episode_return"][-1], -float(n))
    np.testing.assert_array_equal(traj["achieved_goal"], traj["final_observation"][..., :n])
    np.testing.assert_array_equal(traj["desired_goal"], traj["final_observation"][..., n:])
    np.testing.assert_array_equal(goal_reward(traj["achieved_goal"], traj["desired_goal"]),
                                  traj["reward"])

    def greedy(key, obs, state):
        return jnp.argmax(obs[:n] != obs[n:])

    obs0, traj = rollout(EpisodeStats(env), params, greedy, NUM_ENVS, n)
    distance = np.sum(np.asarray(obs0[:, :n] != obs0[:, n:]), axis=1)
    done = traj["episode_done"]
    first = np.argmax(done, axis=0)
    np.testing.assert_array_equal(first + 1, distance)
    assert traj["terminated"][first, np.arange(NUM_ENVS)].all()
    np.testing.assert_array_equal(traj["episode_return"][first, np.arange(NUM_ENVS)],
                                  -(distance - 1.0))


def bitflip_random_return(n: int) -> Fraction:
    """The exact expected return of the uniform random policy on BitFlip(n), independent of the
    environment's code: the Hamming distance d to the goal is a Markov chain (a random bit flip
    moves it to d − 1 w.p. d/n, else to d + 1), starting from Binomial(n, 1/2) given d ≥ 1
    (g ≠ s₀ uniform); every step that does not reach d = 0 pays −1, reaching it ends the
    episode, and the time limit is n steps."""
    p = {d: Fraction(math.comb(n, d), 2**n - 1) for d in range(1, n + 1)}
    total = Fraction(0)
    for _ in range(n):
        step = {}
        for d, q in p.items():
            if d < n:
                step[d + 1] = step.get(d + 1, 0) + q * Fraction(n - d, n)
            if d > 1:
                step[d - 1] = step.get(d - 1, 0) + q * Fraction(d, n)
        total -= sum(step.values())  # −1 on every step that has not reached the goal
        p = step
    return total


def test_bitflip_exact_random_return_hand_cases():
    # n = 1: d = 1 always, the one flip reaches the goal: return 0.
    assert bitflip_random_return(1) == 0
    # n = 2: d = 1 w.p. 2/3 (then the goal w.p. 1/2, else d = 2 and −1, then d = 1 and −1);
    # d = 2 w.p. 1/3 (d = 1 surely: −1, then the goal w.p. 1/2, else −1):
    # 2/3 · (1/2 · 0 + 1/2 · (−2)) + 1/3 · (−1 + 1/2 · (−1)) = −2/3 − 1/2 = −7/6.
    assert bitflip_random_return(2) == Fraction(-7, 6)


@pytest.mark.parametrize("n, exact", [(5, Fraction(-17774, 3875)),
                                      (10, Fraction(-636259172501, 63937500000))])
def test_bitflip_random_return_matches_the_exact_value(n, exact):
    """docs/envs.md's random returns (−4.587 and −9.951): the exact Markov-chain value, and the
    environment's Monte-Carlo mean (20 000 episodes) within 4 standard errors of it."""
    assert bitflip_random_return(n) == exact
    env = BitFlip(n=n)
    _, traj = rollout(EpisodeStats(env), env.default_params, random_policy(n), 20_000, n, seed=3)
    first = np.argmax(traj["episode_done"], axis=0)
    returns = traj["episode_return"][first, np.arange(20_000)]
    assert traj["episode_done"].any(axis=0).all()  # every episode ends within n steps
    assert abs(returns.mean() - float(exact)) < 4 * returns.std() / np.sqrt(20_000)


# --------------------------------------------------------------------------------------------
# Wrappers
# --------------------------------------------------------------------------------------------


def reference_episode_stats(reward, done):
    """Plain loop over time for each env: return and length of the episode ending at each step."""
    ret = np.zeros_like(reward)
    length = np.zeros(reward.shape, np.int64)
    for b in range(reward.shape[1]):
        acc, count = 0.0, 0
        for t in range(reward.shape[0]):
            acc = np.float32(acc + reward[t, b])
            count += 1
            if done[t, b]:
                ret[t, b], length[t, b] = acc, count
                acc, count = 0.0, 0
    return ret, length


def test_delayed_reward_and_episode_stats_on_cartpole():
    env, params = envs.make("CartPole-v1")
    limit = 40
    stack = EpisodeStats(DelayedReward(TimeLimit(env, limit)))
    _, traj = rollout(stack, params, random_policy(2), 64, 300, extra=("undelayed_reward",))
    done = traj["terminated"] | traj["truncated"]
    assert traj["truncated"].any() and traj["terminated"].any()
    # Reward is paid only at episode ends, and is the whole episode's return.
    assert (traj["reward"][~done] == 0).all()
    ref_return, ref_length = reference_episode_stats(traj["undelayed_reward"], done)
    np.testing.assert_array_equal(traj["reward"][done], ref_return[done])
    np.testing.assert_array_equal(traj["episode_return"], ref_return)
    np.testing.assert_array_equal(traj["episode_length"], ref_length)
    np.testing.assert_array_equal(traj["episode_done"], done)
    # TimeLimit: cuts are truncations at exactly `limit` steps, never terminations.
    assert (ref_length[traj["truncated"]] == limit).all()
    assert (ref_length[traj["terminated"]] <= limit).all()
    assert not (traj["terminated"] & traj["truncated"]).any()


def test_time_limit_resets_and_keeps_final_observation():
    env, params = envs.make("DelayedEffect", n=10)
    stack = EpisodeStats(TimeLimit(env, 4))
    _, traj = rollout(stack, params, random_policy(2), 8, 12, keep_obs=True)
    # Cut after 4 steps: truncated at t = 3, 7, 11; reset to the start observation after each.
    np.testing.assert_array_equal(np.where(traj["truncated"][:, 0])[0], [3, 7, 11])
    assert not traj["terminated"].any()
    start = np.array([1, 0, 0, 0], np.float32)
    np.testing.assert_array_equal(traj["obs"][[0, 4, 8]], np.broadcast_to(start, (3, 8, 4)))
    middle = np.array([0, 1, 0, 0], np.float32)
    np.testing.assert_array_equal(traj["final_observation"][[3, 7, 11]],
                                  np.broadcast_to(middle, (3, 8, 4)))
    np.testing.assert_array_equal(traj["episode_length"][[3, 7, 11]], 4)
    with pytest.raises(ValueError, match="max_steps"):
        TimeLimit(env, 0)


def test_flatten_observation_composes_with_minatar():
    env, params = envs.make("DelayedReward-Breakout-MinAtar")
    flat = FlattenObservation(env)
    assert flat.observation_space(params).shape == (400,)
    _, traj = rollout(EpisodeStats(flat), params, random_policy(3), 4, 3, keep_obs=True)
    assert traj["obs"].shape == (3, 4, 400)
    assert traj["final_observation"].shape == (3, 4, 400)


def test_wrapped_state_index_and_tabular_mdp():
    # TimeLimit / EpisodeStats / FlattenObservation forward the ground truth to the inner env.
    grid = GridWorld(version=1)
    params = grid.default_params
    for env in (EpisodeStats(TimeLimit(grid, 10)), FlattenObservation(grid)):
        obs, state = env.reset(jax.random.PRNGKey(0), params)
        inner = state.env_state.env_state if isinstance(env, EpisodeStats) else state
        assert int(env.state_index(state)) == int(grid.state_index(inner))
        assert env.tabular_mdp(params).num_states == 50
    # DelayedReward (hence DelayedGridWorld) hides it; `undelayed` is the inner env (same J).
    env = DelayedGridWorld(version=1)
    for name in ("state_index", "tabular_mdp", "task_metrics", "reward_law", "num_states"):
        assert not hasattr(env, name)
        assert not hasattr(EpisodeStats(env), name)
    with pytest.raises(AttributeError, match="DelayedReward hides"):
        env.tabular_mdp(params)
    assert env.undelayed.tabular_mdp(params).num_states == 50
    assert env.num_actions == 4  # everything else is still forwarded
    cartpole, _ = envs.make("CartPole-v1")
    assert not hasattr(EpisodeStats(cartpole), "state_index")


def test_options_fill_in_every_default():
    """Headers print the whole task: constructor defaults and params, after the given options."""
    from jaxcredit.envs.registry import options

    assert options("DelayedEffect", n=5) == {"n": 5, "sigma": pytest.approx(0.1),
                                             "final_reward": 1.0}
    assert options("DelayedReward-DelayedEffect", sigma=1.0)["sigma"] == 1.0
    assert options("AmbiguousBandit")["epsilon"] == pytest.approx(0.1)

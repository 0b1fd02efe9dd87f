"""The TabularEnv protocol: one tabular_mdp for every env with ground truth, the task metrics,
the reward-law hook, and which wrappers forward the ground truth (DelayedReward hides it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs
from jaxcredit.envs import wrappers
from jaxcredit.exact import tabular
from jaxcredit.envs.grid import DelayedGridWorld, GridWorld
from jaxcredit.envs.hca_tasks import AmbiguousBandit, DelayedEffect, Shortcut
from jaxcredit.envs.key_to_door import OPEN_DOOR, PICK_KEY, KeyToDoor
from jaxcredit.envs.tabular_env import GROUND_TRUTH_ATTRIBUTES, TabularEnv
from jaxcredit.exact.tabular import has_ground_truth
from jaxcredit.envs.tree_mdp import TreeMDP


def random_pi(key, num_states, num_actions, scale=1.0):
    return tabular.softmax_policy(scale * jax.random.normal(key, (num_states, num_actions)))


# --------------------------------------------------------------------------------------------
# Protocol
# --------------------------------------------------------------------------------------------


JAXCREDIT_ENVS = [n for n in envs.registered() if n in envs.registry._JAXCREDIT_ENVS]


@pytest.mark.parametrize("name", JAXCREDIT_ENVS)
def test_every_registered_env_with_ground_truth_keeps_the_protocol(name):
    """Generated from the registry: every jaxcredit environment that is a TabularEnv has a valid
    MDP whose start states and observations are the environment's own."""
    env, params = envs.make(name)
    if not isinstance(env, TabularEnv):
        assert not has_ground_truth(env)
        return
    assert has_ground_truth(env) and isinstance(env.num_states, int)
    mdp = env.tabular_mdp(params)
    np.testing.assert_allclose(mdp.transition.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(mdp.initial.sum(), 1.0, atol=1e-5)
    for seed in range(3):
        obs, state = env.reset(jax.random.PRNGKey(seed), params)
        index = int(env.state_index(state))
        assert 0 <= index < env.num_states and float(mdp.initial[index]) > 0, (name, index)
        np.testing.assert_allclose(np.asarray(mdp.observation[index]).reshape(-1),
                                   np.asarray(obs, np.float32).reshape(-1), atol=1e-6)
    # Along random episodes (resets included) the observation is the MDP's observation row of
    # the state exactly when the environment says so (``observation_of_state``: COCOA-feature's
    # pretraining summary bounds the distinct observations by S on that promise).
    obs, state_index = jax.vmap(_random_walk, (None, None, 0))(
        env, params, jax.random.split(jax.random.key(0), 4))
    table = np.asarray(mdp.observation)[np.asarray(state_index)].reshape(obs.shape[:2] + (-1,))
    matches = np.abs(table - np.asarray(obs, np.float32).reshape(table.shape)).max(-1) < 1e-6
    assert matches.all() if env.observation_of_state else not matches.all(), name


def _random_walk(env, params, key, steps=24):
    """``(observations, state indices)`` of ``steps`` uniformly random actions from a reset."""
    def step(carry, step_key):
        obs, state = carry
        act_key, env_key = jax.random.split(step_key)
        action = jax.random.randint(act_key, (), 0, env.num_actions)
        next_obs, next_state, *_ = env.step(env_key, state, action, params)
        return (next_obs, next_state), (obs, env.state_index(state))

    return jax.lax.scan(step, env.reset(key, params), jax.random.split(key, steps))[1]


def test_the_known_tabular_envs_are_tabular():
    for name in ["Shortcut", "DelayedEffect", "AmbiguousBandit", "KeyToDoor", "TaskInterleaving",
                 "TreeMDP", "GridWorld-v1", "GridWorld-v2"]:
        assert isinstance(envs.make(name)[0], TabularEnv), name


@pytest.mark.parametrize("name", ["BitFlip", "CartPole-v1", "DelayedGridWorld-v1",
                                  "DelayedReward-Shortcut", "DelayedReward-KeyToDoor"])
def test_envs_without_ground_truth(name):
    env, _ = envs.make(name)
    assert not has_ground_truth(env)
    for attribute in ("tabular_mdp", "state_index", "task_metrics", "reward_law"):
        assert not hasattr(env, attribute), (name, attribute)


def test_delayed_reward_hides_exactly_the_protocol():
    # wrappers.py keeps its own copy (no import of the tabular machinery): keep them equal.
    assert wrappers._GROUND_TRUTH_ATTRIBUTES == GROUND_TRUTH_ATTRIBUTES
    env = DelayedGridWorld(version=1)
    with pytest.raises(AttributeError, match="DelayedReward hides"):
        env.reward_law()
    assert isinstance(env.undelayed, GridWorld) and has_ground_truth(env.undelayed)
    # The inner env reached through TimeLimit keeps its ground truth; outside DelayedReward, none.
    inner = wrappers.TimeLimit(KeyToDoor(8), 5)
    assert has_ground_truth(inner) and callable(inner.task_metrics)
    assert not has_ground_truth(wrappers.EpisodeStats(wrappers.DelayedReward(inner)))


def test_wrappers_forward_metrics_and_reward_law():
    env = KeyToDoor(8)
    params = env.default_params
    pi = random_pi(jax.random.PRNGKey(0), env.num_states, 4)
    expected = env.task_metrics(params, pi)
    values, probs = env.reward_law(params)
    for wrapped in (wrappers.EpisodeStats(wrappers.TimeLimit(env, 4)),
                    wrappers.FlattenObservation(env)):
        assert has_ground_truth(wrapped)
        got = wrapped.task_metrics(params, pi)
        assert got.keys() == expected.keys()
        for k in got:
            np.testing.assert_array_equal(got[k], expected[k])
        got_values, got_probs = wrapped.reward_law(params)
        np.testing.assert_array_equal(got_values, values)
        np.testing.assert_array_equal(got_probs, probs)
        assert wrapped.num_states == env.num_states


def test_tabular_mdp_default_and_traced_params():
    env = DelayedEffect(3)
    params = env.default_params.replace(sigma=0.3)
    concrete = env.tabular_mdp(params)
    np.testing.assert_array_equal(env.tabular_mdp().transition, concrete.transition)

    # Traced params: under jit and vmap (one program, inlined).
    @jax.jit
    def noise_std(sigma):
        return env.tabular_mdp(params.replace(sigma=sigma)).transition_reward_std

    np.testing.assert_allclose(noise_std(0.3), concrete.transition_reward_std)
    shortcut = Shortcut(4)
    slips = jnp.array([0.0, 0.1, 0.5])
    transitions = jax.vmap(
        lambda p: shortcut.tabular_mdp(shortcut.default_params.replace(slip_prob=p)).transition
    )(slips)
    # From state 0, "long" reaches the goal w.p. slip_prob.
    np.testing.assert_allclose(transitions[:, 0, 1, 3], slips, atol=1e-7)
    # KeyToDoor's rewards are traced parameters too.
    key_env = KeyToDoor(8)
    reward = jax.jit(lambda t: key_env.tabular_mdp(
        key_env.default_params.replace(treasure_reward=t)).reward)(1.5)
    treasure_state = 2 * (8 - 1) + 2  # at the treasure cell with the door open
    np.testing.assert_allclose(reward[treasure_state], 1.5)


# --------------------------------------------------------------------------------------------
# Task metrics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_env", [lambda: Shortcut(5), lambda: DelayedEffect(3),
                                      AmbiguousBandit], ids=["shortcut", "delayed", "bandit"])
def test_p_optimal_first_action(make_env):
    env = make_env()
    params = env.default_params
    mdp = env.tabular_mdp(params)
    pi = random_pi(jax.random.PRNGKey(1), env.num_states, 2)
    # a* = 0 from the start state: the strictly better action under any policy afterwards
    # (shortcut: 0 vs < 0; delayed effect: +1 vs −1; bandit: 1.9 vs 1.1 when ε = 0.1).
    for policy in (pi, tabular.uniform_policy(mdp)):
        q = tabular.action_values(mdp, policy, 1.0)
        assert float(q[0, 0]) > float(q[0, 1])
    metrics = jax.jit(env.task_metrics)(params, pi)
    assert set(metrics) == {"p_optimal_first_action"}
    np.testing.assert_allclose(metrics["p_optimal_first_action"], pi[0, 0])
    hand = jnp.zeros((env.num_states, 2)).at[:, 0].set(0.8).at[:, 1].set(0.2)
    np.testing.assert_allclose(env.task_metrics(params, hand)["p_optimal_first_action"], 0.8)


def test_key_to_door_rates_by_hand():
    env = KeyToDoor(23)
    uniform = jnp.full((env.num_states, 4), 0.25)
    metrics = env.task_metrics(env.default_params, uniform)
    np.testing.assert_allclose(metrics["key_rate"], 0.25)
    np.testing.assert_allclose(metrics["treasure_rate"], 1.0 / 16.0)  # the docstring's chance
    # Deterministic policy: always pick the key, open the door only with the key.
    pi = np.zeros((env.num_states, 4), np.float32)
    pi[:, PICK_KEY] = 1.0
    pi[2 * (23 - 2) + 1] = np.eye(4)[OPEN_DOOR]
    metrics = env.task_metrics(env.default_params, jnp.asarray(pi))
    assert float(metrics["key_rate"]) == 1.0 and float(metrics["treasure_rate"]) == 1.0


@pytest.mark.parametrize("length", [8, 23])
def test_key_to_door_treasure_rate_is_the_treasure_value(length):
    """P(treasure) = V(s0) of the MDP whose only reward is a treasure worth 1."""
    env = KeyToDoor(length)
    treasure_only = env.default_params.replace(apple_reward_low=0.0, apple_reward_high=0.0,
                                               treasure_reward=1.0)
    mdp = env.tabular_mdp(treasure_only)
    for seed in range(3):
        pi = random_pi(jax.random.PRNGKey(seed), env.num_states, 4, scale=2.0)
        metrics = jax.jit(env.task_metrics)(env.default_params, pi)
        v0 = tabular.state_values(mdp, pi, 1.0)[0]
        np.testing.assert_allclose(metrics["treasure_rate"], v0, rtol=1e-5)
        np.testing.assert_allclose(metrics["key_rate"], pi[0, PICK_KEY])


def test_envs_without_a_decisive_metric_report_none():
    tree = TreeMDP(depth=2, branching=2)
    pi = jnp.full((tree.num_states, 2), 0.5)
    assert tree.task_metrics(tree.default_params, pi) == {}
    assert tree.reward_law() is None
    assert Shortcut(4).reward_law() is None


# --------------------------------------------------------------------------------------------
# Reward law
# --------------------------------------------------------------------------------------------


def test_key_to_door_reward_law_matches_the_mdp_moments():
    env = KeyToDoor(23)
    mdp = env.tabular_mdp()
    values, probs = env.reward_law()
    legacy = env.reward_distribution()
    np.testing.assert_array_equal(legacy[0], values)
    np.testing.assert_array_equal(legacy[1], probs)
    assert probs.shape == (env.num_states, 4, 4)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    mean = probs @ values
    std = jnp.sqrt(jnp.maximum(probs @ values**2 - mean**2, 0.0))
    np.testing.assert_allclose(mean, mdp.reward, atol=1e-6)
    np.testing.assert_allclose(std, mdp.reward_std, atol=1e-4)  # sqrt of a float32 difference
    # Hand values at L = 23: (0, 0.1, 0.9, 0.2); a left apple at cell 1 picked with PICK_LEFT.
    np.testing.assert_allclose(values, [0.0, 0.1, 0.9, 0.2], rtol=1e-6)
    np.testing.assert_allclose(probs[2, 1], [0.0, 0.5, 0.5, 0.0])

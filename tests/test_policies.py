"""The action distributions (jaxcredit.policies): hand-checked densities, the tanh correction
against a float64 reference, the maps onto the action bounds, and which space takes which law."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxcredit.policies import ActionDistribution, action_features, for_space


def test_gaussian_log_density_and_entropy_by_hand():
    law = ActionDistribution("gaussian", 2, (-2.0, -2.0), (2.0, 2.0))
    # μ = (0, 1), log σ = (0, log 2); a = (1, 0):
    # log N(1; 0, 1) = −½ − ½ log 2π;  log N(0; 1, 2) = −⅛ − log 2 − ½ log 2π.
    logits = jnp.array([0.0, 1.0, 0.0, math.log(2.0)])
    expected = -0.5 - 0.125 - math.log(2.0) - math.log(2 * math.pi)
    np.testing.assert_allclose(law.log_prob(logits, jnp.array([1.0, 0.0])), expected, rtol=1e-6)
    # H = Σ_d ½ log(2πe σ_d²) = log(2πe)/2 · 2 + log 2.
    np.testing.assert_allclose(law.entropy(logits), math.log(2 * math.pi * math.e) + math.log(2),
                               rtol=1e-6)
    np.testing.assert_allclose(law.mode(logits), [0.0, 1.0])


def test_categorical_log_prob_entropy_and_mode_by_hand():
    law = ActionDistribution("categorical", 3)
    logits = jnp.log(jnp.array([0.5, 0.25, 0.25]))
    np.testing.assert_allclose(law.log_prob(logits, jnp.array(1)), math.log(0.25), rtol=1e-6)
    np.testing.assert_allclose(law.entropy(logits), 1.5 * math.log(2.0), rtol=1e-6)
    assert int(law.mode(logits)) == 0


def test_tanh_gaussian_density_matches_a_float64_change_of_variables():
    law = ActionDistribution("tanh_gaussian_state", 3, (-1.0,) * 3, (1.0,) * 3)
    rng = np.random.default_rng(0)
    mean, log_std = rng.normal(size=(5, 3)), rng.uniform(-1, 0.5, size=(5, 3))
    u = rng.normal(size=(5, 3)) * 4.0  # far into tanh's saturation for some entries
    ours = law.log_prob(jnp.asarray(np.concatenate([mean, log_std], -1), jnp.float32),
                        jnp.asarray(u, jnp.float32))
    sigma = np.exp(log_std)
    gauss = (-0.5 * ((u - mean) / sigma) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    # log |d tanh(u)/du| = log(1 − tanh²u) = 2 (log 2 − u − softplus(−2u)), stable in float64.
    log_det = (2.0 * (np.log(2.0) - u - np.logaddexp(0.0, -2.0 * u))).sum(-1)
    np.testing.assert_allclose(ours, gauss - log_det, rtol=1e-4, atol=1e-4)
    assert np.isfinite(np.asarray(ours)).all()


def test_actions_reach_the_environment_clipped_or_squashed_onto_the_bounds():
    clipped = ActionDistribution("gaussian", 2, (-2.0, 0.0), (2.0, 1.0))
    np.testing.assert_allclose(clipped.to_env(jnp.array([3.0, -0.5])), [2.0, 0.0])
    np.testing.assert_allclose(clipped.to_env(jnp.array([-1.0, 0.5])), [-1.0, 0.5])
    squashed = ActionDistribution("tanh_gaussian", 2, (-2.0, 0.0), (2.0, 1.0))
    # low + (tanh(u) + 1)(high − low)/2: u = 0 is the middle, u → ±∞ the bounds.
    np.testing.assert_allclose(squashed.to_env(jnp.array([0.0, 0.0])), [0.0, 0.5], atol=1e-7)
    np.testing.assert_allclose(squashed.to_env(jnp.array([30.0, -30.0])), [2.0, 0.0], atol=1e-6)
    assert clipped.to_env(jnp.array(1)).dtype == jnp.float32


def test_state_independent_and_state_dependent_log_std_parameters():
    shared = ActionDistribution("gaussian", 2, (-1.0,) * 2, (1.0,) * 2)
    head = jnp.ones((4, 2))
    logits = shared.logits(head, jnp.array([0.5, -0.5]))
    np.testing.assert_allclose(logits, np.tile([1.0, 1.0, 0.5, -0.5], (4, 1)))
    per_state = ActionDistribution("gaussian_state", 2, (-1.0,) * 2, (1.0,) * 2)
    assert per_state.head_size == 4 and shared.head_size == 2 and shared.logits_size == 4
    # log σ clipped to [−5, 2].
    np.testing.assert_allclose(per_state.logits(jnp.array([0.0, 0.0, 9.0, -9.0])),
                               [0.0, 0.0, 2.0, -5.0])


def test_samples_have_the_stated_mean_and_spread():
    law = ActionDistribution("gaussian", 1, (-10.0,), (10.0,))
    draws = law.sample(jax.random.key(0), jnp.broadcast_to(jnp.array([1.5, math.log(0.5)]),
                                                           (20000, 2)))
    assert draws.shape == (20000, 1) and draws.dtype == jnp.float32
    np.testing.assert_allclose(draws.mean(), 1.5, atol=0.02)
    np.testing.assert_allclose(draws.std(), 0.5, atol=0.02)


def test_each_space_takes_its_law_and_a_mismatch_is_one_line():
    assert for_space(spaces.Discrete(4)).name == "categorical"
    law = for_space(spaces.Box(-2.0, 2.0, (1,), jnp.float32))
    assert (law.name, law.action_dim, law.low, law.high) == ("gaussian", 1, (-2.0,), (2.0,))
    assert for_space(spaces.Box(-1.0, 1.0, (3,)), "tanh_gaussian").squashed
    with pytest.raises(ValueError, match="needs discrete actions"):
        for_space(spaces.Box(-1.0, 1.0, (3,)), "categorical")
    with pytest.raises(ValueError, match="for continuous actions"):
        for_space(spaces.Discrete(2), "gaussian")
    with pytest.raises(ValueError, match="infinite"):
        for_space(spaces.Box(-jnp.inf, jnp.inf, (2,)), "tanh_gaussian")
    with pytest.raises(ValueError, match="unknown action distribution"):
        ActionDistribution("beta", 2)


def test_action_features_one_hot_or_as_is():
    np.testing.assert_array_equal(action_features(jnp.array([2, 0]), 3),
                                  [[0, 0, 1], [1, 0, 0]])
    vector = jnp.array([[0.3, -1.0]], jnp.float32)
    np.testing.assert_array_equal(action_features(vector, 99), vector)

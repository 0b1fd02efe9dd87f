"""Running normalisation (jaxcredit.agents.normalize): the combined moments against numpy on the
concatenated stream, and the reward scale by hand."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxcredit.agents.normalize import INITIAL_COUNT, RunningMoments, make_normalizer


def test_moments_of_batches_equal_the_moments_of_the_whole_stream():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 2)) for n in (5, 1, 17, 4)]
    moments = RunningMoments.zeros((2,))
    for batch in batches:
        moments = moments.update(jnp.asarray(batch, jnp.float32))
    stream = np.concatenate(batches)
    # The prior (mean 0, variance 1, weight 1e-4) is one more sample of weight 1e-4.
    n = len(stream) + INITIAL_COUNT
    mean = stream.sum(0) / n
    var = (np.square(stream - mean).sum(0) + INITIAL_COUNT * (1.0 + mean ** 2)) / n
    np.testing.assert_allclose(moments.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(moments.var, var, rtol=1e-4)
    np.testing.assert_allclose(moments.count, n, rtol=1e-6)


def test_rewards_are_scaled_by_the_spread_of_the_discounted_returns():
    norm = make_normalizer((1,), 2, observations=False, rewards=True)
    # Step 1: G = (1, 3); moments of {0 (prior), 1, 3}: mean ≈ 2, var ≈ 1.
    norm, scaled = norm.reward(jnp.array([1.0, 3.0]), jnp.array([False, True]), 0.5)
    np.testing.assert_allclose(norm.returns.mean, 2.0, rtol=1e-3)
    np.testing.assert_allclose(norm.returns.var, 1.0, rtol=1e-3)
    np.testing.assert_allclose(scaled, [1.0, 3.0], rtol=1e-3)
    # The second environment's episode ended: its discounted return starts again from 0.
    np.testing.assert_allclose(norm.discounted, [1.0, 0.0])
    # Step 2: G = (0.5·1 + 1, 0 + 1) = (1.5, 1).
    norm, _ = norm.reward(jnp.array([1.0, 1.0]), jnp.array([False, False]), 0.5)
    np.testing.assert_allclose(norm.discounted, [1.5, 1.0])


def test_observations_are_centred_and_scaled_and_nothing_is_made_when_off():
    assert make_normalizer((3,), 4, observations=False, rewards=False) is None
    norm = make_normalizer((2,), 4, observations=True, rewards=False)
    obs = jnp.array([[0.0, 10.0], [2.0, 10.0], [4.0, 30.0], [6.0, 30.0]])
    for _ in range(50):
        norm = norm.observe(obs)
    seen = norm.observation(obs)
    np.testing.assert_allclose(seen.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(seen.std(0), 1.0, rtol=1e-3)
    reward = jnp.array([2.0, -1.0, 0.0, 5.0])
    assert norm.reward(reward, jnp.zeros(4, bool), 0.9)[1] is reward

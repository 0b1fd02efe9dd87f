"""Tests of the multistep return estimators, in rlax's manner.

1. tiny cases with the expected values worked out by hand and written in;
2. identities between estimators;
3. randomised comparisons with a float64 plain-loop reference (with terminations and truncations)
   and with rlax (vmapped), for both implementations (scan and associative scan);
4. the time-out case that rlax's truncated GAE and PureJaxRL-style GAE get wrong.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxcredit import estimators as E
from jaxcredit.types import Trajectory

METHODS = ["scan", "associative"]

# Jitted entry points for the randomised comparisons: γ and λ are traced, so one compilation per
# shape serves every λ (as in a hyper-parameter sweep) and the suite stays fast.
gae_jit = jax.jit(E.gae, static_argnames=("method",))
lambda_returns_jit = jax.jit(E.lambda_returns, static_argnames=("method", "stop_target_gradients"))

KEY = jax.random.key(1234)  # the stages' PRNG key (only sampling estimators use it)


# ---------------------------------------------------------------------------------------------
# Float64 plain-loop references, one sequence at a time (written independently of the library).
# ---------------------------------------------------------------------------------------------


def ref_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Per-sequence loop over time, float64; batch handled by an outer loop over columns."""
    rewards = np.asarray(rewards, np.float64)
    T = rewards.shape[0]
    flat = lambda x: np.asarray(x, np.float64).reshape(T, -1)
    r, v, nv = flat(rewards), flat(values), flat(next_values)
    term, trunc = flat(terminated), flat(truncated)
    lam = np.broadcast_to(np.asarray(lam, np.float64), rewards.shape).reshape(T, -1)
    adv = np.zeros_like(r)
    for b in range(r.shape[1]):
        running = 0.0
        for t in reversed(range(T)):
            done = term[t, b] or trunc[t, b]
            delta = r[t, b] + gamma * (1.0 - term[t, b]) * nv[t, b] - v[t, b]
            running = delta + gamma * lam[t, b] * (0.0 if done else running)
            adv[t, b] = running
    return adv.reshape(rewards.shape), (adv + v).reshape(rewards.shape)


def ref_lambda_returns(r, discount, v, lam):
    r, discount, v = (np.asarray(x, np.float64) for x in (r, discount, v))
    lam = np.broadcast_to(np.asarray(lam, np.float64), r.shape)
    out = np.zeros_like(r)
    g = v[-1]
    for t in reversed(range(r.shape[0])):
        if t == r.shape[0] - 1:
            g = r[t] + discount[t] * v[t]
        else:
            g = r[t] + discount[t] * ((1 - lam[t]) * v[t] + lam[t] * g)
        out[t] = g
    return out


def ref_n_step(r, discount, v, n):
    """Direct sum: Σ_{k<h} (Π_{j<k} γ_{t+j}) r_{t+k} + (Π_{j<h} γ_{t+j}) v_{t+h-1},
    h = min(n, T-t)."""
    r, discount, v = (np.asarray(x, np.float64) for x in (r, discount, v))
    T = r.shape[0]
    out = np.zeros_like(r)
    for t in range(T):
        h = min(n, T - t)
        acc, scale = 0.0, 1.0
        for k in range(h):
            acc = acc + scale * r[t + k]
            scale = scale * discount[t + k]
        out[t] = acc + scale * v[t + h - 1]
    return out


def random_window(rng, shape, p_term=0.1, p_trunc=0.1, dtype=np.float32):
    r = rng.normal(size=shape).astype(dtype)
    v = rng.normal(size=shape).astype(dtype)
    nv = rng.normal(size=shape).astype(dtype)
    term = rng.random(shape) < p_term
    trunc = (rng.random(shape) < p_trunc) & ~term
    # As in a real rollout: inside an episode V(s'_{t+1}) is the value of the next state,
    # V(s_{t+1}); after an episode end s_{t+1} is a reset state, unrelated to the final observation.
    done = term | trunc
    v[1:] = np.where(done[:-1], v[1:], nv[:-1])
    return r, v, nv, term, trunc


def time_major_vmap(fn, num_args_batched, *static):
    """``jax.vmap`` of a per-sequence rlax function over the batch axis of [T, B] inputs."""
    in_axes = (1,) * num_args_batched + (None,) * len(static)
    return lambda *args: jax.vmap(fn, in_axes=in_axes, out_axes=1)(*args, *static)


# ---------------------------------------------------------------------------------------------
# 1. Tiny hand-checked cases.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_lambda_returns_hand_checked(method):
    # T = 3, γ = 0.5, v = (2, 4, 8) (values of s_1, s_2, s_3), r = (1, 1, 1), λ = 0.5:
    # G_2 = 1 + 0.5·8 = 5
    # G_1 = 1 + 0.5·(0.5·4 + 0.5·5) = 3.25
    # G_0 = 1 + 0.5·(0.5·2 + 0.5·3.25) = 2.3125
    r = jnp.array([1.0, 1.0, 1.0])
    d = jnp.array([0.5, 0.5, 0.5])
    v = jnp.array([2.0, 4.0, 8.0])
    np.testing.assert_allclose(E.lambda_returns(r, d, v, 0.5, method=method), [2.3125, 3.25, 5.0])
    # λ = 1: G_2 = 5, G_1 = 1 + 0.5·5 = 3.5, G_0 = 1 + 0.5·3.5 = 2.75.
    np.testing.assert_allclose(E.lambda_returns(r, d, v, 1.0, method=method), [2.75, 3.5, 5.0])
    # λ = 0: one-step targets r + γ v = (2, 3, 5).
    np.testing.assert_allclose(E.lambda_returns(r, d, v, 0.0, method=method), [2.0, 3.0, 5.0])


@pytest.mark.parametrize("method", METHODS)
def test_gae_hand_checked_termination_and_truncation(method):
    # One env, T = 4, γ = 0.5, λ = 1, reward 1 per step, V(s_t) = 1 everywhere.
    # Step 1 terminates, step 3 is truncated (time-out) with V(final obs) = 10.
    rewards = jnp.ones(4)
    values = jnp.ones(4)
    next_values = jnp.array([1.0, 99.0, 1.0, 10.0])  # 99 at the terminal must be ignored.
    terminated = jnp.array([False, True, False, False])
    truncated = jnp.array([False, False, False, True])
    adv, targets = E.gae(rewards, values, next_values, terminated, truncated, 0.5, 1.0,
                         method=method)
    # t=3: δ = 1 + 0.5·10 - 1 = 5 (trace cut: it is the window's end anyway)   → Â = 5
    # t=2: δ = 1 + 0.5·1 - 1 = 0.5;  Â = 0.5 + 0.5·5 = 3.0
    # t=1: δ = 1 + 0 - 1 = 0 (terminal);  Â = 0 (trace cut)
    # t=0: δ = 1 + 0.5·1 - 1 = 0.5;  Â = 0.5 + 0.5·0 = 0.5
    np.testing.assert_allclose(adv, [0.5, 0.0, 3.0, 5.0])
    np.testing.assert_allclose(targets, [1.5, 1.0, 4.0, 6.0])


def test_n_step_hand_checked():
    # T = 4, γ = 0.5, n = 2, r = (1, 2, 3, 4), v = (10, 20, 30, 40).
    # G_0 = 1 + 0.5·2 + 0.25·20 = 7;  G_1 = 2 + 0.5·3 + 0.25·30 = 11
    # G_2 = 3 + 0.5·4 + 0.25·40 = 15; G_3 = 4 + 0.5·40 = 24 (horizon shrinks at the window end)
    r = jnp.array([1.0, 2.0, 3.0, 4.0])
    d = jnp.full(4, 0.5)
    v = jnp.array([10.0, 20.0, 30.0, 40.0])
    np.testing.assert_allclose(E.n_step_bootstrapped_returns(r, d, v, 2), [7.0, 11.0, 15.0, 24.0])


@pytest.mark.parametrize("method", METHODS)
def test_vtrace_hand_checked(method):
    # T = 2, γ = 1, λ = 1, V = (0, 0) with bootstrap V(x_2) = 1, r = (1, 1), ρ = (2, 0.5), ρ̄ = 1:
    # δ_1 = min(1, 0.5)·(1 + 1 - 0) = 1;  c_1 = 0.5
    # δ_0 = min(1, 2)·(1 + 0 - 0) = 1;    c_0 = 1 → e_0 = 1 + 1·1·e_1 = 2
    v_tm1 = jnp.array([0.0, 0.0])
    v_t = jnp.array([0.0, 1.0])
    r = jnp.ones(2)
    d = jnp.ones(2)
    rho = jnp.array([2.0, 0.5])
    np.testing.assert_allclose(E.vtrace(v_tm1, v_t, r, d, rho, method=method), [2.0, 1.0])


def test_discounted_returns_hand_checked():
    # r = (1, 0, 2), γ = 0.5, bootstrap 4: G_2 = 2 + 2 = 4, G_1 = 0 + 2 = 2, G_0 = 1 + 1 = 2.
    r = jnp.array([1.0, 0.0, 2.0])
    d = jnp.full(3, 0.5)
    np.testing.assert_allclose(E.discounted_returns(r, d, 4.0), [2.0, 2.0, 4.0])
    np.testing.assert_allclose(E.discounted_returns(r, d, jnp.array([0.0, 0.0, 4.0])),
                               [2.0, 2.0, 4.0])


# ---------------------------------------------------------------------------------------------
# 2. Termination is not truncation: the time-out inside a window.
# ---------------------------------------------------------------------------------------------


def test_time_out_inside_window_rlax_and_purejaxrl_get_it_wrong():
    """A time-out at t = 2 of a 5-step window, γ = 0.9, λ = 0.95, with the exact value function.

    The first episode pays reward 1 per step for ever (cut only by the time limit), so each of its
    states is worth 1 / (1 - γ) = 10, its final observation included. The auto-reset starts an
    episode that pays 0, whose states are worth 0. With exact values every advantage is 0.
    """
    gamma, lam = 0.9, 0.95
    rewards = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    values = jnp.array([10.0, 10.0, 10.0, 0.0, 0.0])
    next_values = jnp.array([10.0, 10.0, 10.0, 0.0, 0.0])  # V(final obs) = 10 at the time-out
    terminated = jnp.zeros(5, bool)
    truncated = jnp.array([False, False, True, False, False])

    ours, _ = E.gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(ours, np.zeros(5), atol=1e-5)

    # PureJaxRL: `done` merges both flags and multiplies the bootstrap by (1 - done): the time-out
    # is treated as a terminal, δ_2 = 1 - 10 = -9, and the error reaches t = 1 and t = 0.
    done = np.asarray(terminated | truncated, np.float64)
    pjr, running = np.zeros(5), 0.0
    for t in reversed(range(5)):
        delta = rewards[t] + gamma * next_values[t] * (1 - done[t]) - values[t]
        running = delta + gamma * lam * (1 - done[t]) * running
        pjr[t] = running
    np.testing.assert_allclose(pjr[:3], [-9 * (gamma * lam) ** 2, -9 * gamma * lam, -9.0],
                               rtol=1e-5)

    # rlax: V(s_{t+1}) comes from values[t+1], which after the auto-reset is the *reset* state
    # (worth 0), so δ_2 = 1 + 0.9·0 - 10 = -9, and the uncut trace carries it back as well.
    values_plus_one = jnp.array([10.0, 10.0, 10.0, 0.0, 0.0, 0.0])
    rl = rlax.truncated_generalized_advantage_estimation(
        rewards, gamma * (1.0 - terminated), lam, values_plus_one)
    np.testing.assert_allclose(rl[:3], [-9 * (gamma * lam) ** 2, -9 * gamma * lam, -9.0], rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# 3. Identities.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_identities(method):
    rng = np.random.default_rng(0)
    r, v, nv, _, _ = random_window(rng, (7, 3))
    d = np.full((7, 3), 0.9, np.float32)
    no_end = np.zeros((7, 3), bool)

    # λ = 1 with no episode end = discounted sum bootstrapped with the last value.
    np.testing.assert_allclose(
        E.lambda_returns(r, d, nv, 1.0, method=method),
        E.discounted_returns(r, d, nv, method=method), rtol=1e-5)
    # λ = 0 = one-step TD target.
    np.testing.assert_allclose(E.lambda_returns(r, d, nv, 0.0, method=method), r + d * nv,
                               rtol=1e-5)
    # n-step with n ≥ T = Monte Carlo with bootstrap.
    for n in (7, 50):
        np.testing.assert_allclose(
            E.n_step_bootstrapped_returns(r, d, nv, n), E.discounted_returns(r, d, nv), rtol=1e-5)
    # n = 1 = one-step TD target.
    np.testing.assert_allclose(E.n_step_bootstrapped_returns(r, d, nv, 1), r + d * nv, rtol=1e-5)
    # GAE(λ) + V = λ-return when the window has no episode end (so V(s'_{i+1}) = V(s_{i+1}));
    # GAE(λ=0) = TD error.
    v = v.copy()
    v[1:] = nv[:-1]
    adv, targets = E.gae(r, v, nv, no_end, no_end, 0.9, 0.7, method=method)
    np.testing.assert_allclose(targets, E.lambda_returns(r, d, nv, 0.7, method=method),
                               rtol=1e-5, atol=1e-5)
    adv0, _ = E.gae(r, v, nv, no_end, no_end, 0.9, 0.0, method=method)
    np.testing.assert_allclose(adv0, r + 0.9 * nv - v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_gae_equals_episode_aware_lambda_returns(method):
    rng = np.random.default_rng(1)
    r, v, nv, term, trunc = random_window(rng, (16, 5), 0.15, 0.15)
    for lam in (0.0, 0.5, 1.0):
        _, targets = E.gae(r, v, nv, term, trunc, 0.95, lam, method=method)
        np.testing.assert_allclose(
            targets, E.episode_aware_lambda_returns(r, nv, term, trunc, 0.95, lam, method=method),
            rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_split_at_episode_end_equals_whole(end):
    """Cutting a window right after an episode end gives the same advantages as the whole window."""
    rng = np.random.default_rng(2)
    r, v, nv, term, trunc = random_window(rng, (12, 4), 0.0, 0.0)
    cut = 5
    (term if end == "terminated" else trunc)[cut - 1] = True
    whole, _ = E.gae(r, v, nv, term, trunc, 0.9, 0.8)
    first, _ = E.gae(r[:cut], v[:cut], nv[:cut], term[:cut], trunc[:cut], 0.9, 0.8)
    second, _ = E.gae(r[cut:], v[cut:], nv[cut:], term[cut:], trunc[cut:], 0.9, 0.8)
    np.testing.assert_allclose(whole, np.concatenate([first, second]), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# 4. Randomised comparisons with the float64 reference and with rlax.
# ---------------------------------------------------------------------------------------------


SHAPES = [(1,), (17,), (33, 4), (20, 2, 3)]
LAMBDAS = [0.0, 0.5, 0.95, 1.0, "per_step"]


@pytest.mark.parametrize("shape,lam,method", list(itertools.product(SHAPES, LAMBDAS, METHODS)))
def test_gae_matches_float64_reference(shape, lam, method):
    rng = np.random.default_rng(hash((shape, str(lam))) % 2**32)
    r, v, nv, term, trunc = random_window(rng, shape, 0.1, 0.1)
    if lam == "per_step":
        lam = rng.uniform(size=shape).astype(np.float32)
    adv, targets = gae_jit(r, v, nv, term, trunc, 0.97, lam, method=method)
    ref_adv, ref_targets = ref_gae(r, v, nv, term, trunc, 0.97, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, ref_targets, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lam,method", list(itertools.product(LAMBDAS, METHODS)))
def test_lambda_returns_match_reference_and_rlax(lam, method):
    rng = np.random.default_rng(3)
    T, B = 40, 6
    r = rng.normal(size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.95 * (rng.random((T, B)) > 0.1)).astype(np.float32)
    if lam == "per_step":
        lam = rng.uniform(size=(T, B)).astype(np.float32)
    ours = lambda_returns_jit(r, d, v, lam, method=method)
    np.testing.assert_allclose(ours, ref_lambda_returns(r, d, v, lam), rtol=1e-5, atol=1e-5)
    lam_axis = 1 if np.ndim(lam) else None
    theirs = jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, lam_axis), out_axes=1)(r, d, v, lam)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_truncated_gae_matches_rlax(method):
    rng = np.random.default_rng(4)
    T, B = 30, 5
    r = rng.normal(size=(T, B)).astype(np.float32)
    values = rng.normal(size=(T + 1, B)).astype(np.float32)
    d = (0.99 * (rng.random((T, B)) > 0.1)).astype(np.float32)
    ours = E.truncated_generalized_advantage_estimation(r, d, 0.9, values, method=method)
    theirs = time_major_vmap(rlax.truncated_generalized_advantage_estimation, 2, 0.9)
    theirs = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(1, 1, None, 1),
                      out_axes=1)(r, d, 0.9, values)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_n_step_matches_reference_and_rlax(n):
    rng = np.random.default_rng(5)
    T, B = 25, 4
    r = rng.normal(size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.9 * (rng.random((T, B)) > 0.15)).astype(np.float32)
    ours = E.n_step_bootstrapped_returns(r, d, v, n)
    np.testing.assert_allclose(ours, ref_n_step(r, d, v, n), rtol=1e-5, atol=1e-5)
    theirs = jax.vmap(rlax.n_step_bootstrapped_returns, in_axes=(1, 1, 1, None), out_axes=1)(
        r, d, v, n)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # Per-step λ, as rlax defines it.
    lam = rng.uniform(size=(T, B)).astype(np.float32)
    ours = E.n_step_bootstrapped_returns(r, d, v, n, lam)
    theirs = jax.vmap(rlax.n_step_bootstrapped_returns, in_axes=(1, 1, 1, None, 1), out_axes=1)(
        r, d, v, n, lam)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_episode_aware_n_step_stops_at_episode_ends():
    rng = np.random.default_rng(6)
    T, B, gamma, n = 20, 3, 0.9, 4
    r, _, nv, term, trunc = random_window(rng, (T, B), 0.15, 0.15)
    ours = np.asarray(E.episode_aware_n_step_returns(r, nv, term, trunc, gamma, n))
    # Reference: sum rewards until n steps, an episode end, or the window end; bootstrap unless the
    # last step taken was a termination.
    for b in range(B):
        for t in range(T):
            acc, scale, k = 0.0, 1.0, t
            while True:
                acc += scale * r[k, b]
                if term[k, b]:
                    break
                if trunc[k, b] or k == T - 1 or k - t + 1 == n:
                    acc += scale * gamma * nv[k, b]
                    break
                scale *= gamma
                k += 1
            assert ours[t, b] == pytest.approx(acc, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_vtrace_matches_rlax(method):
    rng = np.random.default_rng(7)
    T, B = 30, 4
    v_tm1 = rng.normal(size=(T, B)).astype(np.float32)
    v_t = rng.normal(size=(T, B)).astype(np.float32)
    r = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.99 * (rng.random((T, B)) > 0.1)).astype(np.float32)
    rho = np.exp(0.5 * rng.normal(size=(T, B))).astype(np.float32)
    for lam in (1.0, 0.9):
        ours = E.vtrace(v_tm1, v_t, r, d, rho, lam, 1.0, method=method)
        theirs = jax.vmap(rlax.vtrace, in_axes=(1, 1, 1, 1, 1, None), out_axes=1)(
            v_tm1, v_t, r, d, rho, lam)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_vtrace_sample_mask_by_hand():
    # Masked step 1 passes e_2 through: e = (δ_0 + γ c e_1, e_2, δ_2) with e_1 = e_2 = δ_2.
    v_tm1, v_t = np.zeros(3, np.float32), np.zeros(3, np.float32)
    r, d, rho = np.array([1.0, 5.0, 2.0], np.float32), np.full(3, 0.5, np.float32), np.ones(3)
    ours = E.vtrace(v_tm1, v_t, r, d, rho.astype(np.float32), 1.0, 1.0, True,
                    np.array([True, False, True]))
    np.testing.assert_allclose(ours, [1.0 + 0.5 * 2.0, 2.0, 2.0])


@pytest.mark.parametrize("method", METHODS)
def test_vtrace_sample_mask_matches_rlax(method):
    rng = np.random.default_rng(11)
    T, B = 30, 4
    v_tm1, v_t, r = (rng.normal(size=(T, B)).astype(np.float32) for _ in range(3))
    d = (0.99 * (rng.random((T, B)) > 0.1)).astype(np.float32)
    rho = np.exp(0.5 * rng.normal(size=(T, B))).astype(np.float32)
    mask = rng.random((T, B)) > 0.3
    for lam in (1.0, 0.9):
        ours = E.vtrace(v_tm1, v_t, r, d, rho, lam, 1.0, True, mask, method=method)
        theirs = jax.vmap(rlax.vtrace, in_axes=(1, 1, 1, 1, 1, None, None, None, 1),
                          out_axes=1)(v_tm1, v_t, r, d, rho, lam, 1.0, True, mask)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_rlax_named_estimators_accept_rlax_signatures():
    """Every estimator named like an rlax function takes rlax's parameters, in rlax's order."""
    import inspect

    for name in ("discounted_returns", "lambda_returns", "n_step_bootstrapped_returns",
                 "truncated_generalized_advantage_estimation", "vtrace"):
        ours = list(inspect.signature(getattr(E, name)).parameters)
        theirs = list(inspect.signature(getattr(rlax, name)).parameters)
        assert ours[:len(theirs)] == theirs, (name, ours, theirs)


# ---------------------------------------------------------------------------------------------
# 5. Scan and associative scan agree; jit, vmap, grad, dtypes, errors.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 3, 128, 1000])
def test_scan_equals_associative_float32(T):
    rng = np.random.default_rng(T)
    r, v, nv, term, trunc = random_window(rng, (T, 8), 0.02, 0.02)
    a_scan, t_scan = gae_jit(r, v, nv, term, trunc, 0.99, 0.95, method="scan")
    a_assoc, t_assoc = gae_jit(r, v, nv, term, trunc, 0.99, 0.95, method="associative")
    scale = np.maximum(np.abs(np.asarray(a_scan)), 1.0)
    assert np.max(np.abs(np.asarray(a_scan) - np.asarray(a_assoc)) / scale) < 1e-5
    scale = np.maximum(np.abs(np.asarray(t_scan)), 1.0)
    assert np.max(np.abs(np.asarray(t_scan) - np.asarray(t_assoc)) / scale) < 1e-5


@settings(max_examples=25, deadline=None)
@given(
    T=st.sampled_from([1, 2, 5, 24]),
    lam=st.floats(0.0, 1.0),
    gamma=st.floats(0.0, 1.0),
    p_end=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_property_gae_reference_any_window(T, lam, gamma, p_end, seed):
    rng = np.random.default_rng(seed)
    r, v, nv, term, trunc = random_window(rng, (T, 3), p_end, p_end)
    ref_adv, _ = ref_gae(r, v, nv, term, trunc, gamma, lam)
    for method in METHODS:
        adv, _ = gae_jit(r, v, nv, term, trunc, gamma, lam, method=method)
        np.testing.assert_allclose(adv, ref_adv, rtol=2e-5, atol=2e-5)


def test_jit_vmap_and_grad():
    rng = np.random.default_rng(8)
    r, v, nv, term, trunc = random_window(rng, (10, 3), 0.1, 0.1)
    f = lambda v: E.gae(r, v, nv, term, trunc, 0.99, 0.95)[0]
    np.testing.assert_allclose(jax.jit(f)(v), f(v), rtol=1e-6)
    # vmap over an extra leading sweep axis of λ.
    lams = jnp.array([0.0, 0.5, 1.0])
    batched = jax.vmap(lambda lam: E.gae(r, v, nv, term, trunc, 0.99, lam)[0])(lams)
    for i, lam in enumerate([0.0, 0.5, 1.0]):
        np.testing.assert_allclose(batched[i], E.gae(r, v, nv, term, trunc, 0.99, lam)[0],
                                   rtol=1e-5, atol=1e-6)
    for method in METHODS:
        loss = lambda v, nv: jnp.sum(E.gae(r, v, nv, term, trunc, 0.99, 0.9, method=method)[0] ** 2)
        grads = jax.grad(loss, argnums=(0, 1))(jnp.asarray(v), jnp.asarray(nv))
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
        loss = lambda rr: jnp.sum(
            E.lambda_returns(rr, 0.9 * jnp.ones_like(rr), nv, 0.5, method=method))
        assert bool(jnp.all(jnp.isfinite(jax.grad(loss)(jnp.asarray(r)))))
    assert bool(jnp.all(jnp.isfinite(jax.grad(
        lambda vv: jnp.sum(E.n_step_bootstrapped_returns(r, 0.9 * jnp.ones_like(r), vv, 3)))(
            jnp.asarray(v)))))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float64])
def test_dtype_is_kept(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(9)
        r, v, nv, term, trunc = random_window(rng, (6, 2), 0.1, 0.1)
        r, v, nv = (jnp.asarray(x, dtype) for x in (r, v, nv))
        d = jnp.full((6, 2), 0.9, dtype)
        for method in METHODS:
            adv, targets = E.gae(r, v, nv, term, trunc, 0.99, 0.95, method=method)
            assert adv.dtype == dtype and targets.dtype == dtype
            assert E.lambda_returns(r, d, nv, 0.5, method=method).dtype == dtype
            assert E.discounted_returns(r, d, nv, method=method).dtype == dtype
            assert E.vtrace(v, nv, r, d, jnp.ones_like(r), method=method).dtype == dtype
        assert E.n_step_bootstrapped_returns(r, d, nv, 3).dtype == dtype
        if dtype == jnp.float64:
            ref_adv, _ = ref_gae(r, v, nv, term, trunc, 0.99, 0.95)
            np.testing.assert_allclose(E.gae(r, v, nv, term, trunc, 0.99, 0.95)[0], ref_adv,
                                       rtol=1e-12)


def test_bad_inputs_are_rejected():
    r = jnp.ones((5, 2))
    with pytest.raises(AssertionError):
        E.lambda_returns(r, jnp.ones((5, 3)), r)
    with pytest.raises(AssertionError):
        E.gae(r, r, r[:4], r > 0, r > 0, 0.9, 0.9)
    with pytest.raises(AssertionError):
        E.truncated_generalized_advantage_estimation(r, r, 0.9, r)  # values needs T+1 entries
    with pytest.raises(ValueError, match="lambda_"):
        E.gae(r, r, r, r > 0, r > 0, 0.9, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        E.gae(r, r, r, r > 0, r > 0, -0.1, 0.5)
    with pytest.raises(ValueError, match="method"):
        E.lambda_returns(r, r, r, method="fast")
    with pytest.raises(ValueError, match="positive"):
        E.n_step_bootstrapped_returns(r, r, r, 0)


# ---------------------------------------------------------------------------------------------
# 6. Estimator records built on the functions.
# ---------------------------------------------------------------------------------------------


class _HParams:
    gamma = 0.9
    lambda_ = 0.8


def _trajectory(rng, T=9, B=3):
    r, v, nv, term, trunc = random_window(rng, (T, B), 0.15, 0.15)
    return Trajectory(
        obs=jnp.zeros((T, B, 2)), action=jnp.zeros((T, B), jnp.int32), reward=jnp.asarray(r),
        terminated=jnp.asarray(term), truncated=jnp.asarray(trunc), value=jnp.asarray(v),
        next_value=jnp.asarray(nv), log_prob=jnp.zeros((T, B)), logits=jnp.zeros((T, B, 2)))


def test_registry_estimators_agree_with_functions():
    rng = np.random.default_rng(10)
    traj = _trajectory(rng)
    hp = _HParams()
    args = (traj.reward, traj.value, traj.next_value, traj.terminated, traj.truncated)
    ref_adv, ref_t = ref_gae(*args, hp.gamma, hp.lambda_)
    for name in ("gae", "lambda_returns"):
        credit = E.make_estimator(name).assign({}, traj, hp, KEY)
        np.testing.assert_allclose(credit.advantage, ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(credit.value_target, ref_t, rtol=1e-5, atol=1e-5)
    _, mc_targets = ref_gae(*args, hp.gamma, 1.0)
    np.testing.assert_allclose(E.make_estimator("mc").assign({}, traj, hp, KEY).value_target,
                               mc_targets, rtol=1e-5, atol=1e-5)
    # n-step with a horizon longer than the window equals Monte Carlo.
    np.testing.assert_allclose(
        E.make_estimator("nstep", n=50).assign({}, traj, hp, KEY).value_target, mc_targets,
        rtol=1e-5, atol=1e-5)
    est = E.make_estimator("gae")
    assert not est.learned and not est.all_action
    loss, metrics = est.loss(est.init(jax.random.key(0), traj), traj, hp, KEY)
    assert float(loss) == 0.0 and metrics == {}


def test_registry_errors():
    with pytest.raises(ValueError, match="Did you mean gae"):
        E.make_estimator("gea")
    with pytest.raises(ValueError, match="positive"):
        E.make_estimator("nstep", n=0)
    with pytest.raises(ValueError, match="bad options"):
        E.make_estimator("gae", colour="red")
    # A misspelt option: one line with the closest name, and no repr of the engine's context.
    with pytest.raises(ValueError, match=r"no option 'modle' \(did you mean 'model'\?\)") as err:
        E.make_estimator("hca_return", {"env": object(), "horizon": 3}, modle="oracle")
    assert "object at" not in str(err.value) and "\n" not in str(err.value)

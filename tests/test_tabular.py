"""Exact ground truth (jaxcredit.exact.tabular): hand-checked values, identities, float64 references
and Monte-Carlo checks of the sampler."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.exact import hindsight, tabular
from jaxcredit.envs.grid import GridWorld
from jaxcredit.envs.hca_tasks import AmbiguousBandit, DelayedEffect, Shortcut


def np_evaluate(mdp, pi, gamma, sweeps=2000):
    """float64 iterative policy evaluation with plain loops over states (independent reference)."""
    p = np.asarray(mdp.transition, np.float64)
    r = np.asarray(mdp.reward, np.float64)
    term = np.asarray(mdp.terminal)
    pi = np.asarray(pi, np.float64)
    num_states, num_actions = r.shape
    v = np.zeros(num_states)
    for _ in range(sweeps):
        new = np.zeros(num_states)
        for s in range(num_states):
            if term[s]:
                continue
            for a in range(num_actions):
                new[s] += pi[s, a] * (r[s, a] + gamma * p[s, a] @ v)
        if np.max(np.abs(new - v)) < 1e-12:
            return new
        v = new
    return v


def np_objective(p, r, term, initial, theta, gamma):
    """float64 J(θ) by a direct linear solve (numpy), for finite differences."""
    pi = np.exp(theta - theta.max(1, keepdims=True))
    pi /= pi.sum(1, keepdims=True)
    p_pi = np.einsum("sa,sat->st", pi, p) * (1.0 - term)[:, None]
    v = np.linalg.solve(np.eye(len(term)) - gamma * p_pi, np.sum(pi * r, 1))
    return initial @ v


def random_pi(key, mdp):
    return tabular.softmax_policy(jax.random.normal(key, (mdp.num_states, mdp.num_actions)))


# --------------------------------------------------------------------------------------------
# Tiny hand-checked cases
# --------------------------------------------------------------------------------------------


def two_state_mdp():
    """s0 --a0--> s1 (r = 1); s0 --a1--> s0 (r = 0) w.p. .5, s1 (r = 2) w.p. .5; s1 terminal."""
    transition = np.zeros((2, 2, 2), np.float32)
    transition[0, 0, 1] = 1.0
    transition[0, 1] = [0.5, 0.5]
    reward = np.zeros((2, 2, 2), np.float32)
    reward[0, 0, 1] = 1.0
    reward[0, 1, 1] = 2.0
    return tabular.make_tabular_mdp(transition, reward, [1.0, 0.0], [False, True], np.eye(2))


def test_two_state_hand_values():
    mdp = two_state_mdp()
    np.testing.assert_allclose(mdp.reward, [[1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(mdp.reward_std, [[0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(mdp.transition[1], np.eye(2)[[1, 1]])  # absorbing
    pi = jnp.array([[0.5, 0.5], [0.5, 0.5]])
    # V(s0) = 1 + .9 * .25 V(s0)  ->  V = 1 / (1 - .225).
    v0 = 1.0 / (1.0 - 0.225)
    np.testing.assert_allclose(tabular.state_values(mdp, pi, 0.9), [v0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(tabular.action_values(mdp, pi, 0.9)[0], [1.0, 1.0 + 0.45 * v0],
                               rtol=1e-6)
    # Occupancy of s0: Σ_t (.9 · .25)^t; s1 is reached (once) with total weight .9 (.5 + .25 d0).
    d0 = 1.0 / (1.0 - 0.225)
    np.testing.assert_allclose(tabular.discounted_occupancy(mdp, pi, 0.9),
                               [d0, 0.9 * 0.75 * d0], rtol=1e-6)
    # Undiscounted, the episode still ends: V = 1 / (1 - .25).
    np.testing.assert_allclose(tabular.state_values(mdp, pi, 1.0)[0], 4.0 / 3.0, rtol=1e-6)


def test_ambiguous_bandit_closed_forms():
    env = AmbiguousBandit()
    mdp = env.tabular_mdp()
    pi = tabular.uniform_policy(mdp)
    np.testing.assert_allclose(tabular.action_values(mdp, pi, 1.0)[0], [1.9, 1.1], atol=1e-6)
    np.testing.assert_allclose(tabular.state_values(mdp, pi, 1.0)[0], 1.5, atol=1e-6)
    np.testing.assert_allclose(tabular.advantages(mdp, pi, 1.0)[0], [0.4, -0.4], atol=1e-6)
    # The ambiguous bandit (Harutyunyan et al. 2019): h(HI | z) and the ratios π/h.
    z = jnp.array([-1.0, 0.0, 1.0, 1.5, 2.0, 3.0, 4.0])
    h = hindsight.bandit_return_hindsight(mdp, pi, z)[:, 0]  # [Z, A] at the start state
    np.testing.assert_allclose(h[:, 0], [0.2981, 0.3714, 0.4557, 0.5, 0.5443, 0.6286, 0.7019],
                               atol=1e-4)
    np.testing.assert_allclose(0.5 / h[:, 0], [1.6771, 1.3463, 1.0971, 1.0, 0.9187, 0.7954,
                                               0.7124], atol=1e-4)
    np.testing.assert_allclose(0.5 / h[:, 1], [0.7124, 0.7954, 0.9187, 1.0, 1.0971, 1.3463,
                                               1.6771], atol=1e-4)
    np.testing.assert_allclose(jnp.sum(h, -1), 1.0, atol=1e-6)


def test_ambiguous_bandit_return_hca_recovers_advantage():
    """E_{Z|a}[(1 − π(a)/h(a|Z)) Z] = A(a) = ±0.4 (Harutyunyan et al. 2019, Thm 2), Monte Carlo."""
    mdp = AmbiguousBandit().tabular_mdp()
    pi = tabular.uniform_policy(mdp)
    batch = tabular.sample_episodes(mdp, pi, jax.random.PRNGKey(0), 200_000, 2)
    assert batch.terminated[0].all() and not batch.valid[1].any()
    z, a = batch.reward[0], batch.action[0]
    h = hindsight.bandit_return_hindsight(mdp, pi, z)[:, 0]
    h_taken = jnp.take_along_axis(h, a[:, None], 1)[:, 0]
    weighted = np.asarray((1.0 - 0.5 / h_taken) * z)
    a = np.asarray(a)
    for action, expected in ((0, 0.4), (1, -0.4)):
        samples = weighted[a == action]
        se = samples.std() / np.sqrt(samples.size)
        assert abs(samples.mean() - expected) < 4.5 * se


# --------------------------------------------------------------------------------------------
# Against a float64 reference
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_env", [lambda: Shortcut(6), lambda: DelayedEffect(5),
                                      lambda: GridWorld(1)], ids=["shortcut", "delayed", "grid"])
def test_values_match_float64_loops(make_env):
    env = make_env()
    mdp = env.tabular_mdp(env.default_params)
    pi = random_pi(jax.random.PRNGKey(1), mdp)
    for gamma in (0.9, 0.99):
        ref = np_evaluate(mdp, pi, gamma)
        v = tabular.state_values(mdp, pi, gamma)
        np.testing.assert_allclose(v, ref, rtol=2e-4, atol=2e-4)
        q = tabular.action_values(mdp, pi, gamma)
        np.testing.assert_allclose(jnp.sum(pi * q, -1), v, rtol=1e-4, atol=1e-4)
        # J = Σ_s d(s) r_π(s).
        d = tabular.discounted_occupancy(mdp, pi, gamma)
        np.testing.assert_allclose(d @ jnp.sum(pi * mdp.reward, -1), mdp.initial @ v, rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("make_env", [lambda: Shortcut(5), lambda: GridWorld(1)],
                         ids=["shortcut", "grid"])
def test_policy_gradient_matches_finite_differences_and_autodiff(make_env):
    env = make_env()
    mdp = env.tabular_mdp(env.default_params)
    gamma = 0.9
    theta = 0.5 * jax.random.normal(jax.random.PRNGKey(3), (mdp.num_states, mdp.num_actions))
    grad = tabular.policy_gradient(mdp, theta, gamma)
    np.testing.assert_allclose(grad, jax.grad(tabular.objective, 1)(mdp, theta, gamma),
                               rtol=1e-3, atol=1e-4)
    p, r = np.asarray(mdp.transition, np.float64), np.asarray(mdp.reward, np.float64)
    term, init = np.asarray(mdp.terminal, np.float64), np.asarray(mdp.initial, np.float64)
    th = np.asarray(theta, np.float64)
    fd = np.zeros_like(th)
    eps = 1e-5
    for s in range(th.shape[0]):
        for a in range(th.shape[1]):
            plus, minus = th.copy(), th.copy()
            plus[s, a] += eps
            minus[s, a] -= eps
            fd[s, a] = (np_objective(p, r, term, init, plus, gamma)
                        - np_objective(p, r, term, init, minus, gamma)) / (2 * eps)
    scale = np.abs(fd).max()
    assert scale > 1e-2
    np.testing.assert_allclose(np.asarray(grad), fd, atol=2e-4 * max(scale, 1.0))


# --------------------------------------------------------------------------------------------
# Hindsight distributions
# --------------------------------------------------------------------------------------------


def test_delayed_effect_long_chain_values_and_hindsight():
    n, gamma = 300, 0.99
    env = DelayedEffect(n)
    mdp = env.tabular_mdp(env.default_params)
    assert mdp.num_states == 2 * n + 3
    pi = random_pi(jax.random.PRNGKey(2), mdp)
    q = tabular.action_values(mdp, pi, gamma)
    np.testing.assert_allclose(q[0, 0] - q[0, 1], 2 * gamma**n, rtol=1e-4)
    h = hindsight.state_hindsight(mdp, pi, gamma)
    np.testing.assert_allclose(jnp.sum(h, -1), 1.0, atol=1e-5)
    # The final state reveals the first action; a middle state of branch b reveals b.
    final0, final1 = 2 * n + 1, 2 * n + 2
    np.testing.assert_allclose(h[0, final0], [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(h[0, final1], [0.0, 1.0], atol=1e-6)
    # In the middle, actions change nothing: h equals the policy for every future state.
    middle = np.arange(1, 2 * n + 1)
    np.testing.assert_allclose(h[middle], jnp.broadcast_to(pi[middle][:, None, :], h[middle].shape),
                               atol=1e-5)


@pytest.mark.parametrize("make_env", [lambda: GridWorld(1), lambda: Shortcut(6)],
                         ids=["grid", "shortcut"])
def test_state_hindsight_identity(make_env):
    """Q(s, a) = r(s, a) + γ Σ_s' d_γ(s'|s) h(a|s, s')/π(a|s) r_π(s') (HCA, Thm 1, time-free h)."""
    env = make_env()
    mdp = env.tabular_mdp(env.default_params)
    gamma = 0.9
    pi = random_pi(jax.random.PRNGKey(4), mdp)
    h = hindsight.state_hindsight(mdp, pi, gamma)
    np.testing.assert_allclose(jnp.sum(h, -1), 1.0, atol=1e-5)
    d_future = jnp.einsum("sa,sat->st", pi, tabular.future_occupancy(mdp, pi, gamma))
    r_pi = jnp.sum(pi * mdp.reward, -1)
    q_hca = mdp.reward + gamma * jnp.einsum("st,sta,t->sa", d_future, h / pi[:, None, :], r_pi)
    np.testing.assert_allclose(q_hca, tabular.action_values(mdp, pi, gamma), rtol=1e-3,
                               atol=1e-3)


def test_return_hindsight_shortcut_exact_and_monte_carlo():
    env = Shortcut(5)
    mdp = env.tabular_mdp()
    pi = random_pi(jax.random.PRNGKey(5), mdp)
    support = jnp.arange(-6.0, 3.0)
    p_sa, p_s = hindsight.return_distribution(mdp, pi, support, horizon=8)
    np.testing.assert_allclose(jnp.sum(p_sa, -1)[:4], 1.0, atol=1e-6)
    # Mean of the return distribution = Q with γ = 1.
    np.testing.assert_allclose(p_sa @ support, tabular.action_values(mdp, pi, 1.0), atol=1e-5)
    # Hand value: the shortcut from 0 returns exactly 0.
    np.testing.assert_allclose(p_sa[0, 0], (support == 0).astype(np.float32))
    h = hindsight.return_hindsight(mdp, pi, support, horizon=8)  # [S, Z, A]
    np.testing.assert_allclose(jnp.sum(h, -1), 1.0, atol=1e-6)
    # Monte Carlo: P(A_0 = a | Z = z) from sampled episodes.
    batch = tabular.sample_episodes(mdp, pi, jax.random.PRNGKey(6), 100_000, 6)
    assert not batch.truncated.any()
    z = np.asarray(batch.reward.sum(0))
    a0 = np.asarray(batch.action[0])
    for value in (0.0, -1.0, -2.0):
        at_z = z == value
        assert at_z.sum() > 1000
        empirical = np.mean(a0[at_z] == 0)
        se = np.sqrt(empirical * (1 - empirical) / at_z.sum())
        assert abs(empirical - float(h[0, int(value + 6), 0])) < 4.5 * se + 1e-6
    freq = np.array([np.mean(z == v) for v in np.asarray(support)])
    np.testing.assert_allclose(freq, p_s[0], atol=0.006)


# --------------------------------------------------------------------------------------------
# Sampler against exact values
# --------------------------------------------------------------------------------------------


def test_sample_episodes_monte_carlo_values():
    env = DelayedEffect(8)
    params = env.default_params.replace(sigma=1.0)
    mdp = env.tabular_mdp(params)
    pi = random_pi(jax.random.PRNGKey(7), mdp)
    gamma = 0.95
    batch = tabular.sample_episodes(mdp, pi, jax.random.PRNGKey(8), 100_000, 9)
    assert batch.reward.shape == (9, 100_000) and batch.terminated[-1].all()
    g = np.asarray(tabular.discounted_returns(batch, gamma))
    exact = float(tabular.state_values(mdp, pi, gamma)[0])
    assert abs(g.mean() - exact) < 4.5 * g.std() / np.sqrt(g.size)
    # Reward noise std: sqrt(8 · 1 + 0) per episode, undiscounted.
    total = np.asarray(batch.reward.sum(0))
    sign = 1.0 - 2.0 * np.asarray(batch.action[0])
    assert abs((total - sign).std() - np.sqrt(8.0)) < 0.05
    # Truncation: a window shorter than the episode marks the last step truncated.
    short = tabular.sample_episodes(mdp, pi, jax.random.PRNGKey(9), 16, 4)
    assert short.truncated[-1].all() and not short.terminated.any()


def test_vmapped_exact_values_call_lapack_one_matrix_at_a_time():
    """Two batched LAPACK calls at once deadlocked XLA:CPU (docs/xla_cpu_hang.md): a vmapped
    policy evaluation and its gradient must compile to unbatched solves only, with the numbers
    and the gradient of ``jnp.linalg.solve``."""
    import re

    keys = jax.random.split(jax.random.key(0), 3)
    a = 3 * jnp.eye(4) + jax.random.normal(keys[0], (4, 4))
    stack = jnp.stack([a, a + 0.1, a - 0.2])
    rhs = jax.random.normal(keys[1], (3, 4))
    loss = lambda solve: lambda m, r: jnp.sin(solve(m, r)).sum()  # noqa: E731
    for fn in (jax.vmap(tabular.linear_solve), jax.vmap(jax.grad(loss(tabular.linear_solve)))):
        text = jax.jit(fn).lower(stack, rhs).compile().as_text()
        calls = [line for line in text.splitlines() if "lapack_" in line and "custom-call" in line]
        assert calls and not any(re.search(r"f32\[3,4", line.split("custom-call")[0])
                                 for line in calls), calls
    np.testing.assert_allclose(jax.vmap(tabular.linear_solve)(stack, rhs),
                               jnp.linalg.solve(stack, rhs[..., None])[..., 0], atol=1e-5)
    np.testing.assert_allclose(jax.vmap(jax.grad(loss(tabular.linear_solve)))(stack, rhs),
                               jax.vmap(jax.grad(loss(jnp.linalg.solve)))(stack, rhs), atol=1e-5)

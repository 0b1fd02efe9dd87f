"""The law of the return on a grid (jaxcredit.exact.return_law): a hand-checked case, equality with
the dense ``return_distribution`` where that is exact, moments against dynamic programming,
the Gaussian hindsight against AmbiguousBandit's closed form, and Monte-Carlo checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.exact import hindsight, return_grid, tabular
from jaxcredit.exact import return_law as rl
from jaxcredit.envs.hca_tasks import AmbiguousBandit, DelayedEffect, Shortcut
from jaxcredit.envs.key_to_door import OPEN_DOOR, PICK_KEY, KeyToDoor
from jaxcredit.envs.tree_mdp import TreeMDP


def random_pi(key, mdp, scale=1.0):
    theta = scale * jax.random.normal(key, (mdp.num_states, mdp.num_actions))
    return tabular.softmax_policy(theta)


def live(mdp):
    return ~np.asarray(mdp.terminal)


def moments(p, support):
    mean = p @ support
    return mean, p @ support**2 - mean**2


# --------------------------------------------------------------------------------------------
# Hand-checked
# --------------------------------------------------------------------------------------------


def test_shortcut_three_states_by_hand():
    """Shortcut(3), uniform π. From 0: shortcut → return 0; long → state 1 w.p. .9 (reward −1,
    then every action reaches the goal paying 0) or the goal w.p. .1 (reward 0). So
    Z(0, long) = −1 w.p. .9, 0 w.p. .1; Z(0) = 0 w.p. .55, −1 w.p. .45;
    h(short | 0, z = 0) = .5 / .55 = 10/11."""
    mdp = Shortcut(3).tabular_mdp()
    pi = tabular.uniform_policy(mdp)
    plan = return_grid.plan_return_grid(mdp, horizon=3)
    # Returns lie in [−1, 0]; one spare atom on each side.
    np.testing.assert_array_equal(plan.support, [-2.0, -1.0, 0.0, 1.0])
    assert (plan.zero_index, plan.schedule, plan.reward_kind) == (2, "levels", "deterministic")
    p_sa, p_s = rl.return_law(mdp, pi, plan)
    np.testing.assert_allclose(p_sa[0], [[0, 0, 1, 0], [0, 0.9, 0.1, 0]], atol=1e-7)
    np.testing.assert_allclose(p_sa[1], [[0, 0, 1, 0], [0, 0, 1, 0]], atol=1e-7)
    np.testing.assert_allclose(p_s[0], [0, 0.45, 0.55, 0], atol=1e-7)
    np.testing.assert_array_equal(p_sa[2], 0.0)  # terminal: no (s, a), as return_distribution
    support = jnp.asarray(plan.support)
    h = rl.return_hindsight_at(p_sa, p_s, pi, support, jnp.zeros(5, jnp.int32),
                               jnp.array([0.0, -1.0, -0.5, 5.0, -1.5]))
    np.testing.assert_allclose(h[0], [10 / 11, 1 / 11], rtol=1e-6)
    np.testing.assert_allclose(h[1], [0.0, 1.0], atol=1e-7)
    # Halfway: p(z|short) = .5·0 + .5·1, p(z|long) = .5·.9 + .5·.1: equal, so h = π.
    np.testing.assert_allclose(h[2], [0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(h[3], [0.5, 0.5])  # unreachable: the prior
    # z = −1.5: only the long action reaches −1 (weight .5 of the neighbour at −1).
    np.testing.assert_allclose(h[4], [0.0, 1.0], atol=1e-7)


# --------------------------------------------------------------------------------------------
# Exact on deterministic grid-aligned MDPs: equal to the dense return_distribution
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["shortcut", "shortcut_truncated", "delayed", "tree"])
def test_equals_return_distribution_when_deterministic(case):
    if case.startswith("shortcut"):
        mdp, horizon = Shortcut(5).tabular_mdp(), (2 if case == "shortcut_truncated" else 8)
    elif case == "delayed":
        env = DelayedEffect(3)
        mdp, horizon = env.tabular_mdp(env.default_params.replace(sigma=0.0)), 4
    else:
        env = TreeMDP(depth=3, branching=3, state_overlap=1)
        mdp, horizon = env.tabular_mdp(), 3
    # Both schedules where both are exact (the tree: levels only, to keep the file fast).
    schedules = {"shortcut_truncated": ["sweep"], "tree": ["levels"]}.get(case, ["levels", "sweep"])
    plans = [return_grid.plan_return_grid(mdp, horizon, schedule=s) for s in schedules]
    # A horizon shorter than the episodes truncates them: only the sweep does that.
    assert return_grid.plan_return_grid(mdp, horizon).schedule == schedules[0]
    support = jnp.asarray(plans[0].support)
    for seed in range(2):
        pi = random_pi(jax.random.PRNGKey(seed), mdp, scale=1.5)
        ref_sa, ref_s = hindsight.return_distribution(mdp, pi, support, horizon)
        # hindsight.return_hindsight's table [S, Z, A], from the same law (one compile less).
        joint = np.asarray(pi)[:, :, None] * np.asarray(ref_sa)
        ref_s_np = np.asarray(ref_s)[:, None, :]
        ref_h = np.where(ref_s_np > 1e-12, joint / np.where(ref_s_np > 1e-12, ref_s_np, 1.0),
                         np.asarray(pi)[:, :, None]).transpose(0, 2, 1)
        for plan in plans:
            p_sa, p_s = rl.return_law(mdp, pi, plan)
            np.testing.assert_allclose(p_sa, ref_sa, atol=1e-6)
            np.testing.assert_allclose(p_s, ref_s, atol=1e-6)
            # Grid-aligned z: the hindsight is the table's, at every state and atom.
            states, atoms = np.meshgrid(np.arange(mdp.num_states), np.arange(support.shape[0]),
                                        indexing="ij")
            h = rl.return_hindsight_at(p_sa, p_s, pi, support, jnp.asarray(states),
                                       support[atoms])
            np.testing.assert_allclose(h, ref_h, atol=1e-5)


# --------------------------------------------------------------------------------------------
# KeyToDoor: discrete two-point apples
# --------------------------------------------------------------------------------------------


def key_to_door_policy(env, key):
    """A random policy that takes the key and opens the door more often than not."""
    theta = jax.random.normal(key, (env.num_states, 4))
    theta = theta.at[0, PICK_KEY].add(1.0).at[2 * (env.length - 2) + 1, OPEN_DOOR].add(1.0)
    return tabular.softmax_policy(theta)


def test_key_to_door_law_moments_schedules_and_budget():
    env = KeyToDoor(23)
    mdp = env.tabular_mdp()
    law = env.reward_law()
    plan = return_grid.plan_return_grid(mdp, env.length, law)
    # The sweep schedule with the law given as [S, A, S, J] (the reward given s' too, here the
    # same law since transitions are deterministic) computes the same law.
    sweep = return_grid.plan_return_grid(mdp, env.length, law, schedule="sweep")
    # Step = the low apple reward 0.1 (0.9 and 0.2 are multiples); returns from 0 to
    # 16 · 0.9 + 0.2 = 14.6, i.e. 146 steps, plus the spare atoms.
    assert plan.schedule == "levels" and plan.reward_kind == "discrete"
    np.testing.assert_allclose(plan.step, 0.1, rtol=1e-6)
    assert plan.num_atoms == 146 + 3 and plan.num_reward_atoms == 4
    support = jnp.asarray(plan.support)
    values, probs = law
    law4 = (values, probs[:, :, None, :] * mdp.transition[..., None])
    for seed in range(2):
        pi = key_to_door_policy(env, jax.random.PRNGKey(seed))
        p_sa, p_s = rl.return_law(mdp, pi, plan, law)
        np.testing.assert_allclose(rl.return_law(mdp, pi, sweep, law4)[0], p_sa, atol=1e-6)
        # (d) no mass leaves the planned grid.
        np.testing.assert_allclose(jnp.sum(p_sa, -1)[live(mdp)], 1.0, atol=1e-5)
        # Interpolation-free and mean-preserving: E[Z | s, a] = Q^π(s, a) with γ = 1.
        q = tabular.action_values(mdp, pi, 1.0)
        np.testing.assert_allclose((p_sa @ support)[live(mdp)], q[live(mdp)], atol=1e-4)
        # Returns are multiples of 0.1 (up to float32 rounding of the grid).
        np.testing.assert_allclose(p_s[0] @ support, tabular.state_values(mdp, pi, 1.0)[0],
                                   atol=1e-4)
        # The apple variance: 0.16 per picked apple (two-point ±0.4).
        _, var = moments(p_sa[2, 1], support)  # left apple at cell 1, picked
        _, var_skip = moments(p_sa[2, 0], support)
        np.testing.assert_allclose(var - var_skip, 0.16, atol=1e-3)
    with pytest.raises(ValueError, match="max_atoms"):
        return_grid.plan_return_grid(mdp, env.length, law, max_atoms=100)
    with pytest.raises(ValueError, match="reward_law"):
        rl.return_law(mdp, pi, plan)


def sample_returns(mdp, pi, law, rng, num_episodes, num_steps):
    """(first action, undiscounted return) of episodes sampled in numpy from the transitions and
    the discrete reward law (independent of the code under test; the env itself is checked
    against the same tables in test_envs_cocoa)."""
    transition = np.asarray(mdp.transition, np.float64)
    values, probs = (np.asarray(x, np.float64) for x in law)
    pi, terminal = np.asarray(pi, np.float64), np.asarray(mdp.terminal)

    def draw(p):  # one categorical draw per row of p [B, K]
        u = rng.random((p.shape[0], 1))
        return np.minimum((np.cumsum(p, -1) < u).sum(-1), p.shape[-1] - 1)

    state = np.full(num_episodes, int(np.argmax(np.asarray(mdp.initial))))
    returns = np.zeros(num_episodes)
    for t in range(num_steps):
        alive = ~terminal[state]
        action = draw(pi[state])
        if t == 0:
            first = action
        returns += np.where(alive, values[draw(probs[state, action])], 0.0)
        state = np.where(alive, draw(transition[state, action]), state)
    assert terminal[state].all()
    return first, returns


def test_key_to_door_monte_carlo_law_and_hindsight():
    """Two-point apples, 20k episodes: the law's mean and the exact-bin hindsight
    h(a | s0, z) = P(A_0 = a | Z = z) against empirical frequencies (within 4.5 s.e.)."""
    env = KeyToDoor(8)
    mdp = env.tabular_mdp()
    law = env.reward_law()
    plan = return_grid.plan_return_grid(mdp, env.length, law)
    support = jnp.asarray(plan.support)
    pi = key_to_door_policy(env, jax.random.PRNGKey(3))
    p_sa, p_s = rl.return_law(mdp, pi, plan, law)
    first, returns = sample_returns(mdp, pi, law, np.random.default_rng(4), 20_000, env.length)
    se = returns.std() / np.sqrt(returns.size)
    assert abs(returns.mean() - float(p_s[0] @ support)) < 4.5 * se
    np.testing.assert_allclose(p_sa[0] @ support, tabular.action_values(mdp, pi, 1.0)[0],
                               atol=1e-4)
    # Exact bins: every return is a multiple of the step.
    bins = np.round(returns / plan.step).astype(int)
    np.testing.assert_allclose(bins * plan.step, returns, atol=1e-4)
    frequency = np.bincount(bins + plan.zero_index, minlength=plan.num_atoms) / returns.size
    np.testing.assert_allclose(frequency, p_s[0], atol=0.012)
    values, counts = np.unique(bins, return_counts=True)
    checked = 0
    for k, count in zip(values, counts, strict=True):
        if count < 400:
            continue
        h = rl.return_hindsight_at(p_sa, p_s, pi, support, jnp.zeros((), jnp.int32),
                                   jnp.float32(k * plan.step))
        empirical = np.mean(first[bins == k] == PICK_KEY)
        se = np.sqrt(max(empirical * (1 - empirical), 1e-3) / count)
        assert abs(empirical - float(h[PICK_KEY])) < 4.5 * se, (k, empirical, h)
        checked += 1
    assert checked >= 5


# --------------------------------------------------------------------------------------------
# Gaussian rewards
# --------------------------------------------------------------------------------------------


def test_ambiguous_bandit_hindsight_close_to_closed_form():
    """Tolerance 5e-3 on h over z in [−3, 6]: the Gaussian sampled on a step-1/3 grid (σ = 1.5)
    has mean and variance exact to float precision; what is left is the linear interpolation of
    the density between grid points, relative error ≈ step²/8 · |φ''/φ| (≤ 4% at 3σ), of which
    the ratio h keeps less than 1% (3e-3 at most, measured)."""
    mdp = AmbiguousBandit().tabular_mdp()
    pi = jnp.array([[0.3, 0.7], [0.5, 0.5], [0.5, 0.5]])
    plan = return_grid.plan_return_grid(mdp, horizon=0)
    assert plan.reward_kind == "gaussian" and plan.noise == "grid"
    np.testing.assert_allclose(plan.step, 1.0 / 3.0)
    p_sa, p_s = rl.return_law(mdp, pi, plan)
    support = jnp.asarray(plan.support)
    # Mixture 0.9 N(2, 2.25) + 0.1 N(1, 2.25) for HI: mean 1.9, variance 2.25 + 0.09.
    mean, var = moments(p_sa[0], support)
    np.testing.assert_allclose(mean, [1.9, 1.1], atol=1e-5)
    np.testing.assert_allclose(var, [2.34, 2.34], atol=1e-4)
    z = jnp.linspace(-3.0, 6.0, 37) + 0.01  # mostly between grid points
    h = rl.return_hindsight_at(p_sa, p_s, pi, support, jnp.zeros(z.shape, jnp.int32), z)
    closed = hindsight.bandit_return_hindsight(mdp, pi, z)[:, 0]
    np.testing.assert_allclose(h, closed, atol=5e-3)
    # Gauss–Hermite atoms: mean exact, variance exact up to the interpolation's f(1 − f)·step²
    # (≤ step²/4); but the law is a comb of 7 spikes per arm, so h between them is far off.
    hermite = return_grid.plan_return_grid(mdp, horizon=0, noise="hermite", noise_points=7)
    p_gh, _ = rl.return_law(mdp, pi, hermite)
    mean_gh, var_gh = moments(p_gh[0], support)
    np.testing.assert_allclose(mean_gh, [1.9, 1.1], atol=1e-5)
    assert np.all((var_gh >= 2.34 - 1e-4) & (var_gh <= 2.34 + plan.step**2 / 4))


def test_delayed_effect_gaussian_law_traced_sigma_and_monte_carlo():
    """n = 3, σ = 0.5: Z(s0, a) = ±1 + N(0, 3σ²). Q exact, variance exact, jittable in σ, and the
    mean and hindsight against 20k sampled episodes (4.5 s.e.)."""
    env = DelayedEffect(3)
    params = env.default_params.replace(sigma=0.5)
    mdp = env.tabular_mdp(params)
    pi = random_pi(jax.random.PRNGKey(5), mdp)
    plan = return_grid.plan_return_grid(mdp, params.max_steps_in_episode)
    assert plan.schedule == "levels" and plan.step <= 0.5 / 4
    support = jnp.asarray(plan.support)
    p_sa, p_s = rl.return_law(mdp, pi, plan)
    np.testing.assert_allclose(jnp.sum(p_sa, -1)[live(mdp)], 1.0, atol=1e-5)
    mean, var = moments(p_sa[0], support)
    np.testing.assert_allclose(mean, tabular.action_values(mdp, pi, 1.0)[0], atol=1e-4)
    np.testing.assert_allclose(mean, [1.0, -1.0], atol=1e-4)
    np.testing.assert_allclose(var, [0.75, 0.75], atol=1e-4)
    # Traced σ and policy: one compiled program, vmapped over (σ, π).
    law_at = jax.jit(jax.vmap(lambda sigma, pi: rl.return_law(
        env.tabular_mdp(params.replace(sigma=sigma)), pi, plan)[0]))
    batched = law_at(jnp.array([0.5, 0.4]), jnp.stack([pi, tabular.uniform_policy(mdp)]))
    np.testing.assert_allclose(batched[0], p_sa, atol=1e-6)
    _, var_smaller = moments(batched[1][0], support)
    np.testing.assert_allclose(var_smaller, [0.48, 0.48], atol=1e-4)
    # Monte Carlo, sampled in numpy (independent of the MDP code, and no compilation): the first
    # action a0 ~ π(·|s0) fixes the ±1, then three N(0, σ²) rewards whatever the policy does.
    rng = np.random.default_rng(6)
    first = (rng.random(20_000) >= float(pi[0, 0])).astype(int)
    returns = 1.0 - 2.0 * first + 0.5 * rng.standard_normal((20_000, 3)).sum(-1)
    se = returns.std() / np.sqrt(returns.size)
    assert abs(returns.mean() - float(p_s[0] @ support)) < 4.5 * se
    for z in (-1.0, -0.3, 0.0, 0.4, 1.0):
        near = np.abs(returns - z) < 0.1
        h = rl.return_hindsight_at(p_sa, p_s, pi, support, jnp.zeros((), jnp.int32),
                                   jnp.float32(z))
        empirical = np.mean(first[near] == 0)
        se = np.sqrt(empirical * (1 - empirical) / near.sum())
        assert near.sum() > 300
        # The bin's width (0.2) adds a bias of order 0.005 in h: the + 0.01.
        assert abs(empirical - float(h[0])) < 4.5 * se + 0.01, (z, empirical, h)

"""Tests of hindsight credit assignment: hca_return, hca_state, c2a2c and the hindsight models.

1. hand-checked values of the pure credit functions (gate, mixture bound, clip, HCA ratio table);
2. identities: h = π gives zero HCA credit and a closed C2A2C gate;
3. Monte-Carlo checks against exact ground truth (AmbiguousBandit advantages ±0.4, sampled vs
   all-action forms, the support condition of the sampled form on DelayedEffect);
4. hca_state's chunked / sampled pairwise computation against a float64 plain-loop reference;
5. the hindsight models learn: their loss decreases on a fixed batch.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import diagnostics as D
from jaxcredit import envs
from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.agents.config import Hparams
from jaxcredit.exact import tabular
from jaxcredit.estimators import hca as H
from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import make_estimator
from jaxcredit.types import Trajectory

HP = Hparams.create(gamma=1.0, lambda_=0.9)

KEY = jax.random.key(1234)  # the stages' PRNG key (only sampling estimators use it)


# ---------------------------------------------------------------------------------------------
# 1. Pure functions, hand-checked
# ---------------------------------------------------------------------------------------------


def test_credit_gate_hand_checked():
    c = jnp.array([1.0, 1.05, 0.95, 1.2, 0.5, 3.0])
    np.testing.assert_allclose(H.credit_gate(c, 0.1, "hard"), [0, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(H.credit_gate(c, 0.1, "soft"), [0, 0.5, 0.5, 1, 1, 1], atol=1e-6)
    with pytest.raises(ValueError, match="gate"):
        H.credit_gate(c, 0.1, "medium")


def test_mixture_bounds_the_credit_ratio():
    pi = jnp.array([0.5, 0.5])
    h = jnp.array([1e-9, 1.0 - 1e-9])
    for mix, upper in ((0.5, 2.0), (0.75, 4.0), (0.9, 10.0)):
        c = H.credit_ratio(pi, H.mixed_hindsight(h, pi, mix))
        assert float(c.max()) <= upper + 1e-5
        # Lower end: π / (λ + (1 − λ)π).
        np.testing.assert_allclose(c.min(), 0.5 / (mix + (1 - mix) * 0.5), rtol=1e-5)
    # The all-action advantage is exactly λ times the unmixed one.
    z = jnp.array(3.0)
    h2 = jnp.array([0.2, 0.8])
    np.testing.assert_allclose(H.return_hca_all_action(pi, H.mixed_hindsight(h2, pi, 0.3), z),
                               0.3 * H.return_hca_all_action(pi, h2, z), rtol=1e-6)


def test_sampled_advantage_and_clip_hand_checked():
    pi_a = jnp.array([0.5, 0.5, 0.5])
    h_a = jnp.array([0.25, 0.5, 1.0])
    z = jnp.array([2.0, 7.0, -4.0])
    # (1 − π/h) Z = (1 − 2)·2, (1 − 1)·7, (1 − 0.5)·(−4)
    np.testing.assert_allclose(H.return_hca_sampled(pi_a, h_a, z), [-2.0, 0.0, -2.0])
    np.testing.assert_allclose(H.return_hca_sampled(pi_a, h_a, z, clip=0.4), [-0.8, 0.0, -1.6])
    # All-action: (h/π − 1) Z sums to zero under π.
    pi = jnp.array([[0.2, 0.3, 0.5]])
    h = jnp.array([[0.6, 0.3, 0.1]])
    adv = H.return_hca_all_action(pi, h, jnp.array([5.0]))
    np.testing.assert_allclose(adv, [[10.0, 0.0, -4.0]], rtol=1e-6)
    np.testing.assert_allclose(jnp.sum(pi * adv), 0.0, atol=1e-6)


def _bandit():
    env, params = envs.make("AmbiguousBandit")
    mdp = env.tabular_mdp(params)
    return mdp


def exact_return_hindsight(pi, env_name="AmbiguousBandit", **env_kwargs):
    """Params of the ``model="oracle"`` return hindsight: the exact h(a | s, Z) of π, γ = 1
    (the engine's ground truth)."""
    env, params = envs.make(env_name, **env_kwargs)
    gt = gt_lib.make_ground_truth(env, params, ("return_hindsight",))
    return gt_lib.exact_model_params("return_hindsight", gt, gt.mdp(), pi, 1.0)


def test_exact_bandit_hindsight_matches_the_hand_computed_table():
    """The ambiguous bandit of Harutyunyan et al. (2019): ε = 0.1, μ = (2, 1), σ = 1.5,
    uniform π."""
    mdp = _bandit()
    pi = tabular.uniform_policy(mdp)
    params = exact_return_hindsight(pi)
    z = jnp.array([-1.0, 0.0, 1.0, 1.5, 2.0, 3.0, 4.0])
    state = jnp.zeros((7,), jnp.int32)
    h = jax.nn.softmax(hm.return_oracle().logits(params, state, z, z, jnp.zeros((7, 2))))
    np.testing.assert_allclose(h[:, 0], [0.2981, 0.3714, 0.4557, 0.5, 0.5443, 0.6286, 0.7019],
                               atol=1e-4)
    np.testing.assert_allclose(0.5 / h[:, 0], [1.6771, 1.3463, 1.0971, 1.0, 0.9187, 0.7954, 0.7124],
                               atol=2e-4)


# ---------------------------------------------------------------------------------------------
# 2. h = π: no credit from hindsight, gate closed
# ---------------------------------------------------------------------------------------------


def _random_trajectory(key, num_steps=7, num_envs=3, num_states=5, num_actions=3):
    k = jax.random.split(key, 8)
    state = jax.random.randint(k[0], (num_steps, num_envs), 0, num_states)
    return Trajectory(
        obs=jax.nn.one_hot(state, num_states),
        action=jax.random.randint(k[1], (num_steps, num_envs), 0, num_actions),
        reward=jax.random.normal(k[2], (num_steps, num_envs)),
        terminated=jax.random.bernoulli(k[3], 0.2, (num_steps, num_envs)),
        truncated=jax.random.bernoulli(k[4], 0.1, (num_steps, num_envs)),
        value=jax.random.normal(k[5], (num_steps, num_envs)),
        next_value=jax.random.normal(k[6], (num_steps, num_envs)),
        log_prob=jnp.zeros((num_steps, num_envs)),
        logits=jax.random.normal(k[7], (num_steps, num_envs, num_actions)),
    ), state


def test_hindsight_equal_to_policy_gives_no_credit_and_closes_the_gate():
    traj, _ = _random_trajectory(jax.random.key(1))
    key = jax.random.key(2)
    for model, extra, forms in (
            ("mlp", {}, H.FORMS),
            ("tabular", {"num_states": 5, "z_grid": jnp.linspace(-3, 3, 7),
                         "policy_modulated": True}, ("sampled",))):
        for form in forms:
            est = make_estimator("hca_return", form=form, model=model, **extra)
            credit = est.assign(est.init(key, traj), traj, HP, KEY)
            np.testing.assert_allclose(credit.advantage, 0.0, atol=1e-5)
        for gate in H.GATES if model == "mlp" else ("hard",):
            est = make_estimator("c2a2c", gate=gate, model=model, **extra)
            credit = est.assign(est.init(key, traj), traj, HP, KEY)
            # Float rounding leaves |1 − c| ~ 1e-7: the hard gate is shut, the soft one nearly.
            tol = 0.0 if gate == "hard" else 1e-4
            np.testing.assert_allclose(credit.advantage, 0.0, atol=tol)
            assert float(credit.diagnostics["gate_open"]) <= tol
    # With an informative h the c2a2c gate opens and the credit is A2C's GAE where it is open.
    est = make_estimator("c2a2c", model="tabular", num_states=5, z_grid=jnp.linspace(-3, 3, 7))
    params = {"table": 3.0 * jax.random.normal(key, (5, 7, 3))}
    credit = est.assign(params, traj, HP, KEY)
    gae_adv, _ = make_estimator("gae").assign({}, traj, HP, KEY).advantage, None
    open_ = credit.advantage != 0
    assert 0 < float(open_.mean())
    np.testing.assert_allclose(credit.advantage[open_], gae_adv[open_], rtol=1e-6)


def test_bad_options_raise_value_errors():
    for name, opts in (("hca_return", {"form": "both"}), ("hca_return", {"mix": 0.0}),
                       ("hca_return", {"return_kind": "td"}), ("hca_return", {"clip": -1.0}),
                       ("c2a2c", {"threshold": 0.0}), ("c2a2c", {"gate": "open"}),
                       ("hca_state", {"pairs": "some"}), ("hca_state", {"chunk": 0}),
                       ("hca_state", {"model": "tabular"}), ("hca_return", {"bogus": 1})):
        with pytest.raises(ValueError):
            make_estimator(name, **opts)


# ---------------------------------------------------------------------------------------------
# 3. Monte-Carlo checks against exact ground truth
# ---------------------------------------------------------------------------------------------


def test_ambiguous_bandit_hca_advantage_averages_to_exact():
    """Uniform π: A = ±0.4. Sampled (per action taken) and all-action forms, exact hindsight."""
    mdp = _bandit()
    pi = tabular.uniform_policy(mdp)
    exact = exact_return_hindsight(pi)
    batch = tabular.sample_episodes(mdp, pi, jax.random.key(0), 200_000, 1)
    traj = D.episodes_to_trajectory(mdp, pi, batch, jnp.zeros(mdp.num_states))
    sampled = make_estimator("hca_return", model="oracle").assign(
        exact, traj, HP, KEY).advantage[0]
    all_action = make_estimator("hca_return", model="oracle", form="all_action").assign(
        exact, traj, HP, KEY).advantage[0]
    action = np.asarray(batch.action[0])
    for a, expected in ((0, 0.4), (1, -0.4)):
        x = np.asarray(sampled)[action == a]
        assert abs(x.mean() - expected) < 4 * x.std() / np.sqrt(x.size)
        y = np.asarray(all_action[:, a])
        assert abs(y.mean() - expected) < 4 * y.std() / np.sqrt(y.size)
    assert abs(x.mean() - expected) < 0.03


def test_sampled_and_all_action_forms_agree_in_expectation():
    """Same expected policy gradient on the bandit under a non-uniform policy (exact hindsight)."""
    mdp = _bandit()
    theta = jnp.array([[0.8, -0.4], [0.0, 0.0], [0.0, 0.0]])
    pi = tabular.softmax_policy(theta)
    exact = exact_return_hindsight(pi)
    batch = tabular.sample_episodes(mdp, pi, jax.random.key(3), 50_000, 1)
    traj = D.episodes_to_trajectory(mdp, pi, batch, jnp.zeros(mdp.num_states))
    true = tabular.policy_gradient(mdp, theta, 1.0)
    means = []
    for form in H.FORMS:
        adv = make_estimator("hca_return", model="oracle", form=form).assign(
            exact, traj, HP, KEY).advantage
        g = D.per_trajectory_gradients(adv, batch.state, batch.action, batch.valid, pi, 1.0)
        se = g.std(0) / np.sqrt(g.shape[0])
        np.testing.assert_array_less(jnp.abs(g.mean(0) - true), 4 * se + 1e-6)
        means.append(g.mean(0))
    np.testing.assert_allclose(means[0], means[1], atol=0.01)


def test_sampled_return_hca_needs_overlapping_return_supports():
    """DelayedEffect with σ = 0: the return reveals the first action, h(a|s0, Z) ∈ {0, 1}.

    The sampled form then gives (1 − π(a|s0))·Z = π(ā)·(±1), half of the exact advantage
    A(s0, a) = ±2π(ā); the all-action form stays exact: (h/π − 1)Z averages to ±2π(ā).
    """
    env, params = envs.make("DelayedEffect", n=2, sigma=0.0)
    mdp = env.tabular_mdp(params)
    theta = jnp.zeros((mdp.num_states, 2)).at[0].set(jnp.array([0.6, -0.2]))
    pi = tabular.softmax_policy(theta)
    table = exact_return_hindsight(pi, "DelayedEffect", n=2, sigma=0.0)
    batch = tabular.sample_episodes(mdp, pi, jax.random.key(4), 4_000, 3)
    traj = D.episodes_to_trajectory(mdp, pi, batch, jnp.zeros(mdp.num_states))
    est_s = make_estimator("hca_return", model="oracle")
    est_a = make_estimator("hca_return", model="oracle", form="all_action")
    sampled = est_s.assign(table, traj, HP, KEY).advantage[0]
    all_action = est_a.assign(table, traj, HP, KEY).advantage[0]
    p0, p1 = np.asarray(pi[0])
    exact = np.asarray(tabular.advantages(mdp, pi, 1.0)[0])
    np.testing.assert_allclose(exact, [2 * p1, -2 * p0], rtol=1e-5)
    a0 = np.asarray(batch.action[0]) == 0
    np.testing.assert_allclose(np.asarray(sampled)[a0], p1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(sampled)[~a0], -p0, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(all_action).mean(0), exact, atol=0.06)


# ---------------------------------------------------------------------------------------------
# 4. hca_state against a float64 plain-loop reference
# ---------------------------------------------------------------------------------------------


def ref_state_hca(traj, state, table, gamma, bootstrap):
    """Plain loops, float64: A[t,a] = (1[a=a_t]/π − 1) r̃_t + Σ_{k>t} γ^{k−t}(h/π − 1) r̃_k."""
    r = np.asarray(traj.reward, np.float64)
    term, trunc = np.asarray(traj.terminated), np.asarray(traj.truncated)
    nv = np.asarray(traj.next_value, np.float64)
    logits = np.asarray(traj.logits, np.float64)
    action, state = np.asarray(traj.action), np.asarray(state)
    num_steps, num_envs, num_actions = logits.shape
    table = np.asarray(table, np.float64)
    adv = np.zeros((num_steps, num_envs, num_actions))
    ce_sum, w_sum = 0.0, 0.0
    d_table = np.zeros_like(table)  # d(Σ w·CE)/d table: w (h − 1[a = a_t]) at (s_t, s_k)
    for n in range(num_envs):
        rt = r[:, n].copy()
        if bootstrap:
            for k in range(num_steps):
                if (trunc[k, n] or k == num_steps - 1) and not term[k, n]:
                    rt[k] += gamma * nv[k, n]
        for t in range(num_steps):
            pi = np.exp(logits[t, n] - logits[t, n].max())
            pi /= pi.sum()
            for a in range(num_actions):
                adv[t, n, a] = ((a == action[t, n]) / pi[action[t, n]] - 1.0) * rt[t]
            k = t + 1
            ended = term[t, n] or trunc[t, n]
            while k < num_steps and not ended:
                h = np.exp(table[state[t, n], state[k, n]])
                h /= h.sum()
                adv[t, n] += gamma ** (k - t) * (h / pi - 1.0) * rt[k]
                w = gamma ** (k - t - 1)
                ce_sum += -w * np.log(h[action[t, n]])
                w_sum += w
                d_table[state[t, n], state[k, n]] += w * (h - np.eye(num_actions)[action[t, n]])
                ended = term[k, n] or trunc[k, n]
                k += 1
    return adv, ce_sum / w_sum, d_table / w_sum


@pytest.mark.parametrize("bootstrap", [True, False])
def test_state_hca_chunked_equals_plain_reference(bootstrap):
    traj, state = _random_trajectory(jax.random.key(5), num_steps=9, num_envs=4)
    table = jax.random.normal(jax.random.key(6), (5, 5, 3))
    gamma = 0.9
    hp = Hparams.create(gamma=gamma, lambda_=0.9)
    ref_adv, ref_loss, ref_grad = ref_state_hca(traj, state, table, gamma, bootstrap)
    for chunk in ((1, 4) if bootstrap else (4,)):
        est = make_estimator("hca_state", model="tabular", num_states=5, chunk=chunk,
                             bootstrap=bootstrap, policy_modulated=False)
        params = {"table": table}
        np.testing.assert_allclose(est.assign(params, traj, hp, KEY).advantage, ref_adv,
                                   rtol=2e-4, atol=2e-4)
        np.testing.assert_allclose(est.loss(params, traj, hp, KEY)[0], ref_loss, rtol=1e-4)
        # The gradient the fit takes (hca.chunked_sum: value and gradient in one pass).
        value, grad = jax.value_and_grad(lambda p: est.loss(p, traj, hp, KEY)[0])(params)
        np.testing.assert_allclose(value, ref_loss, rtol=1e-4)
        np.testing.assert_allclose(grad["table"], ref_grad, rtol=1e-4, atol=1e-6)


def _plain_chunk_loss(params, rows, valid, x, labels):
    """A chunk's loss: rows, validity, a float and an integer row argument."""
    logits = jnp.tanh(x @ params["w"] + params["b"]) * params["scale"]
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1)[:, 0]
    return jnp.sum(valid * (rows + 1.0) * picked)


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_sum_gives_the_value_and_gradient_of_the_plain_sum(chunk):
    """7 rows in chunks of 3: a padded chunk, whose rows must not count."""
    key = jax.random.split(jax.random.key(0), 4)
    params = {"w": jax.random.normal(key[0], (5, 3)), "b": jax.random.normal(key[1], (3,)),
              "scale": jnp.asarray(1.5)}
    x = jax.random.normal(key[2], (7, 5))
    labels = jax.random.randint(key[3], (7,), 0, 3)

    def plain(p):
        return _plain_chunk_loss(p, jnp.arange(7), jnp.ones(7, bool), x, labels)

    def chunked(p):
        return H.chunked_sum(_plain_chunk_loss, p, 7, chunk, x, labels)

    value, grad = jax.value_and_grad(chunked)(params)
    ref_value, ref_grad = jax.value_and_grad(plain)(params)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    # A gradient entry is a float32 sum of 7 rows' terms with cancellation, added in another
    # order: jaxlib 0.11.2 is off by a relative 1.1e-5 where 0.10.2 met 1e-5. A row counted
    # twice or a padded row counted is off by O(1).
    jax.tree.map(lambda g, r: np.testing.assert_allclose(g, r, rtol=3e-5, atol=1e-7),
                 grad, ref_grad)
    # The cotangent scales the stored gradient; vmapped over a batch of parameters too.
    jax.tree.map(lambda g, r: np.testing.assert_allclose(g, -2.5 * r, rtol=3e-5, atol=1e-7),
                 jax.grad(lambda p: -2.5 * chunked(p))(params), ref_grad)
    batch = jax.tree.map(lambda v: jnp.stack([v, 2 * v]), params)
    per = jax.vmap(jax.grad(chunked))(batch)
    ref = jax.vmap(jax.grad(plain))(batch)
    jax.tree.map(lambda g, r: np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5), per, ref)


def test_relu_pair_logits_gradient_matches_autodiff():
    """The written-out gradient of the pair head, for the broadcasts both pair layouts use:
    grouped ([C, N, 1, H] + [U, H]) and pairwise ([C, 1, H] + [C, K, H])."""
    key = jax.random.split(jax.random.key(1), 6)
    kernel = jax.random.normal(key[0], (6, 4))
    bias = jax.random.normal(key[1], (4,))

    def plain(src, tgt, kernel, bias):
        return jax.nn.relu(src + tgt) @ kernel + bias

    for src_shape, tgt_shape in (((3, 2, 1, 6), (5, 6)), ((3, 1, 6), (3, 7, 6))):
        src = jax.random.normal(key[2], src_shape)
        tgt = jax.random.normal(key[3], tgt_shape)
        out = plain(src, tgt, kernel, bias)
        cotangent = jax.random.normal(key[4], out.shape)
        np.testing.assert_allclose(hm.relu_pair_logits(src, tgt, kernel, bias), out, rtol=1e-6)
        got = jax.vjp(hm.relu_pair_logits, src, tgt, kernel, bias)[1](cotangent)
        ref = jax.vjp(plain, src, tgt, kernel, bias)[1](cotangent)
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_state_hca_sampled_pairs_are_unbiased():
    traj, state = _random_trajectory(jax.random.key(7), num_steps=8, num_envs=1)
    model = hm.state_tabular(5)
    params = {"table": jax.random.normal(jax.random.key(8), (5, 5, 3))}
    idx = state[:, 0]
    episode = H.episode_index(traj.done[:, 0])
    args = (model, params, idx, idx, traj.logits[:, 0], traj.reward[:, 0], episode, 0.9)
    offsets, scale = H.all_pair_offsets(8)
    exact = H.state_hca_future_credit(*args, offsets, scale, chunk=3)

    def sampled(key):
        off, sc = H.sampled_pair_offsets(key, 8, 2)
        return H.state_hca_future_credit(*args, off, sc, chunk=3)

    estimates = jax.jit(jax.vmap(sampled))(jax.random.split(jax.random.key(9), 600))
    se = estimates.std(0) / np.sqrt(600)
    np.testing.assert_array_less(jnp.abs(estimates.mean(0) - exact), 5 * se + 1e-5)
    # The estimator record runs with sampled pairs at the same shapes.
    est = make_estimator("hca_state", model="tabular", num_states=5, pairs="sampled",
                         num_pairs=2, chunk=3, policy_modulated=False)
    out = est.assign(params, traj, HP, KEY).advantage
    assert out.shape == (8, 1, 3) and bool(jnp.all(jnp.isfinite(out)))


# ---------------------------------------------------------------------------------------------
# 5. The hindsight models learn
# ---------------------------------------------------------------------------------------------


def test_hindsight_model_losses_decrease_on_a_fixed_batch():
    env, params = envs.make("DelayedEffect", n=3, sigma=0.1)
    mdp = env.tabular_mdp(params)
    pi = tabular.uniform_policy(mdp)
    batch = tabular.sample_episodes(mdp, pi, jax.random.key(10), 128, 4)
    traj = D.episodes_to_trajectory(mdp, pi, batch, tabular.state_values(mdp, pi, 1.0))
    # c2a2c's loss is hca_return's (same model, same function), so it is not repeated here.
    for name in ("hca_return", "hca_state"):
        est = make_estimator(name, hidden=16 if name == "hca_state" else (16,))
        p0 = est.init(jax.random.key(11), traj)
        before = float(est.loss(p0, traj, HP, KEY)[0])
        _, after = jax.jit(lambda p: D.fit_hindsight(est, p, traj, HP, 40, 3e-2, KEY))(p0)
        # Uniform π: the initial (h = π) loss is log 2; the return / final state reveal a_0.
        np.testing.assert_allclose(before, np.log(2.0), rtol=1e-4)
        assert float(after) < 0.9 * before, (name, before, float(after))


@pytest.mark.parametrize("num_steps,chunk,gamma", [(8, 3, 0.9), (7, 3, 1.0), (10, 3, 0.0)])
def test_every_pair_on_the_triangle_equals_every_offset(num_steps, chunk, gamma):
    """The default "every later step" plan (offsets None: chunks paired with the steps after
    their first row, ``triangle_rows``) gives the credit, the loss and its gradient of the
    explicit offsets d = 1..T−1 (``all_pair_offsets``), with episode ends inside the window, at
    γ < 1, 1 and 0 (γ^(d−1) at the padded pairs must stay finite); (7, 3) has a last chunk with
    no later step at all, (10, 3) a band after the first with padded rows."""
    traj, _ = _random_trajectory(jax.random.key(11), num_steps=num_steps, num_envs=1)
    traj = traj.replace(reward=traj.reward * jax.random.bernoulli(
        jax.random.key(12), 0.6, traj.reward.shape))  # zero rewards for the mask
    obs, logits = traj.obs[:, 0], traj.logits[:, 0]
    episode = H.episode_index(traj.done[:, 0])
    assert int(episode[-1]) > 0  # an episode ends inside the window
    from jaxcredit.estimators import hypernet  # noqa: PLC0415
    model = hypernet.hypernet_hindsight(1, hidden=16)
    params = model.init(jax.random.key(13), obs, 3, obs)
    offsets, scale = H.all_pair_offsets(num_steps)

    def features(p):
        return model.source(p, obs), model.target(p, obs, traj.reward[:, 0])

    def credit(p, *plan):
        src, tgt = features(p)
        return H.state_hca_future_credit(model, p, src, tgt, logits, traj.reward[:, 0],
                                         episode, gamma, *plan, chunk=chunk)

    triangle = jax.jit(credit)(params)
    assert np.isfinite(triangle).all()
    np.testing.assert_allclose(triangle, jax.jit(credit)(params, offsets, scale),
                               rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(triangle).max()) > 0.01 or gamma == 0.0  # γ = 0: no later credit
    for mask in (False, True):
        def loss(p, *plan, mask=mask):
            src, tgt = features(p)
            ce, w = H.state_hca_pair_loss(model, p, src, tgt, logits, traj.action[:, 0],
                                          traj.reward[:, 0], episode, gamma, *plan, chunk=chunk,
                                          mask_zero_reward=mask)
            return ce / w, w

        value_and_grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
        (value, w), grad = value_and_grad(params)
        (ref_value, ref_w), ref_grad = value_and_grad(params, offsets, scale)
        assert np.isfinite(value) and all(np.isfinite(g).all() for g in jax.tree.leaves(grad))
        np.testing.assert_allclose(w, ref_w, rtol=1e-6)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        for g, r in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)


def test_every_pair_on_the_triangle_needs_no_more_memory_than_the_offsets():
    """The triangle's bands keep a loop over chunks: the pair loss's gradient needs no more
    temporaries than the loop over explicit offsets (XLA's compiled memory analysis). Unrolled
    chunks, one per band, took 2.4× as much here (2.6 MB against 1.1 MB)."""
    num_steps, num_envs, num_actions = 32, 16, 4
    k = jax.random.split(jax.random.key(21), 4)
    obs = jax.random.normal(k[0], (num_steps, num_envs, 8))
    logits = jax.random.normal(k[1], (num_steps, num_envs, num_actions))
    reward = jax.random.normal(k[2], (num_steps, num_envs))
    action = jax.random.randint(k[3], (num_steps, num_envs), 0, num_actions)
    episode = jnp.zeros((num_steps,), jnp.int32)
    model = hm.state_mlp(1, 32, True)
    params = model.init(jax.random.key(22), obs[:, 0], num_actions, obs[:, 0])

    def temp_bytes(*plan):
        def loss(p):
            def one(o, lg, a, r):
                src, tgt = model.source(p, o), model.target(p, o, r)
                return H.state_hca_pair_loss(model, p, src, tgt, lg, a, r, episode, 0.9, *plan,
                                             chunk=4)[0]
            return jax.vmap(one, in_axes=1)(obs, logits, action, reward).sum()
        compiled = jax.jit(jax.grad(loss)).lower(params).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    assert temp_bytes() <= temp_bytes(*H.all_pair_offsets(num_steps))


def test_every_pair_on_the_triangle_evaluates_about_half_the_pairs():
    """The triangle's point is the work it skips: h(·|s_t, s_k) is evaluated, counted at run
    time by a callback in the model, on ``rows × later steps`` per chunk, with a band of rows
    paired only with the steps after its first row. T = 64, chunk 8, bands of 16 rows starting
    at 0, 16, 32, 48: 16·63 + 16·47 + 16·31 + 16·15 = 2 496 pairs, where the explicit offsets
    d = 1..63 evaluate 64·63 = 4 032 (every band paired from its row 1 on would count 4 032
    too). The credit and the pair loss (its forward pass; the gradient reuses it) both."""
    num_steps, chunk = 64, 8
    k = jax.random.split(jax.random.key(31), 3)
    obs = jax.random.normal(k[0], (num_steps, 5))
    logits = jax.random.normal(k[1], (num_steps, 3))
    reward = jax.random.normal(k[2], (num_steps,))
    action = jnp.zeros((num_steps,), jnp.int32)
    episode = jnp.zeros((num_steps,), jnp.int32)
    base = hm.state_mlp(1, 8, True)
    params = base.init(jax.random.key(32), obs, 3, obs)
    counted = []

    def pair_logits(p, src, tgt, policy_logits):
        out = base.pair_logits(p, src, tgt, policy_logits)
        pairs = int(np.prod(out.shape[:-1]))
        jax.debug.callback(lambda _: counted.append(pairs), out.sum())
        return out

    model = dataclasses.replace(base, pair_logits=pair_logits)
    src, tgt = model.source(params, obs), model.target(params, obs, reward)

    def evaluated(fn, *plan):
        counted.clear()
        jax.block_until_ready(jax.jit(fn)(params, *plan))
        return sum(counted)

    def credit(p, *plan):
        return H.state_hca_future_credit(model, p, src, tgt, logits, reward, episode, 0.9,
                                         *plan, chunk=chunk)

    def loss(p, *plan):
        return H.state_hca_pair_loss(model, p, src, tgt, logits, action, reward, episode, 0.9,
                                     *plan, chunk=chunk)[0]

    offsets = H.all_pair_offsets(num_steps)
    for fn in (credit, loss):
        assert evaluated(fn) == 2_496, fn.__name__
        assert evaluated(fn, *offsets) == 4_032, fn.__name__

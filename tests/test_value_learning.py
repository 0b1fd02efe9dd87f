"""Off-policy TD errors (jaxcredit.estimators.value_learning): hand cases, rlax, float64 loops.

The loops are forward views written from the papers' definitions, one episode at a time, so a
window with auto-resets checks that a termination stops the target and a time-out bootstraps from
the final observation without reading the next episode.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from jaxcredit.estimators import value_learning as VL

GAMMA = 0.9


# -- hand cases -------------------------------------------------------------------------------


def test_one_step_errors_by_hand():
    q_tm1, q_t = jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0])
    # r + γ max Q(s') − Q(s, a) = 1 + 0.5 · 4 − 1
    assert float(VL.q_learning(q_tm1, jnp.array(0), jnp.array(1.0), jnp.array(0.5), q_t)) == 2.0
    # the selector picks action 0, whose value is 3: 1 + 0.5 · 3 − 1
    assert float(VL.double_q_learning(q_tm1, jnp.array(0), jnp.array(1.0), jnp.array(0.5), q_t,
                                      jnp.array([5.0, 0.0]))) == 1.5


def test_td_lambda_by_hand():
    # G_1 = 2 + 0.5 · 20 = 12;  G_0 = 1 + 0.5 · (0.5 · 10 + 0.5 · 12) = 6.5
    errors = VL.td_lambda(jnp.zeros(2), jnp.array([1.0, 2.0]), jnp.array([0.5, 0.5]),
                          jnp.array([10.0, 20.0]), 0.5)
    np.testing.assert_allclose(errors, [6.5, 12.0])


def test_retrace_by_hand():
    q_t = jnp.array([[1.0, 3.0], [2.0, 4.0]])
    pi_t = jnp.array([[0.5, 0.5], [0.25, 0.75]])
    a_t, zeros = jnp.array([1, 0]), jnp.zeros((2, 2))

    def errors(mu_0):
        return VL.retrace(zeros, q_t, jnp.array([0, 0]), a_t, jnp.ones(2), jnp.ones(2), pi_t,
                          jnp.array([mu_0, 0.5]), 1.0)

    # V_1 = 0.25 · 2 + 0.75 · 4 = 3.5, G_1 = 1 + 3.5 = 4.5. c_0 = min(1, 0.5 / 0.25) = 1:
    # G_0 = 1 + (V_0 = 2) − 1 · Q(s_1, a_1 = 1) = 3 + 1 · 4.5 = 4.5.
    np.testing.assert_allclose(errors(0.25), [4.5, 4.5])
    # μ = 1 gives c_0 = 0.5: G_0 = 1 + 2 − 0.5 · 3 + 0.5 · 4.5 = 3.75.
    np.testing.assert_allclose(errors(1.0), [3.75, 4.5])


def test_watkins_cuts_the_trace_at_an_exploratory_action():
    q_t = jnp.array([[0.0, 1.0], [5.0, 0.0]])
    lam = VL.watkins_lambda(q_t, jnp.array([1, 1]), 0.8)
    np.testing.assert_allclose(lam, [0.8, 0.0])  # a_1 = 1 is greedy, a_2 = 1 is not
    # With the cut, step 0's target stops at step 1's bootstrap (λ_1 = 0 there is the target's
    # last step anyway), and step 0 mixes max Q(s_1) and G_1 with weights 0.2 / 0.8.
    errors = VL.q_lambda(jnp.zeros((2, 2)), jnp.array([0, 0]), jnp.array([1.0, 1.0]),
                         jnp.ones(2), q_t, lam)
    np.testing.assert_allclose(errors, [1.0 + 0.2 * 1.0 + 0.8 * (1.0 + 5.0), 6.0])


def test_time_out_cut_by_hand():
    np.testing.assert_allclose(VL.cut_at_time_outs(0.9, jnp.array([False, True, False])),
                               [0.9, 0.0, 0.9])


# -- against rlax, on random inputs ----------------------------------------------------------


def _random_window(seed, T=9, B=4, A=3):
    rng = np.random.default_rng(seed)
    f = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)  # noqa: E731
    logits = rng.normal(size=(T, B, A))
    pi = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return dict(
        q_tm1=f(T, B, A), q_t=f(T, B, A), v_tm1=f(T, B), v_t=f(T, B), r_t=f(T, B),
        discount_t=jnp.asarray(GAMMA * (rng.random((T, B)) > 0.2), jnp.float32),
        a_tm1=jnp.asarray(rng.integers(A, size=(T, B)), jnp.int32),
        a_t=jnp.asarray(rng.integers(A, size=(T, B)), jnp.int32),
        pi_t=jnp.asarray(pi, jnp.float32),
        mu_t=jnp.asarray(rng.uniform(0.1, 1.0, size=(T, B)), jnp.float32),
        lam=jnp.asarray(rng.uniform(0, 1, size=(T, B)), jnp.float32))


def _over_batch(fn, *args):
    """rlax's time-major function vmapped over the batch axis 1."""
    return jax.vmap(fn, in_axes=1, out_axes=1)(*args)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_errors_match_rlax(seed):
    w = _random_window(seed)
    cases = {
        "td_lambda": (VL.td_lambda(w["v_tm1"], w["r_t"], w["discount_t"], w["v_t"], w["lam"]),
                      _over_batch(rlax.td_lambda, w["v_tm1"], w["r_t"], w["discount_t"],
                                  w["v_t"], w["lam"])),
        "sarsa_lambda": (
            VL.sarsa_lambda(w["q_tm1"], w["a_tm1"], w["r_t"], w["discount_t"], w["q_t"],
                            w["a_t"], w["lam"]),
            _over_batch(rlax.sarsa_lambda, w["q_tm1"], w["a_tm1"], w["r_t"], w["discount_t"],
                        w["q_t"], w["a_t"], w["lam"])),
        "q_lambda": (
            VL.q_lambda(w["q_tm1"], w["a_tm1"], w["r_t"], w["discount_t"], w["q_t"], w["lam"]),
            _over_batch(rlax.q_lambda, w["q_tm1"], w["a_tm1"], w["r_t"], w["discount_t"],
                        w["q_t"], w["lam"])),
        "retrace": (
            VL.retrace(w["q_tm1"], w["q_t"], w["a_tm1"], w["a_t"], w["r_t"], w["discount_t"],
                       w["pi_t"], w["mu_t"], w["lam"]),
            _over_batch(rlax.retrace, w["q_tm1"], w["q_t"], w["a_tm1"], w["a_t"], w["r_t"],
                        w["discount_t"], w["pi_t"], w["mu_t"], w["lam"])),
        "retrace, scalar λ": (
            VL.retrace(w["q_tm1"], w["q_t"], w["a_tm1"], w["a_t"], w["r_t"], w["discount_t"],
                       w["pi_t"], w["mu_t"], 0.7),
            _over_batch(lambda *a: rlax.retrace(*a, 0.7), w["q_tm1"], w["q_t"], w["a_tm1"],
                        w["a_t"], w["r_t"], w["discount_t"], w["pi_t"], w["mu_t"])),
    }
    for name, (ours, theirs) in cases.items():
        chex.assert_shape(ours, w["r_t"].shape)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("seed", [0, 1])
def test_one_step_errors_match_rlax(seed):
    w = _random_window(seed)
    q_tm1, q_t, a, r, d = w["q_tm1"], w["q_t"], w["a_tm1"], w["r_t"], w["discount_t"]
    rlax_q = jax.vmap(jax.vmap(rlax.q_learning))(q_tm1, a, r, d, q_t)
    np.testing.assert_allclose(VL.q_learning(q_tm1, a, r, d, q_t), rlax_q, rtol=1e-6)
    selector = q_t[::-1]
    rlax_dq = jax.vmap(jax.vmap(rlax.double_q_learning))(q_tm1, a, r, d, q_t, selector)
    np.testing.assert_allclose(VL.double_q_learning(q_tm1, a, r, d, q_t, selector), rlax_dq,
                               rtol=1e-6)


def test_gradients_stop_at_the_targets_unless_asked():
    w = _random_window(3, B=1)

    def loss(q_t, stop):
        return VL.q_lambda(w["q_tm1"], w["a_tm1"], w["r_t"], w["discount_t"], q_t, 0.5,
                           stop_target_gradients=stop).sum()

    assert float(jnp.abs(jax.grad(loss)(w["q_t"], True)).sum()) == 0.0
    assert float(jnp.abs(jax.grad(loss)(w["q_t"], False)).sum()) > 0.0


# -- float64 forward views, episode ends of both kinds ------------------------------------------


def _episodes_window(seed, T=14, B=3, A=3):
    """A window of auto-reset episodes: each column has terminations and time-outs inside."""
    w = {k: np.asarray(v, np.float64) for k, v in _random_window(seed, T, B, A).items()}
    rng = np.random.default_rng(100 + seed)
    ends = rng.random((T, B)) < 0.3
    kind = rng.random((T, B)) < 0.5
    w["terminated"], w["truncated"] = ends & kind, ends & ~kind
    w["terminated"][3, 0], w["truncated"][3, 0] = True, False     # both kinds in every run
    w["truncated"][7, 0], w["terminated"][7, 0] = True, False
    w["a_tm1"], w["a_t"] = w["a_tm1"].astype(int), w["a_t"].astype(int)
    return w


def _segment_end(w, i, b):
    """The last step of the episode that step i belongs to, or the window's last step."""
    T = w["r_t"].shape[0]
    k = i
    while k < T - 1 and not (w["terminated"][k, b] or w["truncated"][k, b]):
        k += 1
    return k


def _forward_lambda_return(w, boot, lam, i, b):
    """S&B (12.9), truncated at the episode's end: Σ_n (1 − λ) λ^{n−1} G^{(n)} + λ^{N−1} G^{(N)}."""
    end = _segment_end(w, i, b)
    N = end - i + 1

    def n_step(n):
        g, scale = 0.0, 1.0
        for k in range(i, i + n):
            g += scale * w["r_t"][k, b]
            scale *= GAMMA * (1.0 - w["terminated"][k, b])
        return g + scale * boot[i + n - 1, b]

    return (sum((1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, N))
            + lam ** (N - 1) * n_step(N))


def _forward_retrace(w, lam, i, b):
    """Munos et al. (2016), eq. (3) in the target-network form, up to the episode's end:
    G_i = r_i + γ_i V_i + Σ_{k>i} (Π_{j=i}^{k−1} γ_j c_j) (r_k + γ_k V_k − Q(s_k, a_k))."""
    end = _segment_end(w, i, b)
    disc = GAMMA * (1.0 - w["terminated"][:, b])
    V = (w["pi_t"][:, b] * w["q_t"][:, b]).sum(-1)
    q_next = w["q_t"][np.arange(len(V)), b, w["a_t"][:, b]]
    c = lam * np.minimum(1.0, w["pi_t"][np.arange(len(V)), b, w["a_t"][:, b]]
                         / (w["mu_t"][:, b] + 1e-8))
    g, trace = w["r_t"][i, b] + disc[i] * V[i], 1.0
    for k in range(i + 1, end + 1):
        trace *= disc[k - 1] * c[k - 1]
        g += trace * (w["r_t"][k, b] + disc[k] * V[k] - q_next[k - 1])
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_errors_match_float64_forward_views_across_episode_ends(seed):
    w = _episodes_window(seed)
    T, B = w["r_t"].shape
    lam = 0.8
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    discount = f32(GAMMA * (1.0 - w["terminated"]))
    lam_t = VL.cut_at_time_outs(lam, w["truncated"])
    idx = np.arange(T)[:, None], np.arange(B)[None, :]
    boots = {"td_lambda": w["v_t"], "sarsa_lambda": w["q_t"][idx + (w["a_t"],)],
             "q_lambda": w["q_t"].max(-1)}
    heads = {"td_lambda": w["v_tm1"]}
    qa_tm1 = w["q_tm1"][idx + (w["a_tm1"],)]
    ours = {
        "td_lambda": VL.td_lambda(f32(w["v_tm1"]), f32(w["r_t"]), discount, f32(w["v_t"]),
                                  lam_t),
        "sarsa_lambda": VL.sarsa_lambda(f32(w["q_tm1"]), w["a_tm1"], f32(w["r_t"]), discount,
                                        f32(w["q_t"]), w["a_t"], lam_t),
        "q_lambda": VL.q_lambda(f32(w["q_tm1"]), w["a_tm1"], f32(w["r_t"]), discount,
                                f32(w["q_t"]), lam_t),
        "retrace": VL.retrace(f32(w["q_tm1"]), f32(w["q_t"]), w["a_tm1"], w["a_t"],
                              f32(w["r_t"]), discount, f32(w["pi_t"]), f32(w["mu_t"]), lam_t),
    }
    for name, errors in ours.items():
        expected = np.zeros((T, B))
        for b in range(B):
            for i in range(T):
                if name == "retrace":
                    target = _forward_retrace(w, lam, i, b)
                else:
                    target = _forward_lambda_return(w, boots[name], lam, i, b)
                expected[i, b] = target - heads.get(name, qa_tm1)[i, b]
        np.testing.assert_allclose(errors, expected, rtol=2e-5, atol=2e-5, err_msg=name)

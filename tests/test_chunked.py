"""Chunked-TD (jaxcredit.estimators.chunked): hand cases, a float64 loop, counts, the engine."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs
from jaxcredit.estimators import chunked as C
from jaxcredit.estimators import make_estimator
from jaxcredit.exact.models import exact_model
from jaxcredit.types import Trajectory

KEY = jax.random.key(0)


def _trajectory(state, action, reward, terminated, truncated, pi, value=None, next_value=None):
    state = jnp.asarray(state, jnp.int32)
    shape = state.shape
    zeros = jnp.zeros(shape, jnp.float32)
    pi = jnp.asarray(pi, jnp.float32)
    action = jnp.asarray(action, jnp.int32)
    return Trajectory(
        obs=jnp.zeros(shape + (1,)), action=action, reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, bool), truncated=jnp.asarray(truncated, bool),
        value=zeros if value is None else jnp.asarray(value, jnp.float32),
        next_value=zeros if next_value is None else jnp.asarray(next_value, jnp.float32),
        log_prob=jnp.log(jnp.take_along_axis(pi, action[..., None], -1)[..., 0]),
        logits=jnp.log(pi), state=state)


# -- hand cases ---------------------------------------------------------------------------------


def test_next_state_index_by_hand():
    # Steps 0..4 of one environment: a termination at 1, a time-out at 3, the window ends at 4.
    traj = _trajectory([0, 1, 2, 1, 0], [0] * 5, [0.0] * 5, [0, 1, 0, 0, 0], [0, 0, 0, 1, 0],
                       np.full((5, 2), 0.5))
    nxt, known = C.next_state_index(traj, num_states=3)
    np.testing.assert_array_equal(nxt, [1, 3, 1, 0, 0])  # 3 = "the episode terminated"
    np.testing.assert_array_equal(known, [True, True, True, False, False])


def test_lambda_by_hand():
    # S = 2, A = 2. From state 0, action 0 stays with 0.75 and moves to 1 with 0.25; from state
    # 1, action 1 terminates with 0.5 and stays with 0.5; the other rows go to state 1 surely.
    p = np.zeros((2, 2, 3))
    p[0, 0] = [0.75, 0.25, 0.0]
    p[0, 1] = [0.0, 1.0, 0.0]
    p[1, 0] = [0.0, 1.0, 0.0]
    p[1, 1] = [0.0, 0.5, 0.5]
    pi = np.array([[0.6, 0.4]] * 4)
    # s: 0 -a0-> 0 -a0-> 1 -a1-> terminal; then the reset state 0 -a1-> (window ends)
    traj = _trajectory([0, 0, 1, 0], [0, 0, 1, 1], [0.0] * 4, [0, 0, 1, 0], [0, 0, 0, 0], pi)
    # ℓ_t, sampled: π(a_t) p(s_{t+1} | s_t, a_t) = 0.6·0.75, 0.6·0.25, 0.4·0.5, unknown (0).
    ell = C.step_probability(jnp.asarray(p), jnp.asarray(pi), traj.action, traj.state,
                             *C.next_state_index(traj, 2)[:1], form="sampled")
    np.testing.assert_allclose(ell[:3], [0.45, 0.15, 0.2], rtol=1e-6)
    # ℓ_t, expected: Σ_a π(a) p(s_{t+1} | s_t, a) = 0.6·0.75, 0.6·0.25 + 0.4·1, 0.4·0.5.
    ell_e = C.step_probability(jnp.asarray(p), jnp.asarray(pi), traj.action, traj.state,
                               *C.next_state_index(traj, 2)[:1], form="expected")
    np.testing.assert_allclose(ell_e[:3], [0.45, 0.55, 0.2], rtol=1e-6)
    # λ'_i = ℓ_{i+1} (1 − done_i): 0.15, 0.2, 0 (step 2 ended the episode), 0 (the last step).
    _, _, lam = C.chunked_advantages(jnp.asarray(p), traj, 1.0, "sampled")
    np.testing.assert_allclose(lam, [0.15, 0.2, 0.0, 0.0], rtol=1e-6)


def test_exact_transition_model_pools_the_terminal_states():
    env, params = envs.make("Shortcut")
    mdp = env.tabular_mdp(params)
    p_next = exact_model("transition").params(None, mdp, None, 1.0)["p_next"]
    assert p_next.shape == (mdp.num_states, mdp.num_actions, mdp.num_states + 1)
    np.testing.assert_allclose(p_next.sum(-1), 1.0, rtol=1e-6)
    terminal = np.asarray(mdp.terminal)
    np.testing.assert_allclose(p_next[..., -1], np.asarray(mdp.transition)[..., terminal].sum(-1))
    assert float(np.abs(np.asarray(p_next)[..., :-1][..., terminal]).max()) == 0.0


# -- a float64 forward loop on random windows with episode ends of both kinds -------------------


def _reference(p, traj, gamma, form):
    """ℓ, λ' and the λ'-return written as loops in float64, one step at a time."""
    s, a = np.asarray(traj.state), np.asarray(traj.action)
    pi = np.exp(np.asarray(traj.logits, np.float64))
    pi /= pi.sum(-1, keepdims=True)
    term, trunc = np.asarray(traj.terminated), np.asarray(traj.truncated)
    r, v, nv = (np.asarray(x, np.float64) for x in (traj.reward, traj.value, traj.next_value))
    T, B = s.shape
    S = p.shape[0]
    ell = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            if term[t, b]:
                nxt = S
            elif trunc[t, b] or t == T - 1:
                continue  # the next state is not in the window
            else:
                nxt = s[t + 1, b]
            if form == "sampled":
                ell[t, b] = pi[t, b, a[t, b]] * p[s[t, b], a[t, b], nxt]
            else:
                ell[t, b] = sum(pi[t, b, x] * p[s[t, b], x, nxt] for x in range(p.shape[1]))
    lam = np.zeros((T, B))
    targets = np.zeros((T, B))
    for b in range(B):
        for i in range(T):
            if i + 1 < T and not (term[i, b] or trunc[i, b]):
                lam[i, b] = ell[i + 1, b]
        g = None
        for i in reversed(range(T)):
            boot = gamma * (1.0 - term[i, b]) * nv[i, b]
            ends = term[i, b] or trunc[i, b] or i == T - 1
            if ends:
                g = r[i, b] + boot
            else:
                g = r[i, b] + gamma * ((1 - lam[i, b]) * nv[i, b] + lam[i, b] * g)
            targets[i, b] = g
    return ell, lam, targets, targets - v


@pytest.mark.parametrize("form", C.FORMS)
@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_matches_a_float64_loop(form, seed):
    rng = np.random.default_rng(seed)
    S, A, T, B = 5, 3, 12, 4
    p = rng.dirichlet(np.ones(S + 1) * 0.5, size=(S, A))
    logits = rng.normal(size=(T, B, A))
    pi = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    ends = rng.random((T, B)) < 0.25
    kind = rng.random((T, B)) < 0.5
    term, trunc = ends & kind, ends & ~kind
    term[2, 0], trunc[2, 0] = True, False
    trunc[6, 0], term[6, 0] = True, False
    ends = term | trunc
    # One critic: V(s'_{t+1}) is V(s_{t+1}) inside an episode, its own value at an episode end.
    value, next_value = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    next_value[:-1] = np.where(ends[:-1], next_value[:-1], value[1:])
    traj = _trajectory(rng.integers(S, size=(T, B)), rng.integers(A, size=(T, B)),
                       rng.normal(size=(T, B)), term, trunc, pi, value, next_value)
    advantage, targets, lam = C.chunked_advantages(jnp.asarray(p, jnp.float32), traj, 0.9, form)
    _, ref_lam, ref_targets, ref_adv = _reference(p, traj, 0.9, form)
    np.testing.assert_allclose(lam, ref_lam, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(targets, ref_targets, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantage, ref_adv, rtol=1e-5, atol=1e-5)


# -- the counts model ---------------------------------------------------------------------------


def test_counts_converge_to_the_exact_model_and_give_its_credit():
    """Windows of a tabular environment counted by the update rule: the count model's
    probabilities approach the exact P(s′|s, a) on the pairs visited, and so does the credit."""
    env, env_params = envs.make("Shortcut")
    fitted = make_estimator("chunked", context={"env": env, "env_params": env_params})
    oracle = fitted.oracle()
    assert oracle.is_oracle and oracle.exact_model == "transition"
    mdp = env.tabular_mdp(env_params)
    exact = exact_model("transition").params(None, mdp, None, 1.0)
    # Random windows from the MDP itself (uniform actions), T = 16 steps of 64 environments.
    rng = np.random.default_rng(0)
    P, initial = np.asarray(mdp.transition), np.asarray(mdp.initial)
    terminal = np.asarray(mdp.terminal)
    params = fitted.init(KEY, None)
    T, B, S, A = 16, 64, mdp.num_states, mdp.num_actions

    def window():
        s = rng.choice(S, size=B, p=initial)
        states, actions, terms = [], [], []
        for _ in range(T):
            a = rng.integers(A, size=B)
            nxt = np.array([rng.choice(S, p=P[x, y]) for x, y in zip(s, a)])
            states.append(s), actions.append(a), terms.append(terminal[nxt])
            s = np.where(terminal[nxt], rng.choice(S, size=B, p=initial), nxt)
        return _trajectory(states, actions, np.zeros((T, B)), terms, np.zeros((T, B)),
                           np.full((T, B, A), 1.0 / A))

    class HP:
        gamma = 1.0

    first = None
    for k in range(30):
        traj = window()
        if k == 0:
            first = fitted.assign(params, traj, HP, KEY).diagnostics["lambda_mean"]
        params = fitted.update(params, traj, HP)
    assert float(first) == 0.0  # nothing counted yet: every step bootstraps
    seen = np.asarray(params["counts"]).sum(-1) > 200
    assert seen.sum() >= 3
    np.testing.assert_allclose(np.asarray(C.count_probabilities(params["counts"]))[seen],
                               np.asarray(exact["p_next"])[seen], atol=0.08)
    traj = window()
    lam_fit = fitted.assign(params, traj, HP, KEY).diagnostics["lambda_mean"]
    lam_exact = oracle.assign(exact, traj, HP, KEY).diagnostics["lambda_mean"]
    np.testing.assert_allclose(lam_fit, lam_exact, atol=0.03)


def test_chunked_refuses_an_environment_without_a_state_table():
    env, env_params = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="tabular state index"):
        make_estimator("chunked", context={"env": env, "env_params": env_params})
    with pytest.raises(ValueError, match="form"):
        make_estimator("chunked", form="other",
                       context={"env": envs.make("Shortcut")[0],
                                "env_params": envs.make("Shortcut")[1]})


def test_the_engine_scores_the_counted_model_against_the_exact_one():
    """At evaluation points the counted model's credit is compared with the exact model's on
    a held-out window (no KL: a transition model has no hindsight read-out)."""
    from jaxcredit.agents import Hparams, TrainConfig, make_engine

    config = TrainConfig.from_flat(
        algo="a2c", estimator="chunked", estimator_options=(("form", "expected"),),
        env="Shortcut", num_envs=8, num_steps=8, total_timesteps=8 * 8 * 4, hidden_sizes=(8,),
        eval_every=2, eval_episodes=2).resolved()
    engine = make_engine(config)
    _, metrics = jax.jit(engine.train)(jax.random.key(0), Hparams.create(gamma=0.99))
    assert "estimator/kl_to_exact" not in metrics
    rmse = np.asarray(metrics["credit/rmse_to_exact"])
    assert np.isnan(rmse[0]) and np.isfinite(rmse[[1, 3]]).all()  # evaluation points only
    assert np.isfinite(np.asarray(metrics["credit/grad_cos_fitted"])[[1, 3]]).all()

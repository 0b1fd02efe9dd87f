"""Counterfactual Credit Assignment: the credit of both forms by hand, the all-action credit's
gradient against the paper's CCA-PG gradient, unbiasedness exactly when Φ is blind to the
action (and the bias when it is not), the backward statistic's reach (the future of its own
episode only), the fit hiding the action from Φ while keeping the luck, and training from the
command line with a recurrent policy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.cca import (
    CCAModel, cca_all_action_advantage, fc_advantage, future_conditional_baseline,
    independence_kl, window_inputs)
from jaxcredit.types import Trajectory


def test_credit_by_hand():
    """π = (¼, ¾), Q = (1, 3), G = 5, A_t = 0: V̄ = ¼ + 9/4 = 2.5; FC-PG: 5 − 2.5 = 2.5;
    CCA-PG: Â(0) = 1 − 2.5 + (5 − 1)/¼ = 14.5, Â(1) = 3 − 2.5 = 0.5. With A_t = 1:
    Â(0) = −1.5, Â(1) = 0.5 + (5 − 3)/¾ = 19/6."""
    pi = jnp.array([[0.25, 0.75], [0.25, 0.75]])
    q = jnp.array([[1.0, 3.0], [1.0, 3.0]])
    g = jnp.array([5.0, 5.0])
    np.testing.assert_allclose(future_conditional_baseline(q, pi), [2.5, 2.5])
    np.testing.assert_allclose(fc_advantage(g, q, pi), [2.5, 2.5])
    np.testing.assert_allclose(cca_all_action_advantage(g, q, pi, jnp.array([0, 1])),
                               [[14.5, 0.5], [-1.5, 0.5 + 2.0 / 0.75]], rtol=1e-6)
    # KL(h ‖ π) by hand: h = (½, ½) against (¼, ¾): ½ ln 2 + ½ ln(2/3).
    log_h, log_pi = jnp.log(jnp.array([0.5, 0.5])), jnp.log(jnp.array([0.25, 0.75]))
    np.testing.assert_allclose(independence_kl(log_h, log_pi),
                               0.5 * np.log(2.0) + 0.5 * np.log(2.0 / 3.0), rtol=1e-6)


def test_all_action_credit_gives_the_cca_pg_gradient():
    """d/dθ Σ_a π_θ(a) Â(a) (the all-action policy loss) equals the paper's
    Σ_a ∇π(a) Q(a) + ∇log π(A_t) (G_t − Q(A_t)) on random logits, Q, G and actions."""
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(5, 4)))
    q, g = jnp.asarray(rng.normal(size=(5, 4))), jnp.asarray(rng.normal(size=5))
    action = jnp.asarray(rng.integers(0, 4, 5))
    pi = jax.nn.softmax(logits)
    advantage = cca_all_action_advantage(g, q, pi, action)

    def surrogate(theta):
        return jnp.sum(jax.nn.softmax(theta) * advantage)

    def paper(theta):
        p = jax.nn.softmax(theta)
        log_p_a = jnp.take_along_axis(jax.nn.log_softmax(theta), action[:, None], 1)[:, 0]
        q_a = jnp.take_along_axis(q, action[:, None], 1)[:, 0]
        return jnp.sum(p * q) + jnp.sum(log_p_a * (g - q_a))

    np.testing.assert_allclose(jax.grad(surrogate)(logits), jax.grad(paper)(logits),
                               rtol=1e-5, atol=1e-6)


def _expected_gradient(theta, q_true, critic):
    """E_{A ~ π}[∇_θ Σ_a π_θ(a) Â_A(a)] by enumerating A: ``critic(A)`` is the Q row the
    estimator sees after action A (its Φ may depend on A) and G = q_true[A] (the return's mean:
    the noise averages out of the linear credit). ∇_θ π = diag(π) − π πᵀ for logits θ."""
    pi = np.asarray(jax.nn.softmax(jnp.asarray(theta)), np.float64)
    jacobian = np.diag(pi) - np.outer(pi, pi)
    total = np.zeros_like(pi)
    for a in range(len(pi)):
        advantage = cca_all_action_advantage(jnp.asarray([q_true[a]], jnp.float32),
                                             jnp.asarray(critic(a), jnp.float32)[None],
                                             jnp.asarray(pi, jnp.float32)[None], jnp.array([a]))
        total += pi[a] * jacobian @ np.asarray(advantage[0], np.float64)
    return total


def test_unbiased_when_phi_is_blind_to_the_action_and_biased_when_it_is_not():
    """Bandit with 3 arms, q = (1, 0, −2). The true gradient is Σ_a ∇π(a) q(a). A critic that
    does not depend on the action taken (any Q, wrong or not) gives it exactly in expectation;
    a critic whose Φ reveals the action (Q(·) = q(A) for every a) does not: it credits every
    arm alike, so its expected gradient is 0."""
    theta = np.array([0.3, -0.2, 0.5])
    q_true = np.array([1.0, 0.0, -2.0])
    pi = np.asarray(jax.nn.softmax(jnp.asarray(theta)), np.float64)
    truth = (np.diag(pi) - np.outer(pi, pi)) @ q_true
    blind = np.array([4.0, -1.0, 0.5])  # a poor Q, the same after any A
    np.testing.assert_allclose(_expected_gradient(theta, q_true, lambda a: blind), truth,
                               atol=2e-6)
    leaky = _expected_gradient(theta, q_true, lambda a: np.full(3, q_true[a]))
    np.testing.assert_allclose(leaky, 0.0, atol=2e-6)
    assert np.abs(truth).max() > 0.1


def _window(obs, reward, action, terminated, truncated=None, num_actions=2):
    obs = jnp.asarray(obs, jnp.float32)
    T, N = obs.shape[:2]
    zeros = jnp.zeros((T, N), jnp.float32)
    truncated = np.zeros((T, N), bool) if truncated is None else truncated
    next_obs = jnp.concatenate([obs[1:], obs[-1:]])
    return Trajectory(obs=obs, action=jnp.asarray(action, jnp.int32),
                      reward=jnp.asarray(reward, jnp.float32),
                      terminated=jnp.asarray(terminated), truncated=jnp.asarray(truncated),
                      value=zeros, next_value=zeros, log_prob=zeros,
                      logits=jnp.zeros((T, N, num_actions), jnp.float32), next_obs=next_obs)


@pytest.mark.parametrize("agent_state", ["mlp", "gru"])
def test_phi_reads_only_the_future_of_its_own_episode(agent_state):
    """Random windows with an end by termination at step 3 and one by truncation at step 6:
    Φ_t changes when an input at or after t in t's episode changes, and never when one before
    t or in another episode does; X_t (the forward GRU) only reads steps ≤ t of its episode."""
    rng = np.random.default_rng(1)
    T, N = 9, 1
    terminated, truncated = np.zeros((T, N), bool), np.zeros((T, N), bool)
    terminated[3], truncated[6] = True, True
    obs, reward = rng.normal(size=(T, N, 3)), rng.normal(size=(T, N))
    action = rng.integers(0, 2, (T, N))
    net = CCAModel(2, (8,), 4, agent_state)
    base = _window(obs, reward, action, terminated, truncated)
    params = net.init(jax.random.key(0), *window_inputs(base), method=CCAModel.everything)
    x0, phi0 = net.apply(params, *window_inputs(base))
    episode = np.cumsum(np.concatenate([[0], (terminated | truncated)[:-1, 0]]))
    for k in range(T):
        changed = reward.copy()
        changed[k] += 1.0
        x1, phi1 = net.apply(params, *window_inputs(_window(obs, changed, action, terminated,
                                                            truncated)))
        moved = np.abs(np.asarray(phi1 - phi0)).max(-1)[:, 0] > 1e-7
        expected = (np.arange(T) <= k) & (episode == episode[k])
        np.testing.assert_array_equal(moved, expected, err_msg=f"reward at {k}")
        np.testing.assert_array_equal(np.asarray(x1), np.asarray(x0))  # X reads no reward
        if agent_state == "gru":
            changed_obs = obs.copy()
            changed_obs[k] += 1.0
            x2, _ = net.apply(params, *window_inputs(_window(changed_obs, reward, action,
                                                             terminated, truncated)))
            moved = np.abs(np.asarray(x2 - x0)).max(-1)[:, 0] > 1e-7
            np.testing.assert_array_equal(moved, (np.arange(T) >= k) & (episode == episode[k]))


def test_x_from_the_agent_state_reads_that_state_only():
    """``agent_state="agent"``: X_t is an embedding of ``Trajectory.agent_state[t]`` alone, the
    recurrent policy's state (it moves only where that state moves, never with an observation),
    and Φ still reads the next observations; without a recorded state, a one-line error."""
    rng = np.random.default_rng(3)
    T, N = 4, 2
    obs, reward = rng.normal(size=(T, N, 3)), rng.normal(size=(T, N))
    action, terminated = rng.integers(0, 2, (T, N)), np.zeros((T, N), bool)
    core = rng.normal(size=(T, N, 5))
    base = _window(obs, reward, action, terminated).replace(agent_state=jnp.asarray(core))
    inputs = window_inputs(base, agent_state="agent")
    np.testing.assert_array_equal(np.asarray(inputs[0]), core.astype(np.float32))
    net = CCAModel(2, (8,), 4, "agent")
    params = net.init(jax.random.key(0), *inputs, method=CCAModel.everything)
    x0, phi0 = net.apply(params, *inputs)
    changed_obs = _window(obs + 1.0, reward, action, terminated).replace(
        agent_state=jnp.asarray(core))
    x1, phi1 = net.apply(params, *window_inputs(changed_obs, agent_state="agent"))
    np.testing.assert_array_equal(np.asarray(x1), np.asarray(x0))
    assert not np.allclose(np.asarray(phi1), np.asarray(phi0))
    changed_core = core.copy()
    changed_core[2] += 1.0
    x2, _ = net.apply(params, *window_inputs(base.replace(agent_state=jnp.asarray(changed_core)),
                                             agent_state="agent"))
    moved = np.abs(np.asarray(x2 - x0)).max(-1).max(-1) > 1e-7
    np.testing.assert_array_equal(moved, [False, False, True, False])
    with pytest.raises(ValueError, match="reads the agent's recurrent state"):
        window_inputs(_window(obs, reward, action, terminated), agent_state="agent")
    assert make_estimator("cca", agent_state="agent").reads_agent_state
    assert not make_estimator("cca", agent_state="gru").reads_agent_state


def test_phi_without_rewards_reads_only_the_next_observations():
    """``future_inputs="observation"``: Φ is blind to every reward and still reads the next
    observations of its episode."""
    rng = np.random.default_rng(2)
    T, N = 5, 2
    obs, reward = rng.normal(size=(T, N, 3)), rng.normal(size=(T, N))
    action, terminated = rng.integers(0, 2, (T, N)), np.zeros((T, N), bool)
    net = CCAModel(2, (8,), 4)
    base = _window(obs, reward, action, terminated)
    params = net.init(jax.random.key(0), *window_inputs(base, "observation"),
                      method=CCAModel.everything)
    _, phi0 = net.apply(params, *window_inputs(base, "observation"))
    _, phi1 = net.apply(params, *window_inputs(_window(obs, reward + 1.0, action, terminated),
                                               "observation"))
    np.testing.assert_array_equal(np.asarray(phi1), np.asarray(phi0))
    changed = obs.copy()
    changed[3] += 1.0  # next_obs of step 2
    _, phi2 = net.apply(params, *window_inputs(_window(changed, reward, action, terminated),
                                               "observation"))
    moved = np.abs(np.asarray(phi2 - phi0)).max(-1).max(-1) > 1e-7
    np.testing.assert_array_equal(moved, [True, True, True, False, False])


def _luck_windows(rng, num, N):
    """Two-step episodes: at step 0 the action A ∈ {0, 1} (uniform) is taken and nothing paid;
    step 1 shows the luck ε ~ N(0, 1) in its observation and pays 3A + ε. Φ_0 reads step 1's
    observation (ε: luck, independent of A) and its reward (3A + ε: it reveals A)."""
    windows = []
    for _ in range(num):
        action = rng.integers(0, 2, (2, N))
        luck = rng.normal(size=N)
        obs = np.zeros((2, N, 3))
        obs[0, :, 0] = 1.0
        obs[1, :, 1] = 1.0
        obs[1, :, 2] = luck
        reward = np.stack([np.zeros(N), 3.0 * action[0] + luck])
        terminated = np.stack([np.zeros(N, bool), np.ones(N, bool)])
        traj = _window(obs, reward, action, terminated)
        windows.append(traj.replace(next_obs=jnp.asarray(
            np.stack([obs[1], np.zeros((N, 3))]), jnp.float32)))
    return jax.tree.map(lambda *x: jnp.stack(x), *windows)


def test_the_fit_hides_the_action_from_phi_and_keeps_the_luck():
    """On the luck task, 600 joint Adam steps on the whole loss. With the independence penalty
    (β = 1) the classifier is left at chance (cross-entropy ≈ ln 2, independence ≈ 0), Q still
    explains the luck (its loss far below Var ε = 1), and the credit of the arm not taken,
    Q(a) − V̄, is the true advantage ±1.5. Without it (β = 0) the classifier reads A from Φ and
    the credit is biased towards 0 (Q sees the outcome of the arm taken, whatever a)."""
    import optax

    from jaxcredit.estimators.cca import cca

    data = _luck_windows(np.random.default_rng(0), 600, 32)
    probe = jax.tree.map(lambda x: x[0], _luck_windows(np.random.default_rng(1), 1, 256))
    hp = Hparams.create(gamma=1.0)
    results = {}
    for beta in (1.0, 0.0):
        est = cca(hidden=(32,), stat_size=8, independence_weight=beta)
        params = est.init(jax.random.key(0), jax.tree.map(lambda x: x[0], data))
        opt = optax.adam(3e-3)

        def step(carry, batch, est=est, opt=opt):
            params, state = carry
            (_, metrics), grads = jax.value_and_grad(est.loss, has_aux=True)(params, batch, hp)
            updates, state = opt.update(grads, state)
            return (optax.apply_updates(params, updates), state), metrics

        (params, _), metrics = jax.jit(lambda c, d, step=step: jax.lax.scan(step, c, d))(
            (params, opt.init(params)), data)
        advantage = np.asarray(est.assign(params, probe, hp).advantage[0])
        not_taken = 1 - np.asarray(probe.action[0])
        error = np.abs(advantage[np.arange(256), not_taken] - np.where(not_taken, 1.5, -1.5))
        results[beta] = {name: float(np.asarray(metrics[name])[-50:].mean())
                         for name in ("independence", "q_loss", "classifier_loss")}
        results[beta]["credit_error"] = float(np.median(error))
    hidden, leaky = results[1.0], results[0.0]
    assert hidden["independence"] < 0.05 and leaky["independence"] > 0.1, results
    assert abs(hidden["classifier_loss"] - np.log(2.0)) < 0.05, results
    assert hidden["q_loss"] < 0.1, results
    assert hidden["credit_error"] < 0.2 and leaky["credit_error"] > 0.3, results


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="form must be one of cca, fc"):
        make_estimator("cca", form="other")
    with pytest.raises(ValueError, match="agent_state must be one of mlp, gru, agent"):
        make_estimator("cca", agent_state="lstm")
    with pytest.raises(ValueError, match="future_inputs must be one of"):
        make_estimator("cca", future_inputs="reward")
    with pytest.raises(ValueError, match="independence_weight must be non-negative"):
        make_estimator("cca", independence_weight=-1)
    assert make_estimator("cca", hidden="16,16", form="fc").all_action is False


def test_trains_from_the_command_line_with_a_recurrent_policy(tmp_path):
    from jaxcredit import cli, runlog

    out = tmp_path / "run"
    argv = ["train", "--algo", "a2c", "--estimator", "cca", "--env", "MemoryKeyToDoor",
            "--env-option", "preset=cca", "--policy", "gru", "--num-envs", "2", "--num-steps",
            "8", "--num-minibatches", "1", "--total-timesteps", "32", "--hidden-sizes", "8", "8",
            "--eval-every", "0", "--out", str(out), "--no-progress", "--estimator-option",
            "hidden=8", "--estimator-option", "stat_size=4", "--estimator-option",
            "agent_state=agent"]
    assert cli.main(argv) == 0
    columns = runlog.read_metrics(out)
    assert np.isfinite(columns["estimator/independence"]).all()
    assert len(columns["update"]) == 2


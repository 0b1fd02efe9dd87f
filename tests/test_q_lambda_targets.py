"""Peng's Q(λ) target of PQN and of DQN's ``--estimator q_lambda``, in rlax's manner.

1. a three-step window with the expected targets worked out by hand and written in: no episode
   end, a termination and a time-out in the middle, a termination and a time-out at the last step;
2. DQN's learner trains on element [0] of ``peng_q_lambda_targets`` over the n sampled stored
   steps, with Q from the target network at their final observations.

docs/estimators.md ("Peng's Q(λ): where jaxcredit's target differs from purejaxql's, and why")
compares these numbers with purejaxql's PQN target.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents.replay import Step
from jaxcredit.estimators import q_targets

GAMMA, LAMBDA = 0.9, 0.5

# T = 3 steps, A = 2 actions. q_next[t] = Q(s'_{t+1}, ·), the Q-values at the observation that
# step t lands in (the final observation where the episode ended at t). The greedy action
# alternates, so taking Q of a fixed action instead of the max would change every number:
#   max Q(s'_1) = 10 (action 0),  max Q(s'_2) = 20 (action 1),  max Q(s'_3) = 30 (action 0).
Q_NEXT = [[10.0, 0.0], [-5.0, 20.0], [30.0, 5.0]]
REWARD = [1.0, 2.0, 3.0]

# Five columns (the batch axis), the same rewards and Q-values, different episode ends:
#   column:          0 no end   1 term t=1   2 trunc t=1   3 term t=2   4 trunc t=2
TERMINATED = [[False, False, False, False, False],
              [False, True, False, False, False],
              [False, False, False, True, False]]
TRUNCATED = [[False, False, False, False, False],
             [False, False, True, False, False],
             [False, False, False, False, True]]

# G_t = r_t + γ (1 − term_t) [(1 − λ_t) max Q(s'_{t+1}) + λ_t G_{t+1}], λ_t = λ (1 − done_t),
# G_2 = r_2 + γ (1 − term_2) max Q(s'_3); γ = 0.9, λ = 0.5.
EXPECTED = np.array([
    # 0, no episode end:
    #   G_2 = 3 + 0.9·30                  = 30
    #   G_1 = 2 + 0.9·(0.5·20 + 0.5·30)   = 2 + 0.9·25     = 24.5
    #   G_0 = 1 + 0.9·(0.5·10 + 0.5·24.5) = 1 + 0.9·17.25  = 16.525
    [16.525, 24.5, 30.0],
    # 1, terminated at t = 1: no bootstrap at t = 1 and the λ-chain is cut there;
    #    G_2 = 30 belongs to the next episode and does not reach G_1 or G_0.
    #   G_2 = 30;  G_1 = 2
    #   G_0 = 1 + 0.9·(0.5·10 + 0.5·2)    = 1 + 0.9·6      = 6.4
    [6.4, 2.0, 30.0],
    # 2, time-out at t = 1: bootstraps from the final observation s'_2, chain cut:
    #   G_2 = 30;  G_1 = 2 + 0.9·20       = 20
    #   G_0 = 1 + 0.9·(0.5·10 + 0.5·20)   = 1 + 0.9·15     = 14.5
    [14.5, 20.0, 30.0],
    # 3, terminated at the last step t = 2: no bootstrap from s'_3 (its Q of 30 is ignored):
    #   G_2 = 3
    #   G_1 = 2 + 0.9·(0.5·20 + 0.5·3)    = 2 + 0.9·11.5   = 12.35
    #   G_0 = 1 + 0.9·(0.5·10 + 0.5·12.35) = 1 + 0.9·11.175 = 11.0575
    [11.0575, 12.35, 3.0],
    # 4, time-out at the last step t = 2: bootstraps from s'_3 as if the window just ended,
    #    so the same targets as column 0.
    [16.525, 24.5, 30.0],
]).T  # [T, B]


def _inputs(dtype=jnp.float32):
    B = len(TERMINATED[0])
    reward = jnp.broadcast_to(jnp.asarray(REWARD, dtype)[:, None], (3, B))
    q_next = jnp.broadcast_to(jnp.asarray(Q_NEXT, dtype)[:, None, :], (3, B, 2))
    return reward, jnp.asarray(TERMINATED), jnp.asarray(TRUNCATED), q_next


def test_peng_q_lambda_by_hand():
    reward, terminated, truncated, q_next = _inputs()
    got = q_targets.peng_q_lambda_targets(reward, terminated, truncated, q_next, GAMMA, LAMBDA)
    assert got.shape == (3, 5) and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), EXPECTED, rtol=1e-6)


def test_peng_q_lambda_by_hand_jitted_with_traced_gamma_and_lambda():
    """The same numbers compiled, γ and λ traced (as in a hyper-parameter sweep), float64
    inputs kept at float64 (exact to rounding)."""
    with jax.enable_x64(True):
        reward, terminated, truncated, q_next = _inputs(jnp.float64)
        got = jax.jit(q_targets.peng_q_lambda_targets)(reward, terminated, truncated, q_next,
                                                         jnp.float64(GAMMA), jnp.float64(LAMBDA))
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(got), EXPECTED, rtol=1e-12)


def test_the_targets_carry_no_gradient():
    reward, terminated, truncated, q_next = _inputs()
    grad = jax.grad(lambda q: q_targets.peng_q_lambda_targets(
        reward, terminated, truncated, q, GAMMA, LAMBDA).sum())(q_next)
    np.testing.assert_array_equal(np.asarray(grad), 0.0)


# ---------------------------------------------------------------------------------------------
# DQN: element [0] of the function over the n sampled stored steps, from the target network.

N_STEP, BATCH = 3, 8
DQN_CONFIG = TrainConfig.from_flat(
    algo="dqn", env="CartPole-v1", estimator="q_lambda", num_envs=2, num_steps=2,
    total_timesteps=2 * 2 * 10, buffer_size=2 * 16, batch_size=BATCH, learning_starts=8,
    n_step=N_STEP, hidden_sizes=(8,), eval_episodes=1)


def test_dqn_q_lambda_trains_on_element_zero_of_the_targets(monkeypatch):
    """``learn`` on a replay filled with random steps (episode ends of both kinds): the spy sees
    the sampled rows' rewards and ends; the loss is that of ``peng_q_lambda_targets(...)[0]`` with
    Q of the *target* network at the rows' ``next_obs``, and not that of another element or of the
    online network."""
    engine = make_engine(DQN_CONFIG)
    rng = np.random.default_rng(0)
    T, N = 16, 2
    ends = rng.random((T, N))
    steps = Step(obs=rng.normal(size=(T, N, 4)).astype(np.float32),
                 action=rng.integers(0, 2, (T, N)).astype(np.int32),
                 reward=rng.normal(size=(T, N)).astype(np.float32),
                 terminated=ends < 0.2, truncated=ends > 0.8,
                 next_obs=rng.normal(size=(T, N, 4)).astype(np.float32))

    @jax.jit
    def filled(key, steps):
        state = engine.init(key)
        # A target network unlike the online one, so that using the wrong one shows.
        target = jax.tree.map(lambda p: 0.3 - 2.0 * p, state.agent.params)
        return state.replace(target_params=target,
                             replay=engine.replay.add(state.replay, steps))

    state = filled(jax.random.key(0), steps)

    calls = []

    def spy(*args):  # hands the arguments and the targets of the compiled call back to the test
        targets = original(*args)
        jax.debug.callback(lambda *values: calls.append(values), *args, targets)
        return targets

    original = q_targets.peng_q_lambda_targets
    monkeypatch.setattr(q_targets, "peng_q_lambda_targets", spy)
    hp = Hparams.create(lr=1e-3, gamma=GAMMA, lambda_=LAMBDA)
    key = jax.random.key(7)
    _, metrics = jax.block_until_ready(jax.jit(engine.learn)(state, hp, key, jnp.float32(1e-3)))
    assert len(calls) == 1
    reward, terminated, truncated, q_next, gamma, lambda_, targets = calls[0]

    @jax.jit
    def reference(state, key, spied_targets):
        """The rows learn reads (replay.sample_indices with the first half of the key, the
        first n steps of each window), Q of the target network at their next_obs, and the
        squared-error loss with element [0] (and, to show they differ, other choices)."""
        stream, times = engine.replay.sample_indices(state.replay, jax.random.split(key)[0])
        rows = engine.replay.gather(state.replay, stream, times[:, :N_STEP])  # [n, B]
        q = engine.network.apply(state.agent.params, rows.obs[0])
        chosen = jnp.take_along_axis(q, rows.action[0][:, None], axis=-1)[:, 0]

        def loss(params, element):
            q_n = engine.network.apply(params, rows.next_obs)
            y = original(rows.reward, rows.terminated, rows.truncated, q_n, GAMMA, LAMBDA)
            return jnp.mean(jnp.square(chosen - y[element]))

        q_target_next = engine.network.apply(state.target_params, rows.next_obs)
        losses = {"want": loss(state.target_params, 0),
                  "spied [0]": jnp.mean(jnp.square(chosen - spied_targets[0])),
                  "element 1": loss(state.target_params, 1),
                  "element -1": loss(state.target_params, -1),
                  "online network": loss(state.agent.params, 0)}
        return rows, q_target_next, losses

    rows, q_target_next, losses = reference(state, key, jnp.asarray(targets))
    for seen, stored in ((reward, rows.reward), (terminated, rows.terminated),
                         (truncated, rows.truncated)):
        np.testing.assert_array_equal(np.asarray(seen), np.asarray(stored))
    np.testing.assert_allclose(np.asarray(q_next), np.asarray(q_target_next), rtol=1e-6)
    assert float(gamma) == pytest.approx(GAMMA) and float(lambda_) == pytest.approx(LAMBDA)
    ends_inside = np.asarray(rows.terminated[:-1]) | np.asarray(rows.truncated[:-1])
    assert ends_inside.any()  # the rows hold episode ends before their last step
    assert float(metrics["loss"]) == pytest.approx(float(losses["want"]), rel=1e-5)
    assert float(losses["spied [0]"]) == pytest.approx(float(losses["want"]), rel=1e-5)
    for name in ("element 1", "element -1", "online network"):
        assert float(metrics["loss"]) != pytest.approx(float(losses[name]), rel=1e-3), name

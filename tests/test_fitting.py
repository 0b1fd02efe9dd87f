"""Fitting learned credit models: the fit loop against optax's Adam, the window buffer, and, inside
the engine, hindsight models that approach the exact (dynamic-programming) ones.

The engine checks hold the policy still (a learning rate of 1e-7), so the exact hindsight model
does not move and the KL to it measures the fit alone; the same run with ``fit_steps=0`` (the
model stays at h = π) gives the KL the fit must beat.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcredit import fitting
from jaxcredit.agents import EstimatorConfig, Hparams, TrainConfig, make_engine
from jaxcredit.fitting import FitSchedule, fit, init_fit_state
from jaxcredit.types import Trajectory


def _window(num_steps=3, num_envs=4, offset=0.0):
    zeros = jnp.zeros((num_steps, num_envs))
    reward = offset + jnp.arange(num_steps * num_envs, dtype=jnp.float32).reshape(
        num_steps, num_envs)
    return Trajectory(obs=reward[..., None], action=zeros.astype(jnp.int32), reward=reward,
                      terminated=zeros.astype(bool), truncated=zeros.astype(bool), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=jnp.zeros((num_steps, num_envs, 2)))


def _mean_reward_loss(params, traj, hparams, key):
    """Least squares of a constant against the rewards: its minimiser is the mean reward."""
    del hparams, key
    value = jnp.mean((traj.reward - params["c"]) ** 2)
    return value, {"c": params["c"]}


def _constant_loss(value, main=None):
    """A loss of constant ``value`` (its gradient 0.1 on ``c``), reporting ``main`` as its main
    loss when given."""
    def loss(params, traj, hparams, key):
        del traj, hparams, key
        total = value + 0.1 * params["c"] - 0.1 * jax.lax.stop_gradient(params["c"])
        return total, ({} if main is None else {"main_loss": jnp.float32(main)})
    return loss


@pytest.mark.parametrize("loss, max_steps, expected", [
    # A zero loss: the average starts at 2ℓ and shrinks by 0.99 a step; 2ℓ·0.99^n ≤ ℓ first
    # at n = 69 (0.99^68 = 0.505, 0.99^69 = 0.4998).
    (_constant_loss(0.0), 1000, 69),
    (_constant_loss(0.0), 50, 50),  # capped
    # A loss above twice the average resets the average to it every step: never reached.
    (_constant_loss(10.0), 300, 300),
    # The main loss is what is watched, not the total (RUDDER's rule).
    (_constant_loss(10.0, main=0.0), 1000, 69),
])
def test_fit_until_the_running_loss_reaches_the_threshold(loss, max_steps, expected):
    traj = _window()
    schedule = FitSchedule(steps=max_steps, until_loss=0.15)
    state = init_fit_state({"c": jnp.float32(0.0)}, traj, schedule)
    fitted, metrics = jax.jit(lambda s: fit(loss, s, traj, None, 0.01, 1e9, jax.random.key(0),
                                            schedule))(state)
    assert int(metrics["fit_steps"]) == expected
    # Adam's first steps on a constant gradient move c by lr each: c = −lr · steps.
    np.testing.assert_allclose(float(fitted.params["c"]), -0.01 * expected, rtol=1e-3)
    assert np.isfinite(float(metrics["loss_last"]))


def test_fit_until_rejects_a_negative_threshold():
    with pytest.raises(ValueError, match="estimator_fit_until_loss must be >= 0"):
        EstimatorConfig(fit_until_loss=-1.0).validate("estimator_")


def test_fit_is_adam_on_the_loss_with_clipping():
    traj = _window()
    schedule = FitSchedule(steps=3, minibatches=1)
    state = init_fit_state({"c": jnp.float32(0.0)}, traj, schedule)
    lr, max_norm = 0.5, 100.0
    fitted, metrics = fit(_mean_reward_loss, state, traj, None, lr, max_norm,
                          jax.random.key(0), schedule)
    # The same three steps by optax's Adam (ε = 1e-8) on the full batch.
    opt = optax.adam(lr, eps=1e-8)
    params, opt_state, first = {"c": jnp.float32(0.0)}, None, None
    opt_state = opt.init(params)
    for _ in range(3):
        loss, grads = jax.value_and_grad(lambda p: _mean_reward_loss(p, traj, None, None)[0])(
            params)
        first = loss if first is None else first
        updates, opt_state = opt.update(grads, opt_state)
        params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(fitted.params["c"], params["c"], rtol=1e-6)
    np.testing.assert_allclose(metrics["loss_first"], first, rtol=1e-6)
    assert float(metrics["loss_last"]) < float(metrics["loss_first"])
    # A tight clip bounds Adam's first step: |Δc| = lr · g/|g| = lr whatever the scale.
    tight, _ = fit(_mean_reward_loss, state, traj, None, lr, 1e-3, jax.random.key(0),
                   FitSchedule(steps=1))
    np.testing.assert_allclose(abs(float(tight.params["c"])), lr, rtol=1e-4)


def test_zero_steps_leave_the_model_alone():
    traj = _window()
    state = init_fit_state({"c": jnp.float32(3.0)}, traj, FitSchedule(steps=0))
    fitted, metrics = fit(_mean_reward_loss, state, traj, None, 0.1, 1.0, jax.random.key(0),
                          FitSchedule(steps=0))
    assert metrics == {} and float(fitted.params["c"]) == 3.0


def test_window_buffer_keeps_the_most_recent_windows_and_minibatches_draw_valid_ones():
    schedule = FitSchedule(steps=1, minibatches=4, windows=3)
    state = init_fit_state({"c": jnp.float32(0.0)}, _window(), schedule)
    assert state.buffer.reward.shape == (3 * 4, 3) and int(state.filled) == 0

    def spy_loss(params, traj, hparams, key):
        value, metrics = _mean_reward_loss(params, traj, hparams, key)
        return value, {**metrics, "columns": jnp.float32(traj.reward.shape[1]),
                       "smallest_reward": traj.reward.min()}

    first = None
    for i in range(4):
        state, metrics = fit(spy_loss, state, _window(offset=100.0 * (i + 1)), None, 0.1, 1.0,
                             jax.random.key(i), schedule)
        first = metrics if first is None else first
    assert int(state.filled) == 3
    # A ring of the 3 latest windows: 100, 200 and 300 went to slots 0, 1 and 2 (environment
    # rows 0, 4 and 8), then 400 overwrote the oldest (slot 0).
    np.testing.assert_allclose(state.buffer.reward[::4, 0], [400.0, 200.0, 300.0])
    assert int(state.cursor) == 1
    # Each step took num_envs / minibatches = 1 whole column; at the first call only the fresh
    # window was valid (offset 100), never the empty (zero) buffer slots.
    assert float(first["columns"]) == 1.0 and float(first["smallest_reward"]) >= 100.0


def test_window_draws_cover_the_fresh_window_and_the_filled_ring_uniformly():
    # 2 envs, 4 ring slots, 3 of them filled (two earlier windows and the fresh one): 6 valid
    # columns, each drawn with probability 1/6 (one column per draw); the empty slot never.
    schedule = FitSchedule(steps=1, minibatches=2, windows=4)
    state = init_fit_state({"c": jnp.float32(0.0)}, _window(num_envs=2), schedule)
    for offset in (100.0, 200.0):
        state, _ = fit(_mean_reward_loss, state, _window(num_envs=2, offset=offset), None, 0.0, 1.0,
                       jax.random.key(0), schedule)
    fresh = _window(num_envs=2, offset=300.0)
    state = fitting._push(state, fresh)
    draws = jax.vmap(lambda k: fitting._draw_columns(state, fresh, 1, k).reward[0, 0])(
        jax.random.split(jax.random.key(1), 6000))
    firsts = {float(v) for v in np.unique(draws)}
    expected = {float(fresh.reward[0, j]) for j in range(2)} | {
        float(state.buffer.reward[2 * s + j, 0]) for s in range(3) for j in range(2)}
    assert firsts == expected
    counts = np.array([np.mean(draws == v) for v in sorted(expected)])
    np.testing.assert_allclose(counts, 1 / 6, atol=0.025)
    # A drawn column is a whole column of one window: every step of it comes from that window.
    column = fitting._draw_columns(state, fresh, 1, jax.random.key(3)).reward[:, 0]
    assert np.all(np.isin(np.asarray(column), np.concatenate(
        [np.asarray(fresh.reward).ravel(), np.asarray(state.buffer.reward).ravel()])))


def test_bad_schedules_are_one_line_errors():
    with pytest.raises(ValueError, match="not divisible by estimator_fit_minibatches"):
        TrainConfig.from_flat(algo="a2c", num_envs=4, estimator_fit_minibatches=3).resolved()
    with pytest.raises(ValueError, match="estimator_fit_windows must be a positive"):
        EstimatorConfig(fit_windows=0).validate("estimator_")
    with pytest.raises(ValueError, match="redistribute_fit_steps must be a non-negative"):
        TrainConfig.from_flat(redistribute_fit_steps=-1).resolved()


# ---------------------------------------------------------------------------------------------
# Inside the engine: the fitted hindsight approaches the exact one (slow: a few compiles)
# ---------------------------------------------------------------------------------------------

FROZEN_POLICY = dict(lr=1e-7, gamma=1.0, ent_coef=0.0)


def _kl_unfitted_and_fitted(config_fields, fit_steps, updates, estimator_lr, seeds=2):
    """KL to the exact model after ``updates`` with the model's learning rate 1e-12 (Adam's step
    is about the rate: h stays π, the unfitted model) and ``estimator_lr``: one compiled
    program, called once per (rate, seed).

    The compile dominates these checks, and the unbatched program compiles in about half the
    time of the doubly vmapped one (same KL values to the printed digits)."""
    config = TrainConfig.from_flat(**config_fields, total_timesteps=config_fields["num_envs"]
                                   * config_fields["num_steps"] * updates, eval_every=updates // 4,
                                   eval_episodes=2, estimator_fit_steps=fit_steps, anneal_lr=False)
    train = jax.jit(make_engine(config).train)
    hparams = [Hparams.create(**FROZEN_POLICY, estimator_lr=lr) for lr in (1e-12, estimator_lr)]
    keys = jax.random.split(jax.random.key(3), seeds)
    kl = np.asarray([[train(key, hp)[1]["estimator/kl_to_exact"] for key in keys]
                     for hp in hparams])  # [2, seeds, updates]
    kl = kl[..., np.isfinite(kl).all(axis=(0, 1))]
    return kl[..., -2:].mean(axis=-1)  # the last two evaluations, one value per seed


@pytest.mark.slow
@pytest.mark.parametrize("name, fields, estimator_lr, fitted_below, unfitted_above", [
    # I(A; Z | s0) ≈ 0.03 nats at the uniform policy (σ = 1.5 makes the outcome ambiguous).
    # Many steps at a high rate overfit each fresh batch here: 4 steps at 1e-3.
    ("AmbiguousBandit return hindsight",
     dict(algo="a2c", estimator="hca_return", env="AmbiguousBandit", num_envs=256, num_steps=1),
     1e-3, 0.01, 0.02),
    # The return (± 1 plus small noise) reveals the first action: I(A_0; Z | s0) = log 2 at t = 0,
    # averaged over the 4 steps of an episode ≈ 0.17.
    ("DelayedEffect return hindsight",
     dict(algo="a2c", estimator="hca_return", env="DelayedEffect",
          env_options=(("n", 3), ("sigma", 0.1)), num_envs=64, num_steps=4),
     3e-3, 0.015, 0.1),
    # State hindsight on Shortcut's unaliased one-hot states.
    ("Shortcut state hindsight",
     dict(algo="a2c", estimator="hca_state", env="Shortcut", num_envs=64, num_steps=8),
     3e-3, 0.005, 0.05),
])
def test_fitted_hindsight_approaches_the_exact_model(name, fields, estimator_lr, fitted_below,
                                                     unfitted_above):
    """Within 80 updates of 4 fitting steps, the KL to the exact model falls below a threshold
    that the unfitted model (h = π, learning rate 1e-12) stays above."""
    unfitted, fitted = _kl_unfitted_and_fitted(fields, 4, 80, estimator_lr)
    assert np.all(unfitted > unfitted_above), (name, unfitted)
    assert np.all(fitted < fitted_below), (name, fitted, unfitted)


def test_the_engine_fits_on_a_ring_of_recent_windows():
    # 5 updates into a ring of 3 windows: full after 3, the cursor back at 5 mod 3 = 2; every
    # window the ring holds is one the run collected (its rewards are AmbiguousBandit's, never
    # the zeros it started with).
    config = TrainConfig.from_flat(algo="a2c", estimator="hca_return", env="AmbiguousBandit",
                                   num_envs=4, num_steps=2, total_timesteps=4 * 2 * 5,
                                   estimator_fit_windows=3, estimator_fit_minibatches=2,
                                   eval_every=0)
    state, metrics = jax.jit(make_engine(config).train)(jax.random.key(0), Hparams.create())
    fit_state = state.credit.estimator
    assert fit_state.buffer.reward.shape == (3 * 4, 2)
    assert int(fit_state.filled) == 3 and int(fit_state.cursor) == 2
    assert np.all(np.asarray(fit_state.buffer.reward) != 0.0)
    assert np.all(np.isfinite(np.asarray(metrics["estimator/loss"])))


def test_credit_before_the_fit_does_not_see_the_windows_own_fit():
    """With ``estimator_assign_before_fit`` the first update's credit comes from the initial
    model, so the agent's first step is the same whatever the model's learning rate; assigned
    after the fit (the default) it is not. One compiled program per order: the model's rate is
    a traced hyper-parameter, and at rate 0 (below what ``Hparams.create`` accepts, so set
    directly) its fit runs and leaves it exactly where it started."""
    def trainer(before: bool):
        config = TrainConfig.from_flat(algo="a2c", estimator="hca_return", env="AmbiguousBandit",
                                       num_envs=8, num_steps=1, total_timesteps=8, eval_every=0,
                                       estimator_assign_before_fit=before,
                                       estimator_fit_steps=4)
        train = jax.jit(make_engine(config).train)

        def first_step(estimator_lr: float):
            hparams = Hparams.create().replace(estimator_lr=jnp.float32(estimator_lr))
            state, _ = train(jax.random.key(0), hparams)
            return state.agent.params, state.credit.estimator.params
        return first_step

    def differ(a, b):
        return float(optax.global_norm(jax.tree.map(lambda x, y: x - y, a, b)))

    before, after = trainer(True), trainer(False)
    agent_slow, model_slow = before(0.0)
    agent_fast, model_fast = before(0.5)
    assert differ(model_slow, model_fast) > 1e-3  # the fit did move the model
    assert differ(agent_slow, agent_fast) == 0.0
    after_slow, _ = after(0.0)
    after_fast, _ = after(0.5)
    assert differ(after_slow, agent_slow) == 0.0  # no fit: the two orders agree
    assert differ(after_slow, after_fast) > 1e-6


def test_model_warmup_fits_the_model_while_the_agent_waits():
    """Two warm-up updates: the agent's parameters and optimiser stay at their initial values
    while the model fits; the third update moves the agent."""
    config = TrainConfig.from_flat(algo="a2c", estimator="hca_return", env="AmbiguousBandit",
                                   num_envs=8, num_steps=1, total_timesteps=8 * 3, eval_every=0,
                                   model_warmup_updates=2)
    engine = make_engine(config)
    hp = Hparams.create()
    init = engine.init(jax.random.key(0))
    step = jax.jit(lambda s: engine.run(s, hp, 1)[0])
    states = [init]
    for _ in range(3):
        states.append(step(states[-1]))

    def moved(a, b):
        return float(optax.global_norm(jax.tree.map(lambda x, y: x - y, a, b)))

    for s in states[1:3]:
        assert moved(s.agent, init.agent) == 0.0  # params and Adam moments alike
        assert moved(s.credit.estimator.params, init.credit.estimator.params) > 0
    assert moved(states[3].agent.params, init.agent.params) > 0
    with pytest.raises(ValueError, match="model_warmup_updates must be a non-negative"):
        TrainConfig(model_warmup_updates=-1).validate()

"""Tests of the training engine: losses (hand-checked values, identities), time-out bootstrapping,
algorithm plumbing, learned all-action estimators and determinism.

Compiles are the cost on CPU, so engine tests share a few tiny configurations.
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from conftest import bitwise_jit, init_and_train
from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.objectives import losses
from jaxcredit.networks import ActorCritic

LN = math.log


# ---------------------------------------------------------------------------------------------
# Losses: hand-checked values
# ---------------------------------------------------------------------------------------------

# π(·|s_0) = (1/2, 1/2), π(·|s_1) = (1/4, 3/4).
LOGITS = jnp.array([[0.0, 0.0], [0.0, LN(3.0)]])


def test_per_step_unclipped_policy_loss_hand_value():
    action = jnp.array([0, 1])
    advantage = jnp.array([2.0, -1.0])
    loss, _ = losses.policy_loss(LOGITS, action, advantage, jnp.log(jnp.array([0.5, 0.75])),
                                 LOGITS, 0.2, clip=False)
    # −mean(2 ln ½ − ln ¾)
    np.testing.assert_allclose(loss, -(2 * LN(0.5) - LN(0.75)) / 2, rtol=1e-6)


def test_per_step_clipped_policy_loss_hand_value():
    action = jnp.array([0, 0])
    advantage = jnp.array([2.0, -1.0])
    # ratios: ½ / ⅓ = 1.5 (clipped to 1.2, A > 0) and ¼ / ½ = 0.5 (clipped to 0.8, A < 0).
    behaviour_log_prob = jnp.log(jnp.array([1 / 3, 0.5]))
    loss, metrics = losses.policy_loss(LOGITS, action, advantage, behaviour_log_prob, LOGITS, 0.2,
                                       clip=True)
    # −mean(min(3, 2.4), min(−0.5, −0.8)) = −(2.4 − 0.8) / 2
    np.testing.assert_allclose(loss, -0.8, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_frac"], 1.0)
    np.testing.assert_allclose(metrics["approx_kl"],
                               ((0.5 - LN(1.5)) + (-0.5 - LN(0.5))) / 2, rtol=1e-5)


def test_all_action_policy_loss_hand_values():
    action = jnp.array([0, 0])
    advantage = jnp.array([[1.0, 3.0], [-2.0, 2.0]])
    behaviour_logits = jnp.zeros((2, 2))  # μ = (½, ½) in both states
    unclipped, _ = losses.policy_loss(LOGITS, action, advantage, jnp.log(jnp.array([0.5, 0.5])),
                                      behaviour_logits, 0.2, clip=False)
    # Σ_a π Â: s_0: ½·1 + ½·3 = 2; s_1: ¼·(−2) + ¾·2 = 1.
    np.testing.assert_allclose(unclipped, -(2.0 + 1.0) / 2, rtol=1e-6)
    clipped, _ = losses.policy_loss(LOGITS, action, advantage, jnp.log(jnp.array([0.5, 0.5])),
                                    behaviour_logits, 0.2, clip=True)
    # s_0: r ≡ 1 -> 2. s_1: r = (½, 3/2): ½·min(−1, −1.6) + ½·min(3, 2.4) = 0.4.
    np.testing.assert_allclose(clipped, -(2.0 + 0.4) / 2, rtol=1e-6)


def test_value_loss_hand_values():
    value, old, target = jnp.array([3.0, 1.1]), jnp.array([1.0, 1.0]), jnp.array([3.0, 0.0])
    np.testing.assert_allclose(losses.value_loss(value, old, target, 0.2, clip=False),
                               0.5 * (0.0 + 1.21) / 2, rtol=1e-6)
    # clipped: max(0, (1.2 − 3)²) = 3.24 and max(1.21, 1.21).
    np.testing.assert_allclose(losses.value_loss(value, old, target, 0.2, clip=True),
                               0.5 * (3.24 + 1.21) / 2, rtol=1e-6)


def test_entropy_and_explained_variance_hand_values():
    np.testing.assert_allclose(losses.entropy(LOGITS),
                               (LN(2) - (0.25 * LN(0.25) + 0.75 * LN(0.75))) / 2, rtol=1e-6)
    target = jnp.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(losses.explained_variance(target, target), 1.0)
    np.testing.assert_allclose(losses.explained_variance(jnp.full(4, 2.5), target), 0.0,
                               atol=1e-7)


def test_normalize_advantage():
    per_step = losses.normalize_advantage(jnp.array([1.0, 3.0]))
    np.testing.assert_allclose(per_step, [-1.0, 1.0], rtol=1e-6)
    all_action = losses.normalize_advantage(jnp.array([[1.0, 3.0], [1.0, 3.0]]))
    np.testing.assert_allclose(all_action, [[1.0, 3.0], [1.0, 3.0]], rtol=1e-6)  # std 1: scale only


# ---------------------------------------------------------------------------------------------
# Losses: identities on random inputs
# ---------------------------------------------------------------------------------------------


def test_gradients_at_behaviour_policy_match_unclipped_forms():
    """At θ = θ_old the clipped surrogates have the unclipped gradients, per step and all-action."""
    key_l, key_a, key_adv, key_all = jax.random.split(jax.random.key(0), 4)
    logits = jax.random.normal(key_l, (64, 5))
    action = jax.random.randint(key_a, (64,), 0, 5)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
    for advantage in (jax.random.normal(key_adv, (64,)), jax.random.normal(key_all, (64, 5))):
        def loss(lg, clip, adv=advantage):
            return losses.policy_loss(lg, action, adv, log_prob, logits, 0.2, clip)[0]

        grad = jax.jit(jax.grad(loss), static_argnums=1)
        np.testing.assert_allclose(grad(logits, True), grad(logits, False), rtol=1e-5, atol=1e-7)


def test_all_action_gradient_is_expected_per_step_gradient():
    """Σ_a π(a|s) Â(a) has the gradient E_{a~π}[∇ log π(a|s) Â(a)], computed exactly by
    enumerating every action as a per-step sample weighted by π."""
    logits = jax.random.normal(jax.random.key(1), (3, 4))
    advantage = jax.random.normal(jax.random.key(2), (3, 4))
    pi = jax.nn.softmax(logits)

    def all_action(lg):
        return losses.policy_loss(lg, jnp.zeros(3, int), advantage, jnp.zeros(3), logits, 0.2,
                                  False)[0]

    def enumerated(lg):
        total = 0.0
        for a in range(4):
            weighted = jax.lax.stop_gradient(pi[:, a]) * advantage[:, a]
            total += losses.policy_loss(lg, jnp.full(3, a), weighted, jnp.zeros(3), logits, 0.2,
                                        False)[0]
        return total

    np.testing.assert_allclose(jax.jit(jax.grad(all_action))(logits),
                               jax.jit(jax.grad(enumerated))(logits), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Time-outs bootstrap from V(final observation)
# ---------------------------------------------------------------------------------------------


@struct.dataclass
class CountState(environment.EnvState):
    time: jax.Array


@struct.dataclass
class ConstantParams(environment.EnvParams):
    max_steps_in_episode: int = 5


class ConstantReward(environment.Environment):
    """Reward 1 every step, never terminates, cut by a time limit; the observation is constant,
    so V cannot depend on time. True value: Σ γ^k = 1 / (1 − γ)."""

    @property
    def default_params(self):
        return ConstantParams()

    def step_env(self, key, state, action, params):
        state = CountState(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(1.0), jnp.bool_(False), {}

    def reset_env(self, key, params):
        state = CountState(time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.ones((1,), jnp.float32)

    @property
    def num_actions(self):
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)


GAMMA = 0.9
TRUE_VALUE = 1.0 / (1.0 - GAMMA)
CONSTANT_CONFIG = TrainConfig(algo="a2c", estimator="gae", env="ConstantReward", num_envs=4,
                              num_steps=12, total_timesteps=4 * 12 * 150, hidden_sizes=(8,),
                              anneal_lr=False)


def test_time_out_targets_bootstrap_from_final_observation():
    """With V ≡ 1/(1 − γ) the GAE targets are 1/(1 − γ) at every step, time-outs included. Had a
    time-out been treated as a terminal, its target would be the bare reward 1."""
    engine = make_engine(CONSTANT_CONFIG, env=ConstantReward())
    state = engine.init(jax.random.key(0))
    head = state.agent.params["params"]["critic"]["Dense_1"]
    head["kernel"] = jnp.zeros_like(head["kernel"])
    head["bias"] = jnp.full_like(head["bias"], TRUE_VALUE)
    hparams = Hparams.create(gamma=GAMMA, lambda_=0.95)
    batch = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    traj = batch.trajectory
    _, credit, _, _ = jax.jit(engine.assign_credit)(state, traj, hparams, jax.random.key(2))
    expected_truncated = np.zeros((12, 4), bool)
    expected_truncated[[4, 9]] = True  # episodes of 5 steps
    np.testing.assert_array_equal(traj.truncated, expected_truncated)
    assert not np.any(traj.terminated)
    np.testing.assert_allclose(traj.next_value, TRUE_VALUE, rtol=1e-6)
    np.testing.assert_allclose(credit.value_target, TRUE_VALUE, rtol=1e-6)
    np.testing.assert_allclose(credit.advantage, 0.0, atol=1e-5)
    assert int(batch.episodes.count) == 8
    np.testing.assert_allclose(batch.episodes.return_sum / batch.episodes.count, 5.0)


def test_learned_value_under_time_limit_is_not_time_dependent():
    """A2C's critic learns V ≈ 1/(1 − γ) = 10 on the time-limited constant-reward task (the
    truncation-as-termination error would give about 2.6, the mean of the cut returns)."""
    engine = make_engine(CONSTANT_CONFIG, env=ConstantReward())
    hparams = Hparams.create(gamma=GAMMA, lambda_=0.95, lr=0.03, max_grad_norm=10.0,
                             ent_coef=0.0)
    state, metrics = jax.jit(engine.train)(jax.random.key(0), hparams)
    value = engine.network.apply(state.agent.params, jnp.ones((1, 1)),
                                 method=ActorCritic.value)
    np.testing.assert_allclose(value, TRUE_VALUE, rtol=0.03)
    np.testing.assert_allclose(metrics["episode_length"][-10:], 5.0)
    np.testing.assert_allclose(metrics["episode_return"][-10:], 5.0)


# ---------------------------------------------------------------------------------------------
# Algorithms, metrics and determinism on CartPole
# ---------------------------------------------------------------------------------------------

TINY = dict(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6,
            hidden_sizes=(16,))


@pytest.mark.parametrize("algo", ["ppo", "a2c", "reinforce"])
def test_algorithms_run_deterministically(algo):
    config = TrainConfig.from_flat(algo=algo, estimator="mc" if algo == "reinforce" else "gae",
                                   **TINY)
    engine = make_engine(config)
    # At a2c this is chunked_run_equals_whole_run's whole run, compiled once for both.
    jitted = bitwise_jit(init_and_train, static_argnums=0)
    train = lambda key, hp: jitted(engine, key, hp)[1]  # noqa: E731
    hparams = Hparams.create()
    state_a, metrics_a = train(jax.random.key(3), hparams)
    state_b, metrics_b = train(jax.random.key(3), hparams)
    _, metrics_c = train(jax.random.key(4), hparams)
    chex.assert_trees_all_equal(metrics_a, metrics_b)  # same seed, same result (bitwise)
    chex.assert_trees_all_equal(state_a.agent.params, state_b.agent.params)
    assert not np.array_equal(metrics_a["loss"], metrics_c["loss"])
    expected = {"loss", "policy_loss", "entropy", "approx_kl", "clip_frac", "grad_norm", "lr",
                "episode_return", "episode_length", "episodes", "credit/advantage_mean"}
    assert expected <= set(metrics_a)
    assert ("value_loss" in metrics_a) == (algo != "reinforce")
    for name, value in metrics_a.items():
        assert value.shape == (6,), name
        if not name.startswith(("episode_", "eval/")):
            assert np.all(np.isfinite(value)), name
    np.testing.assert_array_equal(state_a.update, 6)
    # lr anneals linearly from lr to lr / U.
    np.testing.assert_allclose(metrics_a["lr"], 2.5e-4 * (1 - np.arange(6) / 6), rtol=1e-6)


def test_chunked_run_equals_whole_run():
    """Two chunks of ``Engine.run`` give bit-identical results to one scan over all updates."""
    # The whole run is test_algorithms_run_deterministically[a2c]'s program (same config,
    # hyper-parameters as arguments, bitwise_jit's compile level), which the session's compile
    # cache then holds already; it returns the state it starts from, where the chunks start too.
    engine = make_engine(TrainConfig.from_flat(algo="a2c", estimator="gae", **TINY))
    hparams = Hparams.create()
    init, whole = bitwise_jit(init_and_train, static_argnums=0)(engine, jax.random.key(5),
                                                                 hparams)
    run3 = bitwise_jit(engine.run, static_argnums=2)
    state, first = run3(init, hparams, 3)
    state, second = run3(state, hparams, 3)
    chex.assert_trees_all_equal(whole[1], jax.tree.map(lambda a, b: jnp.concatenate([a, b]),
                                                       first, second))
    chex.assert_trees_all_equal(whole[0].agent.params, state.agent.params)


def test_blocked_scan_without_evaluation_equals_one_flat_scan():
    """With no evaluation the updates run as a scan of SCAN_BLOCK-update scans (for speed): two
    whole blocks and a partial one give the numbers of one flat scan, bit for bit."""
    from jaxcredit.agents.runs import SCAN_BLOCK

    updates = 2 * SCAN_BLOCK + 3
    engine = make_engine(TrainConfig.from_flat(algo="a2c",
                                               **{**TINY, "total_timesteps": 64 * updates},
                                               eval_every=0))
    hparams = Hparams.create()
    state = engine.init(jax.random.key(2))
    blocked = bitwise_jit(lambda s: engine.run(s, hparams, updates))(state)
    flat = bitwise_jit(lambda s: jax.lax.scan(lambda c, _: engine.update_step(c, hparams), s,
                                              None, updates))(state)
    chex.assert_trees_all_equal(blocked[1], flat[1])
    chex.assert_trees_all_equal(blocked[0].agent.params, flat[0].agent.params)
    assert blocked[1]["loss"].shape == (updates,)


def test_learned_all_action_estimator_is_trained_in_the_same_step():
    """PPO with all-action return-HCA: [T, N, A] credit reaches the clipped all-action loss, and
    the hindsight model's parameters move under its own loss."""
    config = TrainConfig.from_flat(algo="ppo", estimator="hca_return",
                                   estimator_options=(("form", "all_action"), ("hidden", (16,))),
                                   num_minibatches=2, update_epochs=2,
                                   eval_every=0,  # smaller program
                                   **TINY)
    engine = make_engine(config)
    assert engine.estimator.all_action and engine.estimator.learned
    hparams = Hparams.create()
    init, (state, metrics) = jax.jit(init_and_train, static_argnums=0)(engine, jax.random.key(0),
                                                                        hparams)
    window = jax.eval_shape(engine.collect, init, hparams, jax.random.key(1))
    _, credit, _, _ = jax.eval_shape(engine.assign_credit, init, window.trajectory, hparams,
                                     jax.random.key(2))
    assert credit.advantage.shape == (16, 4, 2)
    assert {"estimator/loss", "estimator/hindsight_loss"} <= set(metrics)
    assert np.all(np.isfinite(metrics["loss"]))
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), init.credit.estimator.params,
                         state.credit.estimator.params)
    assert max(jax.tree.leaves(moved)) > 0


def test_bad_configs_raise_one_line_value_errors():
    bad = [
        (dict(algo="sac"), "unknown algo"),
        (dict(num_envs=0), "num_envs must be a positive integer"),
        (dict(num_envs=1, num_steps=6), "not divisible by num_minibatches"),
        (dict(algo="a2c", num_envs=6, estimator_fit_minibatches=4),
         "not divisible by estimator_fit_minibatches"),
        (dict(estimator_fit_steps=-1), "estimator_fit_steps must be a non-negative"),
        (dict(total_timesteps=10), "less than one update"),
        (dict(hidden_sizes=(0,)), "hidden_sizes"),
        (dict(activation="swish2"), "unknown activation"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            TrainConfig.from_flat(**kwargs).resolved()
    with pytest.raises(ValueError, match="lambda must lie in"):
        Hparams.create(lambda_=1.5)
    with pytest.raises(ValueError, match="gamma must lie in"):
        Hparams.create(gamma=-0.1)
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        Hparams.create(learning_rate=1.0)
    with pytest.raises(ValueError, match="unknown estimator"):
        make_engine(TrainConfig(estimator="nope"))

"""Learning checks on probe tasks (slow): PPO+GAE learns DelayedEffect, A2C solves Catch-bsuite,
REINFORCE improves on the ambiguous bandit (the long CartPole runs of PPO and DQN at PureJaxRL's
settings are experiments/cartpole_baselines). One compile per check; the Catch and bandit checks
read the training returns, so their runs do not evaluate (a smaller program)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import sweep
from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.networks import ActorCritic
from jaxcredit.plotting import forward_fill

pytestmark = pytest.mark.slow


def final_returns(config, settings, num_seeds, last=10):
    """Per-seed mean episode return over the first and the last ``last`` updates."""
    engine = make_engine(config)
    population = sweep.make_population([settings], num_seeds, seed=0)
    _, metrics = sweep.run_sweep(engine, population, pad=True)
    returns = forward_fill(np.asarray(metrics["episode_return"], np.float64))
    return np.nanmean(returns[:, :last], axis=1), np.nanmean(returns[:, -last:], axis=1)


def test_ppo_gae_learns_delayed_effect():
    """The first action alone decides the reward 8 steps later, under reward noise (σ = 1):
    the exact probability of the right first action (from the DP model) must go from about ½
    to ≥ 0.95 on every seed within 40 updates of 16 episodes. (PPO solving CartPole-v1 at
    PureJaxRL's settings, 5e5 steps, is experiments/cartpole_baselines.)"""
    config = TrainConfig.from_flat(algo="ppo", estimator="gae", env="DelayedEffect",
                                   env_options=(("n", 8), ("sigma", 1.0)), num_envs=16, num_steps=9,
                                   total_timesteps=16 * 9 * 40, eval_every=4, hidden_sizes=(32,))
    hparams = Hparams.create(lr=3e-3, gamma=1.0, lambda_=0.95)
    # One seed per call of one unbatched program (compiles faster than the vmapped one).
    train = jax.jit(make_engine(config).train)
    p = np.stack([np.asarray(train(key, hparams)[1]["eval/p_optimal_first_action"])
                  for key in jax.random.split(jax.random.key(0), 4)])
    p = p[:, ~np.isnan(p[0])]  # the 10 evaluations
    assert p[:, 0].mean() < 0.8, p[:, 0]  # measured: 0.70 after 4 updates
    assert np.all(p[:, -1] >= 0.95), p[:, -1]  # measured: 0.97-0.99


def test_a2c_solves_catch():
    """Catch-bsuite returns ±1 per episode; solved = mean return ≥ 0.9 across seeds."""
    first, last = final_returns(
        TrainConfig.from_flat(algo="a2c", estimator="gae", env="Catch-bsuite", num_envs=16,
                              num_steps=16, total_timesteps=100_000, eval_every=0),
        {"lr": 2e-3, "ent_coef": 0.01}, num_seeds=4)
    assert np.all(first < 0.0), first  # a random policy mostly misses
    assert last.mean() >= 0.9 and last.min() >= 0.8, last


def test_reinforce_improves_on_ambiguous_bandit():
    """No critic, Monte-Carlo credit. The uniform policy earns 1.5 per episode and the optimal
    one 1.9 (σ = 1.5 reward noise): π(HI | start) must move from ½ to ≥ 0.9 on every seed."""
    config = TrainConfig.from_flat(algo="reinforce", estimator="mc", env="AmbiguousBandit",
                                   num_envs=32, num_steps=4, total_timesteps=20_000, eval_every=0)
    engine = make_engine(config)
    population = sweep.make_population([{"lr": 1e-2, "ent_coef": 0.0}], 4, seed=0)
    states, metrics = sweep.run_sweep(engine, population, pad=True)
    start = jnp.array([1.0, 0.0, 0.0])
    pi_hi = jax.vmap(lambda p: jax.nn.softmax(engine.network.apply(
        p, start, method=ActorCritic.policy))[0])(states.agent.params)
    assert np.all(pi_hi >= 0.9), pi_hi
    returns = np.asarray(metrics["episode_return"])
    assert np.nanmean(returns[:, -20:]) > 1.7, returns[:, -20:].mean(1)

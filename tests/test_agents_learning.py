"""Learning checks (slow): PPO+GAE solves CartPole-v1 within 5e5 steps, A2C solves Catch-bsuite,
REINFORCE improves on the ambiguous bandit. Seeds are vmapped, one compile per check; the
checks read the training returns, so the runs do not evaluate (a smaller program)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import sweep
from jaxcredit.agents import TrainConfig, make_engine
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


def test_ppo_gae_solves_cartpole_within_5e5_steps():
    """PureJaxRL's default PPO setup; at least 3 of 4 seeds average ≥ 475 at the end."""
    _, last = final_returns(TrainConfig(algo="ppo", estimator="gae", env="CartPole-v1",
                                        total_timesteps=500_000, eval_every=0), {},
                                num_seeds=4)
    assert np.sum(last >= 475) >= 3, last


def test_a2c_solves_catch():
    """Catch-bsuite returns ±1 per episode; solved = mean return ≥ 0.9 across seeds."""
    first, last = final_returns(
        TrainConfig(algo="a2c", estimator="gae", env="Catch-bsuite", num_envs=16, num_steps=16,
                    total_timesteps=100_000, eval_every=0),
        {"lr": 2e-3, "ent_coef": 0.01}, num_seeds=4)
    assert np.all(first < 0.0), first  # a random policy mostly misses
    assert last.mean() >= 0.9 and last.min() >= 0.8, last


def test_reinforce_improves_on_ambiguous_bandit():
    """No critic, Monte-Carlo credit. The uniform policy earns 1.5 per episode and the optimal
    one 1.9 (σ = 1.5 reward noise): π(HI | start) must move from ½ to ≥ 0.9 on every seed."""
    config = TrainConfig(algo="reinforce", estimator="mc", env="AmbiguousBandit", num_envs=32,
                         num_steps=4, total_timesteps=20_000, eval_every=0)
    engine = make_engine(config)
    population = sweep.make_population([{"lr": 1e-2, "ent_coef": 0.0}], 4, seed=0)
    states, metrics = sweep.run_sweep(engine, population, pad=True)
    start = jnp.array([1.0, 0.0, 0.0])
    pi_hi = jax.vmap(lambda p: jax.nn.softmax(engine.network.apply(
        p, start, method=ActorCritic.policy))[0])(states.agent.params)
    assert np.all(pi_hi >= 0.9), pi_hi
    returns = np.asarray(metrics["episode_return"])
    assert np.nanmean(returns[:, -20:]) > 1.7, returns[:, -20:].mean(1)

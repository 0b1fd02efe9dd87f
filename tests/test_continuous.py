"""Continuous actions in the on-policy engine: what the rollout stores and sends, a quick learning
check on a one-step probe, and the stages that need discrete actions refused in one line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents.agent_network import make_agent_network
from jaxcredit.agents.rollout import reset_runner, rollout
from jaxcredit.policies import ActionDistribution


@struct.dataclass
class ProbeState(environment.EnvState):
    target: jax.Array


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 1


class TargetProbe(environment.Environment):
    """One-step episodes: observe a target c ~ U(−0.8, 0.8), act a ∈ [−1, 1], get −(a − c)²
    (a random Gaussian policy scores about −1.2 with σ = 1 and clipping; the optimum 0)."""

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def reset_env(self, key, params):
        target = jax.random.uniform(key, (), minval=-0.8, maxval=0.8)
        state = ProbeState(time=0, target=target)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = -jnp.square(action[0] - state.target)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, jnp.bool_(True), {}

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.target], jnp.float32)

    def is_truncated(self, state, params):
        return jnp.bool_(False)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


def test_the_rollout_stores_the_unclipped_sample_and_sends_the_clipped_action():
    env = TargetProbe()
    params = env.default_params
    law = ActionDistribution("gaussian", 1, (-1.0,), (1.0,))
    runner = reset_runner(env, params, jax.random.key(0), 64, ())

    def policy(memory, obs, first):  # mean 0.9, σ = 1: about half the samples lie past 1
        return memory, jnp.broadcast_to(jnp.array([0.9, 0.0]), (obs.shape[0], 2))

    _, traj, _ = rollout(env, params, policy, runner, jax.random.key(1), 3, distribution=law)
    assert traj.action.shape == (3, 64, 1) and traj.action.dtype == jnp.float32
    assert traj.logits.shape == (3, 64, 2)
    assert (jnp.abs(traj.action) > 1.0).mean() > 0.3  # stored as sampled, unclipped
    sent = jnp.clip(traj.action[..., 0], -1.0, 1.0)
    np.testing.assert_allclose(traj.reward, -jnp.square(sent - traj.obs[..., 0]), rtol=1e-6)
    np.testing.assert_allclose(traj.log_prob, law.log_prob(traj.logits, traj.action), rtol=1e-6)


@pytest.mark.slow
def test_ppo_learns_the_continuous_probe_and_evaluation_plays_the_mean():
    config = TrainConfig.from_flat(algo="ppo", env="TargetProbe", num_envs=16, num_steps=8,
                                   total_timesteps=16 * 8 * 120, hidden_sizes=(32, 32),
                                   eval_every=40, eval_episodes=64)
    engine = make_engine(config, TargetProbe(), ProbeParams())
    state, metrics = jax.jit(engine.train)(jax.random.key(0), Hparams(lr=3e-3, ent_coef=0.0))
    evaluated = ~np.isnan(np.asarray(metrics["eval/return"]))
    greedy = np.asarray(metrics["eval/return_greedy"])[evaluated]
    sampled = np.asarray(metrics["eval/return"])[evaluated]
    # The initial mean is about 0 (a 0.01-gain head), whose greedy return is −E[c²] = −0.21.
    assert greedy[-1] > -0.02, greedy  # the mean tracks the target
    # Sampled episodes pay for σ: E[−(a − c)²] = −(bias² + σ²) < the greedy return.
    assert sampled[-1] < greedy[-1]
    log_std = state.agent.params["params"]["head"]["log_std"]
    assert float(log_std[0]) < -0.3  # σ shrank from its initial 1


def test_a_squashed_policy_with_state_dependent_std_runs_in_the_engine():
    config = TrainConfig.from_flat(algo="a2c", env="TargetProbe", num_envs=4, num_steps=4,
                                   total_timesteps=4 * 4 * 2, hidden_sizes=(8, 8),
                                   action_dist="tanh_gaussian_state", eval_every=2,
                                   eval_episodes=2)
    engine = make_engine(config, TargetProbe(), ProbeParams())
    state, metrics = jax.jit(engine.train)(jax.random.key(0), Hparams())
    assert np.isfinite(np.asarray(metrics["eval/return"])[-1])
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    assert "head" not in state.agent.params["params"]  # log σ is the actor's, not a parameter


def test_a_recurrent_network_gives_gaussian_parameters():
    law = ActionDistribution("gaussian", 2, (-1.0,) * 2, (1.0,) * 2)
    net = make_agent_network("gru", law, (8, 8), "relu", 1, 0.0)
    obs, first = jnp.ones((5, 3, 4)), jnp.zeros((5, 3), bool)
    params = net.init(jax.random.key(0), obs[0])
    logits, value = net.outputs(params, net.initial_memory(3), obs, first)
    assert logits.shape == (5, 3, 4) and value.shape == (5, 3)
    # The learned log σ (initially 0) fills the second half in every state.
    np.testing.assert_array_equal(logits[..., 2:], 0.0)
    _, one = net.act(params, net.initial_memory(3), obs[0], first[0])
    np.testing.assert_allclose(one, logits[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("changes, message", [
    (dict(estimator="hca_return"), "estimator 'hca_return' needs discrete actions"),
    (dict(estimator="cocoa_feature"), "estimator 'cocoa_feature' needs discrete actions"),
    (dict(policy_epsilon=0.05), "continuous actions have no such mixture"),
    (dict(action_dist="categorical"), "'categorical' needs discrete actions"),
    (dict(algo="dqn"), "--algo dqn needs discrete actions"),
])
def test_stages_that_need_discrete_actions_are_refused(changes, message):
    config = TrainConfig(env="TargetProbe", num_envs=4, num_steps=4, total_timesteps=64,
                         **changes)
    with pytest.raises(ValueError, match=message):
        make_engine(config, TargetProbe(), ProbeParams())

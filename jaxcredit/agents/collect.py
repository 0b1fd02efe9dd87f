"""Collecting a window: act with the current policy, then evaluate the critic on it.

``make_collect`` gives the engine's ``collect(state, hparams, key) -> Window``: a rollout of T
steps of N environments (``jaxcredit.agents.rollout``; with episodic credit every window starts
fresh episodes, in groups that share a task instance), then V(s_t) and V(s'_{t+1}) on the whole
window in two batched calls (``with_values``), and, where a credit stage reads it, the recurrent
agent's state at every step.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from jaxcredit.agents.agent_network import AgentNetwork, first_steps
from jaxcredit.agents.rollout import reset_groups, reset_runner, rollout
from jaxcredit.agents.state import Window
from jaxcredit.policies import ActionDistribution
from jaxcredit.types import Trajectory

Array = jax.Array


def make_collect(env: Any, env_params: Any, agent_net: AgentNetwork, law: ActionDistribution,
                 num_steps: int, num_envs: int, group_size: int, episodic: bool,
                 state_index: Optional[Callable], success: Optional[Callable], critic: bool,
                 record_agent_state: bool):
    """``(collect, with_values)``: ``collect(state, hparams, key) -> Window`` and
    ``with_values(agent_params, trajectory, memory, first) -> trajectory`` (module docstring)."""

    def with_values(agent_params, traj: Trajectory, memory, first) -> Trajectory:
        if not critic and not record_agent_state:
            zeros = jnp.zeros_like(traj.reward)
            return traj.replace(value=zeros, next_value=zeros)
        value, next_value, agent_state, reads = agent_net.window(
            agent_params, memory, traj.obs, first, traj.next_obs, critic=critic)
        if record_agent_state:
            traj = traj.replace(agent_state=jax.lax.stop_gradient(agent_state),
                                memory_reads=jax.lax.stop_gradient(reads))
        return traj.replace(value=value, next_value=next_value)

    def collect(state, hparams, key: Array) -> Window:
        act_key, _ = jax.random.split(key)  # (the second key was the relabel stage's)

        def policy(memory, obs, first):
            return agent_net.act(state.agent.params, memory, obs, first)

        runner = state.runner
        if episodic:
            # Every window is one whole episode per environment, groups sharing an instance.
            act_key, reset_key = jax.random.split(act_key)
            fresh = agent_net.initial_memory(num_envs)
            runner = (reset_groups(env, env_params, reset_key, num_envs, group_size, fresh)
                      if hasattr(env, "reset_to_instance")
                      else reset_runner(env, env_params, reset_key, num_envs, fresh)
                      ).replace(normalizer=state.runner.normalizer)
        start = runner
        runner, traj, episodes = rollout(env, env_params, policy, runner, act_key, num_steps,
                                         state_index, success, law, hparams.gamma)
        first = first_steps(start.first, traj.done)
        traj = with_values(state.agent.params, traj, start.memory, first)
        return Window(trajectory=traj, runner=runner, episodes=episodes, memory=start.memory,
                      first=first)

    return collect, with_values

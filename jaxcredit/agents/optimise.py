"""OPTIMISE: epochs × minibatches of Adam steps of the agent on the objective's loss.

Minibatches. A memoryless agent's objective sees minibatches of transitions shuffled over the
whole ``T × N`` window (as PureJaxRL's and CleanRL's PPO do). A recurrent agent's sees whole
sequences: the N environments are shuffled into M minibatches of N / M, and each is re-run
from the memory it started the window with (PureJaxRL's ``ppo_rnn.py``), so the policy the
loss differentiates is the one that acted, given the same history.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxcredit.agents.agent_network import AgentNetwork
from jaxcredit.agents.state import AgentState
from jaxcredit.fitting import adam_step
from jaxcredit.objectives import Objective, PolicyOutputs
from jaxcredit.types import Credit, Trajectory

Array = jax.Array


def objective_batch(traj: Trajectory, credit: Credit) -> tuple[Trajectory, Credit]:
    """What the objective reads of the window, per step ``[T, N, ...]``."""
    return (traj.replace(next_obs=None, state=None, extras=None, agent_state=None,
                         memory_reads=None),
            Credit(advantage=credit.advantage, value_target=credit.value_target))


def flatten_steps(tree: Any) -> Any:
    """``[T, N, ...] -> [T·N, ...]`` on every leaf."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def minibatch_loss(network: AgentNetwork, objective: Objective, params: Any, batch: Trajectory,
                   credit: Credit, hparams: Any, memory: Any = (), first: Any = None):
    """``(loss, metrics)`` of the objective on a batch: transitions ``[B, ...]`` for a
    memoryless agent, sequences ``[T, B, ...]`` re-run from ``memory`` (with ``first``, the
    episode starts) for a recurrent one."""
    logits, value, auxiliary, auxiliary_metrics = network.training_outputs(
        params, memory, batch.obs, first)
    outputs = PolicyOutputs(logits, value)
    if network.recurrent:
        outputs, batch, credit = flatten_steps((outputs, batch, credit))
    loss, metrics = objective.loss(outputs, batch, credit, hparams)
    if auxiliary_metrics:  # the network's own loss (rma: reconstruction, read strengths)
        loss = loss + auxiliary
        metrics = {**metrics, **auxiliary_metrics}
    return loss, {**metrics, "loss": loss}


def _minibatches(network: AgentNetwork, key: Array, data: tuple, num_minibatches: int):
    """One epoch's minibatches, stacked on a leading axis M."""
    per_step, memory, first = data
    if not network.recurrent:  # transitions over the whole window
        flat = flatten_steps(per_step)
        perm = jax.random.permutation(key, flat[0].reward.shape[0])
        batches = jax.tree.map(
            lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:]),
            flat)
        return batches, (), None
    perm = jax.random.permutation(key, per_step[0].reward.shape[1])  # whole environments

    def over_time(x):  # [T, N, ...] -> [M, T, N / M, ...]
        x = jnp.take(x, perm, axis=1)
        x = x.reshape((x.shape[0], num_minibatches, -1) + x.shape[2:])
        return jnp.swapaxes(x, 0, 1)

    def over_envs(x):  # [N, ...] -> [M, N / M, ...]
        return jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:])

    return (jax.tree.map(over_time, per_step), jax.tree.map(over_envs, memory),
            over_time(first))


def optimise(network: AgentNetwork, objective: Objective, agent: AgentState, traj: Trajectory,
             credit: Credit, memory: Any, first: Array, key: Array, hparams: Any, lr: Array,
             epochs: int, num_minibatches: int, adam_eps: float):
    """The agent after ``epochs`` passes of ``num_minibatches`` Adam steps over the window
    (module docstring); ``memory`` and ``first`` are the window's starting memory and its
    episode starts. Returns ``(AgentState, metrics averaged over the steps)``."""
    data = (objective_batch(traj, credit), memory, first)

    def epoch(carry, epoch_key):
        def minibatch(carry, batch):
            params, opt_state = carry
            (mb, mb_credit), mb_memory, mb_first = batch
            grads, metrics = jax.grad(
                lambda p: minibatch_loss(network, objective, p, mb, mb_credit, hparams,
                                         mb_memory, mb_first), has_aux=True)(params)
            params, opt_state, grad_norm = adam_step(
                params, opt_state, grads, lr, hparams.max_grad_norm, adam_eps,
                hparams.weight_decay)
            return (params, opt_state), {**metrics, "grad_norm": grad_norm}

        return jax.lax.scan(minibatch, carry,
                            _minibatches(network, epoch_key, data, num_minibatches))

    (params, opt_state), metrics = jax.lax.scan(
        epoch, (agent.params, agent.opt_state), jax.random.split(key, epochs))
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["lr"] = lr
    return AgentState(params, opt_state), metrics

"""The agent's network behind one interface, memoryless (``mlp``) or recurrent (``gru``, ``lstm``,
``lru``, and ``rma``: a controller with an external memory read by attention, ``jaxcredit.rma``).

The engine acts, evaluates the critic and optimises through :class:`AgentNetwork` and never asks
which kind it holds:

* ``act(params, memory, obs, first)`` — one step of every environment: ``(memory, logits)``.
  The memoryless policy returns ``memory`` as it came (``()``).
* ``outputs(params, memory, obs, first)`` — logits and V over a ``[T, B]`` window.
* ``values(params, memory, obs, first, next_obs)`` — V(s_t) and V(s'_{t+1}) over the window.

``memory`` is the recurrent state at the window's first step and ``first[t]`` marks the steps
that start an episode (the memory is zeroed there). A recurrent window is re-run from its
starting memory wherever the engine needs the network's outputs on it, so the values and the
policy the objective optimises are the ones the agent acted with (Kapturowski et al. 2019's
"stored state" scheme without burn-in; PureJaxRL's ``ppo_rnn.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import rma
from jaxcredit.networks import CELLS, ActorCritic, RecurrentActorCritic, initial_memory
from jaxcredit.policies import ActionDistribution

Array = jax.Array
POLICIES = ("mlp",) + CELLS + ("rma",)


def first_steps(start_first: Array, done: Array) -> Array:
    """``first [T, B]``: the window's first step where ``start_first`` says an episode starts,
    then every step that follows an episode end."""
    return jnp.concatenate([start_first[None], done[:-1]], axis=0)


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """The flax ``module`` (``ActorCritic``, ``RecurrentActorCritic`` or ``rma.MemoryAgent``) and
    how to run it."""

    module: Any
    policy: str = "mlp"

    @property
    def recurrent(self) -> bool:
        return self.policy != "mlp"

    def initial_memory(self, batch: int) -> Any:
        """The memory of ``batch`` fresh episodes (``()`` for the memoryless policy)."""
        if not self.recurrent:
            return ()
        width = self.module.hidden_sizes[0]
        if self.policy == "rma":
            return rma.initial_memory(width, width, self.module.memory_rows, batch)
        return initial_memory(self.policy, width, batch)

    def init(self, key: Array, obs: Array) -> Any:
        """Parameters, from a batch of observations ``[B, *obs_shape]``."""
        if not self.recurrent:
            return self.module.init(key, obs)
        first = jnp.ones((1, obs.shape[0]), bool)
        method = rma.MemoryAgent.everything if self.policy == "rma" else None
        return self.module.init(key, self.initial_memory(obs.shape[0]), obs[None], first,
                                method=method)

    def act(self, params: Any, memory: Any, obs: Array, first: Array,
            target: bool = False) -> tuple[Any, Array]:
        """``(memory, logits [B, A])`` of one step; ``target`` gives the actor's own policy
        (no exploration mixture), what evaluation plays."""
        if not self.recurrent:
            method = ActorCritic.target_policy if target else ActorCritic.policy
            return memory, self.module.apply(params, obs, method=method)
        memory, logits, _ = self.module.apply(params, memory, obs[None], first[None], target)
        return memory, logits[0]

    def outputs(self, params: Any, memory: Any, obs: Array, first: Array
                ) -> tuple[Array, Array]:
        """``(logits [T, B, A], value [T, B])`` of the behaviour policy over a window."""
        if not self.recurrent:
            return self.module.apply(params, obs)
        _, logits, value = self.module.apply(params, memory, obs, first)
        return logits, value

    def values(self, params: Any, memory: Any, obs: Array, first: Array, next_obs: Array
               ) -> tuple[Array, Array]:
        """``(V(s_t), V(s'_{t+1}))`` over a window, each ``[T, B]``."""
        value, next_value, _, _ = self.window(params, memory, obs, first, next_obs)
        return value, next_value

    @property
    def state_size(self) -> int:
        """F, the width of the agent state :meth:`window` gives (the recurrent core's output;
        0 for the memoryless policy)."""
        if self.policy == "rma":
            return rma.state_size(self.module.hidden_sizes)
        return self.module.hidden_sizes[0] if self.recurrent else 0

    @property
    def read_shape(self) -> Any:
        """``(H, R)`` of the memory reads (``rma``), else None."""
        return (rma.NUM_READS, self.module.memory_rows) if self.policy == "rma" else None

    def window(self, params: Any, memory: Any, obs: Array, first: Array, next_obs: Array,
               critic: bool = True) -> tuple[Array, Array, Any, Any]:
        """``(V(s_t), V(s'_{t+1}), agent state [T, B, F], MemoryReads)`` over a window from one
        run of the recurrent core (the agent state is None for the memoryless policy, the reads
        None but for ``rma``; the values are zeros without ``critic``)."""
        zeros = jnp.zeros(first.shape, jnp.float32)
        if not self.recurrent:
            if not critic:
                return zeros, zeros, None, None
            return (self.module.apply(params, obs, method=ActorCritic.value),
                    self.module.apply(params, next_obs, method=ActorCritic.value), None, None)

        def run(module):
            reads = None
            if self.policy == "rma":
                _, (states, outputs, reads) = module.unroll_with_reads(memory, obs, first)
            else:
                _, (states, outputs) = module.unroll(memory, obs, first)
            if not critic:
                return zeros, zeros, outputs, reads
            _, value = module.heads(outputs)
            return value, module.next_value(states, next_obs), outputs, reads

        return self.module.apply(params, method=run)

    def training_outputs(self, params: Any, memory: Any, obs: Array, first: Array
                         ) -> tuple[Array, Array, Array, dict]:
        """``(logits, value, auxiliary loss, its metrics)`` over a window: what the objective
        differentiates. Only ``rma`` has an auxiliary loss (``rma.MemoryAgent.auxiliary_loss``);
        the others give 0."""
        if self.policy != "rma":
            logits, value = self.outputs(params, memory, obs, first)
            return logits, value, jnp.zeros((), jnp.float32), {}

        def run(module):
            _, (_, features, reads) = module.unroll_with_reads(memory, obs, first)
            logits, value = module.heads(features)
            return (logits, value) + module.auxiliary_loss(features, reads, obs)

        return self.module.apply(params, method=run)


def check_policy(policy: str, off_policy: bool, meta_gradient: bool, num_envs: int,
                 num_minibatches) -> None:
    """A one-line ValueError where a config cannot run ``policy``: a recurrent policy is for
    the on-policy learners without the meta-gradient, with minibatches of whole environments."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {list(POLICIES)}")
    if policy == "mlp":
        return
    if off_policy:
        raise ValueError(f"the off-policy learners have a feed-forward Q-network; --policy "
                         f"{policy} is for the on-policy learners")
    if meta_gradient:
        raise ValueError(f"--meta-gradient differentiates a step on transitions; it has no "
                         f"sequence form for --policy {policy} yet")
    if num_minibatches is not None and num_envs % num_minibatches:
        raise ValueError(f"--policy {policy} takes minibatches of whole environments: "
                         f"num_minibatches={num_minibatches} must divide num_envs={num_envs}")


def make_agent_network(policy: str, distribution: ActionDistribution, hidden_sizes,
                       activation: str, obs_ndim: int, epsilon: float,
                       obs_shape: Any = None, horizon: Any = None) -> AgentNetwork:
    """The network of ``TrainConfig.policy`` with the policy head of ``distribution``;
    ``rma`` also needs the observation's shape (its decoder) and the episode's length (one
    memory row per step)."""
    if distribution.continuous and epsilon > 0:
        raise ValueError("policy_epsilon mixes the categorical policy with the uniform one; "
                         "continuous actions have no such mixture")
    # A categorical head is the modules' default (distribution=None): the same parameters.
    law = distribution if distribution.continuous else None
    size = distribution.action_dim
    if policy == "mlp":
        module = ActorCritic(size, hidden_sizes, activation, obs_ndim=obs_ndim, epsilon=epsilon,
                             distribution=law)
    elif policy in CELLS:
        module = RecurrentActorCritic(size, tuple(hidden_sizes), activation, obs_ndim=obs_ndim,
                                      epsilon=epsilon, cell=policy, distribution=law)
    elif policy == "rma":
        module = rma.MemoryAgent(size, tuple(hidden_sizes), activation, obs_ndim=obs_ndim,
                                 epsilon=epsilon, memory_rows=rma.check_rows(horizon),
                                 obs_size=int(np.prod(obs_shape or (1,))), distribution=law)
    else:
        raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")
    return AgentNetwork(module, policy)

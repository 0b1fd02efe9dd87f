"""The agent's network behind one interface, memoryless (``mlp``) or recurrent (``gru``, ``lstm``,
``lru``).

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

from jaxcredit.networks import CELLS, ActorCritic, RecurrentActorCritic, initial_memory
from jaxcredit.policies import ActionDistribution

Array = jax.Array
POLICIES = ("mlp",) + CELLS


def first_steps(start_first: Array, done: Array) -> Array:
    """``first [T, B]``: the window's first step where ``start_first`` says an episode starts,
    then every step that follows an episode end."""
    return jnp.concatenate([start_first[None], done[:-1]], axis=0)


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """The flax ``module`` (``ActorCritic`` or ``RecurrentActorCritic``) and how to run it."""

    module: Any
    policy: str = "mlp"

    @property
    def recurrent(self) -> bool:
        return self.policy != "mlp"

    def initial_memory(self, batch: int) -> Any:
        """The memory of ``batch`` fresh episodes (``()`` for the memoryless policy)."""
        if not self.recurrent:
            return ()
        return initial_memory(self.policy, self.module.hidden_sizes[0], batch)

    def init(self, key: Array, obs: Array) -> Any:
        """Parameters, from a batch of observations ``[B, *obs_shape]``."""
        if not self.recurrent:
            return self.module.init(key, obs)
        first = jnp.ones((1, obs.shape[0]), bool)
        return self.module.init(key, self.initial_memory(obs.shape[0]), obs[None], first)

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
        value, next_value, _ = self.window(params, memory, obs, first, next_obs)
        return value, next_value

    @property
    def state_size(self) -> int:
        """F, the width of the agent state :meth:`window` gives (the recurrent core's output;
        0 for the memoryless policy)."""
        return self.module.hidden_sizes[0] if self.recurrent else 0

    def window(self, params: Any, memory: Any, obs: Array, first: Array, next_obs: Array,
               critic: bool = True) -> tuple[Array, Array, Any]:
        """``(V(s_t), V(s'_{t+1}), agent state [T, B, F])`` over a window from one run of the
        recurrent core (the agent state is None for the memoryless policy; the values are
        zeros without ``critic``)."""
        zeros = jnp.zeros(first.shape, jnp.float32)
        if not self.recurrent:
            if not critic:
                return zeros, zeros, None
            return (self.module.apply(params, obs, method=ActorCritic.value),
                    self.module.apply(params, next_obs, method=ActorCritic.value), None)

        def run(module):
            _, (memories, outputs) = module.unroll(memory, obs, first)
            if not critic:
                return zeros, zeros, outputs
            _, value = module.heads(outputs)
            return value, module.next_value(memories, next_obs), outputs

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
                       activation: str, obs_ndim: int, epsilon: float) -> AgentNetwork:
    """The network of ``TrainConfig.policy`` with the policy head of ``distribution``."""
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
    else:
        raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")
    return AgentNetwork(module, policy)

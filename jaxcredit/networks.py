"""Flax modules shared by the agents and by learned estimators.

The actor-critic keeps two separate MLP towers (as PureJaxRL and CleanRL do for classic control):
sharing a torso couples the value regression to the policy's features, which on small tasks
mostly adds interference. Separate methods let the rollout run the policy tower alone and
evaluate the critic afterwards on the whole ``[T, N]`` window in one batched call.

Initialisation. The actor-critic follows the PPO implementation-details convention (Huang et
al., 2022, "The 37 implementation details of PPO"): orthogonal weights with gain √2 in hidden
layers, 0.01 for the policy head (near-uniform initial policy) and 1 for the value head; zero
biases. The Q-network follows the DQN implementations instead (Mnih et al. 2015's Torch default,
CleanRL, Dopamine, PureJaxRL's flax default): fan-in scaled weights, here flax's LeCun normal
(variance 1 / fan-in), and zero biases. On CartPole at PureJaxRL's DQN settings the orthogonal
convention left the greedy policy oscillating (8 seeds, mean of the last 5 greedy evaluations
322 ± 80 against 426 ± 49 with LeCun normal, all else equal;
experiments/cartpole_baselines/README.md).

Orthogonal matrices come from a QR factorisation. Under ``jax.vmap`` over keys (a population of
seeds initialised in one program) flax's initialiser makes one *batched* LAPACK QR call, which
jaxlib runs with ``ParallelBatchMap`` on XLA:CPU's thread pool; two pool threads each waiting in
``BlockingCounter::Wait`` for sub-tasks only the other could run deadlocked the process
(``jax.jit(jax.vmap(engine.init))`` over 256 keys hung 2 of 2 times here with XLA's default
flags). :func:`orthogonal` samples the same matrix as flax's initialiser but runs a batched call
as a sequential loop of unbatched ones (``jax.custom_batching.sequential_vmap``): equal numbers
(tested), and no batched LAPACK call. Every orthogonal initialiser in jaxcredit uses it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.policies import ActionDistribution

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "gelu": nn.gelu,
    "silu": nn.silu,
}


def orthogonal(scale: float = 1.0) -> Callable:
    """flax's orthogonal initialiser, made safe to vmap on XLA:CPU (module docstring)."""
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        return jax.custom_batching.sequential_vmap(lambda k: base(k, shape, dtype))(key)

    return init


def activation_fn(name: str) -> Callable[[jax.Array], jax.Array]:
    """Looks up an activation by name; raises ValueError listing the known ones."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """Flattens trailing observation dims, then Dense-activation layers and a linear head.

    Attributes:
      hidden_sizes: widths of the hidden layers.
      out_size: width of the linear output layer.
      activation: name in ``ACTIVATIONS``.
      out_gain: orthogonal-init gain of the output layer.
      obs_ndim: number of trailing observation dims to flatten (1 for vectors, 3 for MinAtar).
      init: ``"orthogonal"`` (gain √2 hidden, ``out_gain`` output) or ``"lecun"`` (flax's
        LeCun normal everywhere, ``out_gain`` unused); zero biases either way.
    """

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "tanh"
    out_gain: float = 1.0
    obs_ndim: int = 1
    init: str = "orthogonal"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)
        act = activation_fn(self.activation)
        if self.init not in ("orthogonal", "lecun"):
            raise ValueError(f"unknown init {self.init!r}; choose orthogonal or lecun")
        lecun = self.init == "lecun"
        for width in self.hidden_sizes:
            x = nn.Dense(
                width, kernel_init=nn.initializers.lecun_normal() if lecun
                else orthogonal(np.sqrt(2.0)),
                bias_init=nn.initializers.zeros,
            )(x)
            x = act(x)
        return nn.Dense(
            self.out_size, kernel_init=nn.initializers.lecun_normal() if lecun
            else orthogonal(self.out_gain),
            bias_init=nn.initializers.zeros,
        )(x)


def epsilon_mixture(logits: jax.Array, epsilon: float) -> jax.Array:
    """log π_ε = log((1 − ε) softmax(z) + ε / A): the policy mixed with the uniform one.

    The exploration policy of COCOA's code (``policy_gradient.py``): every action keeps a
    probability of at least ε/A, so a rarely chosen action (the key) is still tried and the data
    that would correct a credit model about it keep coming. Returned as normalised log-probs
    (logits of the mixture); differentiable in z.
    """
    num_actions = logits.shape[-1]
    log_pi = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.logaddexp(jnp.log1p(-epsilon) + log_pi, jnp.log(epsilon / num_actions))


class PolicyHead(nn.Module):
    """The parameters of π(· | s) from the actor's last layer: categorical logits as they are
    (or their ε-mixture, :func:`epsilon_mixture`), or a Gaussian's mean and log σ, with a learned
    state-independent log σ for ``gaussian`` (``jaxcredit.policies``)."""

    distribution: ActionDistribution
    epsilon: float = 0.0

    @nn.compact
    def __call__(self, head: jax.Array, target: bool = False) -> jax.Array:
        if self.distribution.continuous:
            log_std = None
            if not self.distribution.state_dependent_std:
                log_std = self.param("log_std", nn.initializers.zeros,
                                     (self.distribution.action_dim,))
            return self.distribution.logits(head, log_std)
        if self.epsilon > 0 and not target:
            return epsilon_mixture(head, self.epsilon)
        return head


def _distribution(num_actions: int, distribution: Optional[ActionDistribution]
                  ) -> ActionDistribution:
    return distribution or ActionDistribution("categorical", num_actions)


class ActorCritic(nn.Module):
    """Policy parameters and a state value from two separate MLP towers.

    ``apply(params, obs)`` returns ``(logits [..., A], value [...])``; ``method=ActorCritic.policy``
    and ``method=ActorCritic.value`` evaluate one tower only. With ``epsilon > 0`` the policy is
    the ε-mixture :func:`epsilon_mixture` of the actor's softmax (acting, the stored log-probs,
    the objective and the exact models all read it); ``method=ActorCritic.target_policy`` is
    the actor's softmax alone (what evaluation plays). ``epsilon = 0`` leaves the logits as the
    actor computes them. With a continuous ``distribution`` the "logits" are a Gaussian's mean
    and log σ ``[..., 2D]`` (:class:`PolicyHead`); ``num_actions`` is then D.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    epsilon: float = 0.0
    distribution: Optional[ActionDistribution] = None

    def setup(self):
        law = _distribution(self.num_actions, self.distribution)
        self.actor = MLP(self.hidden_sizes, law.head_size, self.activation, 0.01, self.obs_ndim)
        self.critic = MLP(self.hidden_sizes, 1, self.activation, 1.0, self.obs_ndim)
        self.head = PolicyHead(law, self.epsilon)

    def policy(self, obs: jax.Array) -> jax.Array:
        """Parameters of the behaviour policy π(· | s) (the ε-mixture when ``epsilon > 0``)."""
        return self.head(self.actor(obs))

    def target_policy(self, obs: jax.Array) -> jax.Array:
        """Parameters of the actor's own policy, without the exploration mixture."""
        return self.head(self.actor(obs), target=True)

    def value(self, obs: jax.Array) -> jax.Array:
        """V(s)."""
        return self.critic(obs)[..., 0]

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.policy(obs), self.value(obs)


CELLS = ("gru", "lstm", "lru")


def initial_memory(cell: str, size: int, batch: int) -> Any:
    """The memory of ``batch`` fresh episodes: zeros, ``[batch, size]`` for a GRU and the pair
    ``(c, h)`` of those for an LSTM (flax's ``initialize_carry`` draws zeros too); for the LRU,
    memax's identity element (diagonal 1, state 0, complex64) and its reset flag."""
    zeros = jnp.zeros((batch, size), jnp.float32)
    if cell == "lru":
        return ((jnp.ones((batch, size), jnp.complex64), jnp.zeros((batch, size), jnp.complex64)),
                jnp.zeros((batch,), bool))
    return zeros if cell == "gru" else (zeros, zeros)


class ScannedCell(nn.Module):
    """A recurrent cell scanned over the leading (time) axis, its memory set back to
    :func:`initial_memory` where an episode starts (PureJaxRL's ``ScannedRNN`` scheme).

    ``apply(params, memory, (x [T, B, F], first [T, B]))`` returns ``(memory after the last
    step, (memory after every step [T, B, ...], output [T, B, size]))``: every step's memory,
    not only its output, so that one more step can be taken from any of them (the engine's
    V(s'_{t+1})).
    """

    cell: str
    size: int

    @functools.partial(nn.scan, variable_broadcast="params", in_axes=0, out_axes=0,
                       split_rngs={"params": False})
    @nn.compact
    def __call__(self, memory, inputs):
        x, first = inputs
        fresh = initial_memory(self.cell, self.size, x.shape[0])
        memory = jax.tree.map(lambda f, m: jnp.where(first[:, None], f, m), fresh, memory)
        # The recurrent kernels are orthogonal; jaxcredit's initialiser keeps a vmapped init
        # free of batched LAPACK calls (module docstring).
        if self.cell == "gru":
            core = nn.GRUCell(self.size, recurrent_kernel_init=orthogonal())
        elif self.cell == "lstm":
            core = nn.OptimizedLSTMCell(self.size, recurrent_kernel_init=orthogonal())
        else:
            raise ValueError(f"unknown cell {self.cell!r}; choose one of {CELLS}")
        memory, output = core(memory, x.astype(jnp.float32))
        return memory, (memory, output)


class LinearRecurrentCore(nn.Module):
    """memax's Linear Recurrent Unit (Orvieto et al. 2023, arXiv 2303.06349; memax 0.1's flax
    ``LRU``) over ``[T, B]``: a complex diagonal linear recurrence run by an associative scan,
    ``O(log T)`` deep instead of T sequential cell steps. memax resets the state where ``first``
    marks an episode start (its ``Resettable`` algebra). Same interface as :class:`ScannedCell`.
    """

    size: int

    @nn.compact
    def __call__(self, memory, inputs):
        from memax.linen.semigroups.lru import LRU  # noqa: PLC0415 (only the lru policy needs it)

        x, first = inputs
        batched = nn.vmap(LRU, in_axes=(0, (1, 1)), out_axes=(1, 1),
                          variable_axes={"params": None}, split_rngs={"params": False})
        lru = batched(algebra=LRU.default_algebra(recurrent_size=self.size),
                      scan=LRU.default_scan(), hidden_size=self.size, recurrent_size=self.size)
        memories, output = lru(memory, (x.astype(jnp.float32), first))
        return jax.tree.map(lambda m: m[-1], memories), (memories, output)

class RecurrentActorCritic(nn.Module):
    """A categorical policy and a state value that read a recurrent memory of the episode.

    The layout of PureJaxRL's ``ppo_rnn.py`` (``ActorCriticRNN``): an embedding layer
    (``hidden_sizes[0]`` units and the activation), a GRU, LSTM or LRU of the same width shared
    by actor and critic, then a policy head and a value head, each an MLP over
    ``hidden_sizes[1:]`` reading the core's output. The memory is set back where ``first``
    marks an episode's first step.
    Initialisation as :class:`ActorCritic` (orthogonal, gains √2 / 0.01 / 1) for the dense
    layers; the cells keep flax's LeCun normal input kernels and orthogonal recurrent ones.

    Arrays are time-major ``[T, B, ...]``. ``apply(params, memory, obs, first)`` returns
    ``(memory after the last step, logits [T, B, A], value [T, B])``; the methods ``unroll``,
    ``heads`` and ``next_value`` are its pieces.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (128, 128)
    activation: str = "relu"
    obs_ndim: int = 1
    epsilon: float = 0.0
    cell: str = "gru"
    distribution: Optional[ActionDistribution] = None

    def setup(self):
        width = self.hidden_sizes[0]
        law = _distribution(self.num_actions, self.distribution)
        self.encoder = MLP((), width, self.activation, np.sqrt(2.0), self.obs_ndim)
        self.core = (LinearRecurrentCore(width) if self.cell == "lru"
                     else ScannedCell(self.cell, width))
        self.actor = MLP(self.hidden_sizes[1:], law.head_size, self.activation, 0.01)
        self.critic = MLP(self.hidden_sizes[1:], 1, self.activation, 1.0)
        self.head = PolicyHead(law, self.epsilon)

    def unroll(self, memory, obs: jax.Array, first: jax.Array):
        """``(last memory, (memories [T, B, ...], outputs [T, B, width]))`` over the window."""
        x = activation_fn(self.activation)(self.encoder(obs))
        return self.core(memory, (x, first))

    def heads(self, outputs: jax.Array, target: bool = False) -> tuple[jax.Array, jax.Array]:
        """Logits (the behaviour policy's, or the actor's own with ``target``) and V, from the
        core's outputs."""
        return self.head(self.actor(outputs), target), self.critic(outputs)[..., 0]

    def next_value(self, memories, next_obs: jax.Array) -> jax.Array:
        """V(s'_{t+1}) for every t: one more step from the memory after step t on the next
        observation (the same episode: no reset), all T·B of them as one batch."""
        shape = next_obs.shape[:2]
        flat = jax.tree.map(lambda m: m.reshape((-1,) + m.shape[2:]), memories)
        x = activation_fn(self.activation)(self.encoder(next_obs))
        x = x.reshape((1, -1) + x.shape[2:])
        _, (_, outputs) = self.core(flat, (x, jnp.zeros(x.shape[:2], bool)))
        return self.critic(outputs)[0, :, 0].reshape(shape)

    def __call__(self, memory, obs: jax.Array, first: jax.Array, target: bool = False):
        memory, (_, outputs) = self.unroll(memory, obs, first)
        logits, value = self.heads(outputs, target)
        return memory, logits, value


class QNetwork(nn.Module):
    """Action values Q(s, ·) from an MLP; optionally the dueling head of Wang et al. (2016),
    Q(s, a) = V(s) + A(s, a) − mean_a' A(s, a'), with separate value and advantage layers on a
    shared torso. ``apply(params, obs)`` returns ``[..., A]``. LeCun normal initialisation
    (module docstring). With ``layer_norm`` every hidden layer is Dense → LayerNorm →
    activation (PQN's network, Gallici et al. 2024, ``purejaxql`` ``QNetwork``)."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    obs_ndim: int = 1
    dueling: bool = False
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if self.layer_norm:
            x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)
            for width in self.hidden_sizes:
                x = nn.Dense(width, kernel_init=nn.initializers.lecun_normal())(x)
                x = activation_fn(self.activation)(nn.LayerNorm()(x))
            return nn.Dense(self.num_actions, kernel_init=nn.initializers.lecun_normal())(x)
        if not self.dueling:
            return MLP(self.hidden_sizes, self.num_actions, self.activation,
                       obs_ndim=self.obs_ndim, init="lecun")(obs)
        torso = self.hidden_sizes[:-1]
        width = self.hidden_sizes[-1]
        features = MLP(torso, width, self.activation, obs_ndim=self.obs_ndim,
                       init="lecun")(obs)
        features = activation_fn(self.activation)(features)
        value = MLP((), 1, self.activation, init="lecun")(features)
        advantage = MLP((), self.num_actions, self.activation, init="lecun")(features)
        return value + advantage - advantage.mean(axis=-1, keepdims=True)

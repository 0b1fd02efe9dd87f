"""The Reconstructive Memory Agent's network (RMA): a recurrent controller that writes a latent
code of every step into an external memory and reads it back by attention.

Hung, Lillicrap, Abramson, Wu, Mirza, Carnevale, Ahuja & Wayne, "Optimizing agent behavior over
long time scales by transporting value", Nature Communications 2019 (arXiv 1810.06721); the
official code is ``deepmind-research/tvt`` (``rma.py``, ``memory.py``, ``losses.py``). Temporal
Value Transport (``jaxcredit.redistribute.tvt``) reads this network's read weights; the network
itself is an ordinary recurrent policy (``--policy rma``) that any learner can use.

One step, as ``_RMACore._build`` in ``rma.py`` (x_t the flattened observation)::

    z_t      = MLP_tanh(2L, L)([x_t, h_{t-1}, m_{t-1}])          the latent code
    h_t      = LSTM(z_t)                                          the controller
    k_t^i, β_t^i = Linear(h_t), β = softplus(·)                  H read keys and strengths
    w_t^i(j) = softmax_j(β_t^i cos(k_t^i, M_j))                   dense reads over the R rows
    m_t      = [Σ_j w_t^i(j) M_j]_i                               what was read
    M[n_t]  ← stop_gradient(z_t), n_t += 1                       written after the read
    π, V     = heads([z_t, h_t, m_t])

The memory holds the episode's codes in write order, so row j is the code of the episode's step
j, and the read weights say which earlier steps a decision looked back at (``MemoryReads``). The
memory, the reads, the controller and the write counter are the recurrent state, zeroed where an
episode starts. The auxiliary loss (``auxiliary_loss``, added to the objective's) is the
reference's: a reconstruction of the observation from z_t (weight 50 over the observation's
size) and a hinge on the read strengths, 5·10⁻⁵ Σ_i max(2, β^i) (``losses.py``,
``read_regularization_loss``, mode L1).

Departures (docs/tvt.md): the encoder reads the observation only (the reference also feeds the
last action and reward and reconstructs them; jaxcredit's policies see observations); one LSTM
of ``hidden_sizes[0]`` units, not two of 256 with skip connections; the latent size L is
``hidden_sizes[0]`` (the reference: 200); reads are dense over the R = episode-length rows (the
reference: top 50 of 1,000 rows, which never wrap within its episodes either); the observation is
reconstructed by squared error, not a Bernoulli likelihood (observations here need not lie in
[0, 1]); the baseline does not read the stop-gradient policy logits; losses are means over steps
like the objective's, so the weights keep their ratios to the policy loss.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcredit.networks import MLP, PolicyHead, _distribution, orthogonal
from jaxcredit.policies import ActionDistribution
from jaxcredit.types import MemoryReads

NUM_READS = 3  # rma.py: memory_num_reads
RECONSTRUCTION_WEIGHT = 50.0  # rma.py Agent: image_cost_weight (divided by the pixel count)
STRENGTH_COST, STRENGTH_TOLERANCE = 5e-5, 2.0  # rma.py Agent: read_strength_cost / _tolerance


def initial_memory(width: int, latent: int, rows: int, batch: int, reads: int = NUM_READS):
    """The state of ``batch`` fresh episodes: the LSTM's (c, h), the last controller output
    and reads, the memory ``[batch, rows, latent]`` and the write counter, all zeros."""
    zeros = jnp.zeros((batch, width), jnp.float32)
    return ((zeros, zeros), zeros, jnp.zeros((batch, reads * latent), jnp.float32),
            jnp.zeros((batch, rows, latent), jnp.float32), jnp.zeros((batch,), jnp.int32))


def _normalise(x: jax.Array) -> jax.Array:
    """x / ‖x‖ over the last axis, and 0 for a zero row (an unwritten memory row), as
    ``tf.math.l2_normalize``."""
    return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, -1, keepdims=True), 1e-12))


def read_memory(keys: jax.Array, strengths: jax.Array, memory: jax.Array):
    """Content-based reads: ``(reads [B, H, L], weights [B, H, R])`` with
    w(j) = softmax_j(β cos(k, M_j)) (``memory.py``, ``read_from_memory``, dense)."""
    cosine = jnp.einsum("bhl,brl->bhr", _normalise(keys), _normalise(memory))
    weights = jax.nn.softmax(strengths[..., None] * cosine, axis=-1)
    return jnp.einsum("bhr,brl->bhl", weights, memory), weights


class MemoryCore(nn.Module):
    """One RMA step scanned over time (module docstring); the state is set back to zeros where
    ``first`` marks an episode start. ``apply(params, state, (x [T, B, D], first [T, B]))``
    gives ``(last state, (state after every step, (features [T, B, L + W + H·L], weights
    [T, B, H, R], strengths [T, B, H], rows written before the step [T, B])))``."""

    width: int
    latent: int
    rows: int
    reads: int = NUM_READS

    @functools.partial(nn.scan, variable_broadcast="params", in_axes=0, out_axes=0,
                       split_rngs={"params": False})
    @nn.compact
    def __call__(self, state, inputs):
        x, first = inputs
        fresh = initial_memory(self.width, self.latent, self.rows, x.shape[0], self.reads)
        state = jax.tree.map(
            lambda f, s: jnp.where(first.reshape(first.shape + (1,) * (s.ndim - 1)), f, s),
            fresh, state)
        lstm, previous, read_before, memory, count = state
        z = MLP((2 * self.latent,), self.latent, "tanh", init="lecun", name="z_encoder")(
            jnp.concatenate([x.astype(jnp.float32), previous, read_before], -1))
        lstm, out = nn.OptimizedLSTMCell(self.width, recurrent_kernel_init=orthogonal(),
                                         name="controller")(lstm, z)
        heads = nn.Dense(self.reads * (self.latent + 1), name="read_heads")(out)
        keys = heads[:, :self.reads * self.latent].reshape((-1, self.reads, self.latent))
        strengths = jax.nn.softplus(heads[:, self.reads * self.latent:])
        read, weights = read_memory(keys, strengths, memory)
        read = read.reshape((read.shape[0], -1))
        row = jax.nn.one_hot(count % self.rows, self.rows, dtype=memory.dtype)[..., None]
        memory = memory * (1.0 - row) + row * jax.lax.stop_gradient(z)[:, None, :]
        features = jnp.concatenate([z, out, read], -1)
        state = (lstm, out, read, memory, count + 1)
        return state, (state, (features, weights, strengths, count))


class MemoryAgent(nn.Module):
    """The RMA policy and baseline (module docstring), with the interface of
    ``networks.RecurrentActorCritic``: ``apply(params, memory, obs, first)`` gives ``(memory
    after the last step, logits [T, B, A], value [T, B])``; ``unroll``, ``heads`` and
    ``next_value`` are its pieces, ``unroll_with_reads`` also returns the reads, and
    ``auxiliary_loss`` the reconstruction and read-strength losses on a window."""

    num_actions: int
    hidden_sizes: Sequence[int] = (128, 128)
    activation: str = "tanh"
    obs_ndim: int = 1
    epsilon: float = 0.0
    memory_rows: int = 100
    obs_size: int = 1
    distribution: Optional[ActionDistribution] = None

    def setup(self):
        law = _distribution(self.num_actions, self.distribution)
        width = self.hidden_sizes[0]
        self.core = MemoryCore(width, width, self.memory_rows)
        self.actor = MLP(self.hidden_sizes[1:], law.head_size, self.activation, 0.01)
        self.critic = MLP(self.hidden_sizes[1:], 1, self.activation, 1.0)
        self.head = PolicyHead(law, self.epsilon)
        # The reference decodes images by a transposed ConvNet; observations here are vectors.
        self.decoder = MLP((width,), self.obs_size, "relu", init="lecun")

    def flat(self, obs: jax.Array) -> jax.Array:
        return obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)

    def unroll_with_reads(self, memory, obs: jax.Array, first: jax.Array):
        """``(last state, (states [T, B, ...], features [T, B, F], MemoryReads))``."""
        memory, (states, (features, weights, strengths, rows)) = self.core(
            memory, (self.flat(obs), first))
        return memory, (states, features, MemoryReads(weights, strengths, rows))

    def unroll(self, memory, obs: jax.Array, first: jax.Array):
        memory, (states, features, _) = self.unroll_with_reads(memory, obs, first)
        return memory, (states, features)

    def heads(self, features: jax.Array, target: bool = False):
        return self.head(self.actor(features), target), self.critic(features)[..., 0]

    def next_value(self, states, next_obs: jax.Array) -> jax.Array:
        """V(s'_{t+1}): one more step from the state after step t (module
        ``networks.RecurrentActorCritic.next_value``)."""
        shape = next_obs.shape[:2]
        flat = jax.tree.map(lambda m: m.reshape((-1,) + m.shape[2:]), states)
        x = self.flat(next_obs).reshape((1, -1) + self.flat(next_obs).shape[2:])
        _, (_, (features, *_)) = self.core(flat, (x, jnp.zeros(x.shape[:2], bool)))
        return self.critic(features)[0, :, 0].reshape(shape)

    def auxiliary_loss(self, features: jax.Array, reads: MemoryReads, obs: jax.Array):
        """``(loss, metrics)``: the reconstruction of the observation from z_t and the hinge on
        the read strengths, each a mean over steps (module docstring)."""
        target = self.flat(obs)
        z = features[..., :self.hidden_sizes[0]]
        reconstruction = self.decoder(z)
        error = 0.5 * jnp.mean(jnp.square(reconstruction - target))
        strength = jnp.mean(jnp.sum(jnp.maximum(STRENGTH_TOLERANCE, reads.strengths), -1))
        loss = RECONSTRUCTION_WEIGHT * error + STRENGTH_COST * strength
        return loss, {"rma/reconstruction": error, "rma/read_strength": jnp.mean(reads.strengths)}

    def everything(self, memory, obs: jax.Array, first: jax.Array):
        """Every part once, the decoder included (what ``init`` traces)."""
        _, (_, features, reads) = self.unroll_with_reads(memory, obs, first)
        return self.heads(features), self.auxiliary_loss(features, reads, obs)

    def __call__(self, memory, obs: jax.Array, first: jax.Array, target: bool = False):
        memory, (_, features) = self.unroll(memory, obs, first)
        logits, value = self.heads(features, target)
        return memory, logits, value


def state_size(hidden_sizes: Sequence[int]) -> int:
    """F, the width of the features (z, the controller's output and the H reads)."""
    width = hidden_sizes[0]
    return width + width + NUM_READS * width


def check_rows(rows: Optional[int]) -> int:
    if rows is None or rows < 1:
        raise ValueError("--policy rma keeps one memory row per step of an episode and needs an "
                         "environment that states its episode length (max_steps_in_episode)")
    return int(rows)

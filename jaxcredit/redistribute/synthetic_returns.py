"""Synthetic Returns: a reward model over the episode's earlier states (Raposo, Ritter et al. 2021).

Raposo, Ritter, Santoro, Wayne, Weber, Botvinick, van Hasselt & Song, "Synthetic Returns for
Long-Term Credit Assignment", arXiv 2102.12425 (2021). Reference code:
``google-deepmind/deepmind-research`` ``synthetic_returns/synthetic_returns.py``
(``EpisodicMemory``, ``SyntheticReturnsCoreWrapper``) and ``synthetic_returns/README.md``.

Every step t of an episode has an embedding c_t. Three heads read it: the synthetic return s(c),
a gate g(c) ∈ (0, 1) (a sigmoid) and a bias b(c). The reward of step t is regressed on the
synthetic returns of the episode's *earlier* steps::

    r̂_t = g(c_t) · Σ_{k<t} s(c_k) + b(c_t)             (the sum: same episode, t − k ≤ M)
    L   = ½ (r̂_t − r_t)²                                 (mean over the steps of a window)

and the agent learns from the augmented reward (under ``stop_gradient``)::

    r̃_t = α · s(c_t) + β · r_t

A reward that only an earlier state predicts is credited to that state: the state's s(c_k)
rises, and with it r̃_k, the reward of the step taken from s_k (the reference's alignment:
the reward target of step k is the reward that follows its observation). The action that led
to s_k sees it one step later, in its return or through the critic's V(s_k). The paper's
interpretability claim is that s spikes at the states that follow the decisive actions. r̃ is not
return-equivalent (RUDDER's is): an episode's return becomes β G + α Σ_t s(c_t).

Values taken from the reference (file paths in ``google-deepmind/deepmind-research``):

* ``alpha = 0.3``, ``beta = 1.0``, ``capacity = 300``, ``memory_size = 128`` (the size of c),
  ``hidden_layers = (128, 128)`` for each head: ``synthetic_returns/README.md``, the
  ``sr_config`` of its example.
* The loss ½ (r̂ − r)²: ``synthetic_returns/synthetic_returns.py``, the default ``loss_func``
  of ``SyntheticReturnsCoreWrapper``; the target is the current step's reward, aligned with the
  observation of the step (README: "we used the current step reward as target"), which is
  jaxcredit's ``reward[t]`` of the transition s_t → s_{t+1}.
* The heads are MLPs with a linear output, the gate's through a sigmoid, ReLU between layers
  (``synthetic_returns.py``: ``hk.nets.MLP(hidden_layers + [1])``, haiku's default
  activation); the memory is written *after* the prediction, so the sum runs over k < t; it
  keeps the last ``capacity`` embeddings of the episode (a ring: once full, every slot is
  summed) and stores them under ``stop_gradient`` (``EpisodicMemory.__call__``); it is reset
  with the episode (README: ``hk.ResetCore``).
* c_t is an embedding of the current observation, not of the recurrent core
  (``SyntheticReturnsCoreWrapper``'s default ``apply_core_to_input=False``: s, g and b read the
  wrapper's input, the README's ConvNet "vision output"). Here the stage keeps its *own*
  embedding, an MLP of the flattened observation (``embedding_layers``, default (128,), then a
  linear layer to ``memory_size``; jaxcredit's choice), fitted by the SR loss alone: the
  reference shares the vision network with the agent, so the agent's loss shapes c there.
  ``inputs="observation_action"`` (jaxcredit's option) embeds the observation together with
  the action taken from it: where no later observation shows what an action did (Delayed
  Catch's landing is never observed; the next observation is the next game), an embedding of
  the observation alone cannot tell a catch from a miss, and the pair (s_k, a_k) can.
  ``inputs="agent_state"`` is the reference's other setting, ``apply_core_to_input=True``: the
  embedding reads the agent's recurrent state (``Trajectory.agent_state``, the core's output
  after reading the observation; needs ``--policy gru|lstm|lru``), which summarises the
  episode so far. It reads that state under ``stop_gradient``: the SR loss shapes the stage's
  own embedding on top of the core, not the core (the reference adds the SR loss to the
  agent's, so there it trains the core too).

How gradients flow (as in the reference): the embeddings that enter the sum are constants,
s(stop_gradient(c_k)), both those stored from earlier windows and the window's own earlier
steps. The loss reaches the s head through every summed term, the gate and bias heads directly,
and the embedding network through g(c_t) and b(c_t) of the current step only. The stored
embeddings were computed with the parameters of their time; the s head is applied to them with
the current ones (a running sum of s would fix the old s values as well, and give the s head no
gradient from the steps of earlier windows).

The memory (:class:`SyntheticReturnsMemory`, in the train state). Per environment, the last
``capacity`` embeddings of the running episode (time-major ``[M, N, E]``, oldest first) and how
many of them belong to it; so an episode that started before the window continues its sum, and
an episode end inside the window cuts it. The memory also keeps the last window (observations,
rewards, episode ends) with the embeddings it started from: ``sample`` hands that to the fit,
since the engine fits before it sees the fresh window. The model is thus fitted on the previous
window, one update late (RUDDER's lessons likewise). Before the first window the loss weighs
nothing.

Departures from the reference, each a choice of jaxcredit: the SR loss is fitted by the engine's
fitting machinery with its own Adam (``redistributor_lr``, ``--redistribute-fit-steps``), not
added to the agent's loss (docs/design.md, "Fitted credit models"); the loss is a mean over the
window's steps, not a sum over time and batch (the README's ``jnp.sum(core_output.sr_loss)``),
so the learning rate does not depend on the window's size; the heads and the embedding use
flax's LeCun-normal initialisation (haiku's ``Linear`` draws a truncated normal of the same
scale). No exact model exists (the synthetic return is defined only by its fit), so there is no
oracle ablation.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import chex
import jax
import flax.linen as nn
import jax.numpy as jnp
from flax import struct

from jaxcredit.networks import MLP
from jaxcredit.policies import action_features
from jaxcredit.redistribute import Redistributor
from jaxcredit.types import Trajectory

Array = jax.Array


class Head(nn.Module):
    """An MLP with ReLU between layers and a linear output of ``size`` units (haiku's
    ``hk.nets.MLP`` as the reference uses it), LeCun-normal initialisation."""

    hidden: Sequence[int]
    size: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        return MLP(self.hidden, self.size, activation="relu", init="lecun", name="mlp")(x)


def past_sums(s: Array, done: Array, memory_s: Array, count: Array, capacity: int) -> Array:
    """Σ_{k<t} s(c_k) over the earlier steps of step t's episode, at most ``capacity`` back.

    Steps are counted on one time axis: the M stored steps before the window are τ = −M .. −1
    (``memory_s[M − 1]`` is the step just before the window), the window's steps τ = 0 .. T − 1.
    Step t sums over τ with ``max(start_t, t − capacity) <= τ < t``, where ``start_t`` is the
    step after the last episode end before t in the window, or −``count`` (the running episode's
    stored steps) if none.

    Args:
      s: ``[T, *batch]`` s(c_t) of the window's steps.
      done: ``[T, *batch]`` episode ends (terminated or truncated): ``done[t]`` cuts the sum
        of every later step.
      memory_s: ``[M, *batch]`` s of the stored embeddings, oldest first.
      count: ``[*batch]`` how many of the newest stored steps belong to the running episode.
      capacity: the most earlier steps summed (M).

    Returns:
      ``[T, *batch]`` the sums.
    """
    chex.assert_equal_shape((s, done))
    chex.assert_equal_shape((memory_s[0], count, s[0]))
    num_steps, num_stored = s.shape[0], memory_s.shape[0]
    steps = jnp.arange(num_steps).reshape((num_steps,) + (1,) * (s.ndim - 1))
    ends = jax.lax.cummax(jnp.where(done, steps, -1), axis=0)
    last_end = jnp.concatenate([jnp.full_like(ends[:1], -1), ends[:-1]])  # before t
    start = jnp.where(last_end >= 0, last_end + 1, -count[None])
    tau = jnp.arange(-num_stored, num_steps).reshape((1, -1) + (1,) * (s.ndim - 1))
    t = steps[:, None]
    summed = (tau < t) & (tau >= start[:, None]) & (tau >= t - capacity)
    values = jnp.concatenate([memory_s, s])  # [M + T, *batch]
    return jnp.sum(jnp.where(summed, values[None], 0.0), axis=1)


def predicted_reward(gate: Array, sums: Array, bias: Array) -> Array:
    """r̂_t = g(c_t) · Σ_{k<t} s(c_k) + b(c_t)."""
    chex.assert_equal_shape((gate, sums, bias))
    return gate * sums + bias


def augmented_reward(synthetic_return: Array, reward: Array, alpha: float,
                     beta: float) -> Array:
    """r̃_t = α · s(c_t) + β · r_t, a constant for every gradient."""
    chex.assert_equal_shape((synthetic_return, reward))
    return jax.lax.stop_gradient(alpha * synthetic_return + beta * reward)


def regression_loss(prediction: Array, reward: Array) -> Array:
    """½ mean_t (r̂_t − r_t)²."""
    chex.assert_equal_shape((prediction, reward))
    return 0.5 * jnp.mean(jnp.square(prediction - reward))


def advance(embeddings: Array, count: Array, new: Array, done: Array) -> tuple[Array, Array]:
    """The stored embeddings and counts after a window: the last M steps of ``[stored, new]``
    (``[M, N, E]``, ``[T, N, E]``), and per environment the steps of its running episode among
    them (the steps after its last episode end in the window, else ``count + T``; at most M)."""
    num_stored, num_steps = embeddings.shape[0], new.shape[0]
    steps = jnp.arange(num_steps)[:, None]
    last_end = jnp.max(jnp.where(done, steps, -1), axis=0)
    count = jnp.where(last_end >= 0, num_steps - 1 - last_end, count + num_steps)
    stored = jnp.concatenate([embeddings, jax.lax.stop_gradient(new)])[-num_stored:]
    return stored, jnp.minimum(count, num_stored).astype(jnp.int32)


@struct.dataclass
class SyntheticReturnsMemory:
    """What the stage keeps between updates (part of the train state).

    Attributes:
      embeddings: ``[M, N, E]`` the last M embeddings of each environment, oldest first,
        under ``stop_gradient``.
      count: ``[N]`` int32, how many of the newest belong to the running episode (at most M).
      window_input, window_reward, window_done: ``[T, N, ...]`` the last window (what the
        embedding reads, :func:`embedding_input`), the fitting data
        (:func:`make_synthetic_returns`'s ``sample``).
      window_embeddings, window_count: the embeddings and counts that window started from.
      filled: bool, a window has been stored.
    """

    embeddings: Array
    count: Array
    window_input: Array
    window_reward: Array
    window_done: Array
    window_embeddings: Array
    window_count: Array
    filled: Array


def _numbers(value: Any, name: str) -> tuple[int, ...]:
    """Layer widths from a sequence, a number or a comma-separated string (the command line
    gives ``hidden_layers=128,128``; an empty string is no layer)."""
    if isinstance(value, str):
        try:
            return tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError:
            raise ValueError(f"synthetic_returns: {name} must be integers separated by commas, "
                             f"got {value!r}") from None
    if isinstance(value, (int, float)):
        value = (value,)
    widths = tuple(int(v) for v in value)
    if any(w < 1 for w in widths):
        raise ValueError(f"synthetic_returns: {name} must be positive, got {widths}")
    return widths


def make_networks(memory_size: int, hidden_layers: Sequence[int],
                  embedding_layers: Sequence[int]) -> dict[str, Head]:
    """The embedding c = f(observation) and the three heads s, g (before its sigmoid) and b."""
    return {"embedding": Head(tuple(embedding_layers), memory_size),
            "synthetic_return": Head(tuple(hidden_layers), 1),
            "gate": Head(tuple(hidden_layers), 1),
            "bias": Head(tuple(hidden_layers), 1)}


INPUTS = ("observation", "observation_action", "agent_state")


def embedding_input(obs: Array, action: Array, num_actions: int, inputs: str,
                    batch_ndim: int, agent_state: Optional[Array] = None) -> Array:
    """What the embedding c_t reads: the flattened observation, and with
    ``inputs="observation_action"`` the action taken from it as well (one-hot, or the vector of
    a continuous action: ``jaxcredit.policies.action_features``); with
    ``inputs="agent_state"`` the agent's recurrent state ``agent_state`` instead."""
    if inputs == "agent_state":
        if agent_state is None:
            raise ValueError("synthetic_returns with inputs=agent_state reads the agent's "
                             "recurrent state, and the trajectory has none")
        return agent_state.astype(jnp.float32)
    flat = obs.reshape(obs.shape[:batch_ndim] + (-1,)).astype(jnp.float32)
    if inputs == "observation":
        return flat
    features = action_features(action, num_actions)
    return jnp.concatenate([flat, features.reshape(flat.shape[:batch_ndim] + (-1,))], axis=-1)


def outputs(networks: dict[str, Head], params: Any, x: Array, done: Array,
            embeddings: Array, count: Array, capacity: int):
    """The model on a window: ``(s, r̂, g, c)``, each ``[T, N]`` (c: ``[T, N, E]``).

    ``x`` ``[T, N, F]`` is what the embedding reads (:func:`embedding_input`); ``embeddings``
    ``[M, N, E]`` and ``count`` ``[N]`` are the memory the window starts from
    (:class:`SyntheticReturnsMemory`). The summed s values read their embeddings under
    ``stop_gradient`` (module docstring); g and b read c_t with its gradient.
    """
    def head(name: str, c: Array) -> Array:
        return networks[name].apply(params[name], c)[..., 0]

    c = networks["embedding"].apply(params["embedding"], x)
    s = head("synthetic_return", jax.lax.stop_gradient(c))
    sums = past_sums(s, done, head("synthetic_return", jax.lax.stop_gradient(embeddings)),
                     count, capacity)
    gate = jax.nn.sigmoid(head("gate", c))
    return s, predicted_reward(gate, sums, head("bias", c)), gate, c


def make_synthetic_returns(alpha: float = 0.3, beta: float = 1.0, capacity: int = 300,
                           memory_size: int = 128,
                           hidden_layers: Sequence[int] | str = (128, 128),
                           embedding_layers: Sequence[int] | str = (128,),
                           inputs: str = "observation") -> Redistributor:
    """Synthetic Returns (Raposo et al. 2021): r̃ = α s + β r, s fitted by regressing each reward
    on the episode's earlier states (module docstring).

    Args:
      alpha: weight of the synthetic return in r̃ (reference README: 0.3).
      beta: weight of the environment's reward in r̃ (reference README: 1.0).
      capacity: M, the most earlier steps of the episode summed (reference README: 300).
      memory_size: size of the embedding c (reference README: 128).
      hidden_layers: hidden widths of each of the s, g and b heads (reference README: 128, 128).
      embedding_layers: hidden widths of the stage's embedding of the observation (jaxcredit's
        choice: 128; the reference embeds with the agent's own network).
      inputs: what the embedding c_t reads: ``"observation"`` (the reference's default input),
        ``"observation_action"``, the observation with the action taken from it (jaxcredit's
        option, for tasks where no observation shows the outcome of an action), or
        ``"agent_state"``, the recurrent policy's state (the reference's
        ``apply_core_to_input=True``); the module docstring.
    """
    if inputs not in INPUTS:
        raise ValueError(f"synthetic_returns: inputs must be one of {', '.join(INPUTS)}, got "
                         f"{inputs!r}")
    alpha, beta = float(alpha), float(beta)
    capacity, memory_size = int(capacity), int(memory_size)
    if capacity < 1:
        raise ValueError(f"synthetic_returns: capacity must be a positive integer, got "
                         f"{capacity}")
    if memory_size < 1:
        raise ValueError(f"synthetic_returns: memory_size must be a positive integer, got "
                         f"{memory_size}")
    hidden_layers = _numbers(hidden_layers, "hidden_layers")
    embedding_layers = _numbers(embedding_layers, "embedding_layers")
    networks = make_networks(memory_size, hidden_layers, embedding_layers)

    def window_input(traj: Trajectory) -> Array:
        return embedding_input(traj.obs, traj.action, traj.logits.shape[-1], inputs, 2,
                               traj.agent_state)

    def init(key: Array, example: Trajectory):
        keys = jax.random.split(key, 4)
        x = window_input(example)[0]
        c = jnp.zeros((x.shape[0], memory_size), jnp.float32)
        params = {"embedding": networks["embedding"].init(keys[0], x)}
        for k, name in zip(keys[1:], ("synthetic_return", "gate", "bias")):
            params[name] = networks[name].init(k, c)
        return params

    def init_memory(example: Trajectory) -> SyntheticReturnsMemory:
        num_envs = example.action.shape[1]
        embeddings = jnp.zeros((capacity, num_envs, memory_size), jnp.float32)
        count = jnp.zeros((num_envs,), jnp.int32)
        return SyntheticReturnsMemory(
            embeddings=embeddings, count=count, window_input=jnp.zeros_like(window_input(example)),
            window_reward=jnp.zeros_like(example.reward, jnp.float32),
            window_done=jnp.zeros_like(example.done), window_embeddings=embeddings,
            window_count=count, filled=jnp.bool_(False))

    def model(params, x: Array, done: Array, embeddings: Array, count: Array):
        return outputs(networks, params, x, done, embeddings, count, capacity)

    def redistribute(params, traj: Trajectory, key: Array, memory: SyntheticReturnsMemory):
        """``(trajectory with r̃, memory after the window, metrics)``."""
        del key
        x = window_input(traj)
        s, prediction, gate, c = model(params, x, traj.done, memory.embeddings, memory.count)
        embeddings, count = advance(memory.embeddings, memory.count, c, traj.done)
        memory = memory.replace(
            embeddings=embeddings, count=count, window_input=x,
            window_reward=traj.reward.astype(jnp.float32), window_done=traj.done,
            window_embeddings=memory.embeddings, window_count=memory.count,
            filled=jnp.bool_(True))
        metrics = {
            # On the fresh window, which the model has not been fitted on yet.
            "prediction_loss": regression_loss(prediction, traj.reward),
            "synthetic_return": jnp.mean(s),
            "synthetic_return_abs": jnp.mean(jnp.abs(s)),
            "gate": jnp.mean(gate),
        }
        new_reward = augmented_reward(s, traj.reward.astype(jnp.float32), alpha, beta)
        return traj.replace(reward=new_reward), memory, metrics

    def sample(memory: SyntheticReturnsMemory, key: Array):
        """The last window and the embeddings it started from (the whole window every step)."""
        del key
        return (memory.window_input, memory.window_reward, memory.window_done,
                memory.window_embeddings, memory.window_count, memory.filled)

    def loss(params, batch, hparams, key):
        del hparams, key
        x, reward, done, embeddings, count, filled = batch
        _, prediction, gate, _ = model(params, x, done, embeddings, count)
        value = jnp.where(filled, regression_loss(prediction, reward), 0.0)
        return value, {"gate": jnp.mean(gate)}

    # It reads actions, if at all, through action_features: any kind of action.
    return Redistributor(name="synthetic_returns", redistribute=redistribute, init=init,
                         loss=loss, learned=True, init_memory=init_memory, sample=sample,
                         continuous_actions=True, reads_agent_state=inputs == "agent_state")

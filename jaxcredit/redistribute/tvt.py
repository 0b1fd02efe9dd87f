"""Temporal Value Transport (TVT): a step that a later decision read back from memory is paid
the value the agent expected when it read.

Hung, Lillicrap, Abramson, Wu, Mirza, Carnevale, Ahuja & Wayne, "Optimizing agent behavior over
long time scales by transporting value", Nature Communications 2019 (arXiv 1810.06721); the
official code is ``deepmind-research/tvt`` (``tvt_rewards.py``). The agent must read an external
memory by attention (``--policy rma``, :mod:`jaxcredit.rma`): row j of its memory holds the code
of the episode's step j, and ``Trajectory.memory_reads`` records every step's read weights and
read strengths. For each read head, per episode, as ``_tvt_rewards_single_head``:

1. **No-transport period** P (``no_transport_period``): reads of memories fewer than P + 1
   steps old are ignored (masked weights w̃_{t2}(j) = w_{t2}(j) · 1[t2 − j > P]), and so is a
   step whose most-read row is that recent (its strength counts as 0).
2. **Read events.** Over each run of consecutive steps whose strength exceeds ``threshold``,
   the step t2 of the largest strength (the first, on a tie).
3. **Transport.** For each event t2, the ``top_k`` rows j of largest w̃_{t2}(j) written before
   t2 are paid r̃_j += α · w̃_{t2}(j) · V̂(s_{t2}), with V̂ the agent's value at t2; heads add.

The new reward is r + r̃ (``rma.py``'s ``loss``: the TVT rewards are added to the rewards that
follow each step's action, which is jaxcredit's ``reward[t]``), for the critic and the policy.

Defaults, from ``tvt_rewards.py`` (``compute_tvt_rewards``): α = 0.9, top_k = 50, threshold 2;
the no-transport period is ⌊1 / (1 − γ)⌋ of the agent's γ (25 at γ = 1), here an option set
for the reference's pycolab γ = 0.92 (``tvt/main.py``): 12. Set it with γ.

Departures (docs/tvt.md): value is transported only to steps inside the window (a row written
before the window started is a step whose reward has already been used); the reference computes
the rewards per whole episode, which windows of one episode each (``--num-steps`` = the episode
length on a task of fixed length) reproduce exactly. The reference's read weights are over the
top 50 rows of each read; jaxcredit's reads are dense, so top_k applies to all rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcredit.redistribute import Redistributor
from jaxcredit.types import MemoryReads, Trajectory

Array = jax.Array


def read_events(strengths: Array, threshold: float, first: Array) -> Array:
    """``[T]`` bool: the step of the largest strength (the first, on a tie) in each run of
    consecutive steps with strength above ``threshold``; a run ends at an episode start
    (``first[t]``) as well (``tvt_rewards.py``, ``_threshold_read_event_times``)."""
    T = strengths.shape[0]
    over = strengths > threshold
    before = jnp.concatenate([jnp.zeros((1,), bool), over[:-1]])
    start = over & (~before | first)
    run = jnp.where(over, jnp.cumsum(start), 0)
    peak = jax.ops.segment_max(jnp.where(over, strengths, -jnp.inf), run, T + 1)
    at_peak = over & (strengths == peak[run])
    steps = jnp.arange(T)
    earliest = jax.ops.segment_min(jnp.where(at_peak, steps, T), run, T + 1)
    return at_peak & (steps == earliest[run])


def tvt_rewards(weights: Array, strengths: Array, rows: Array, value: Array, first: Array,
                alpha: float = 0.9, top_k: int = 50, threshold: float = 2.0,
                no_transport_period: int = 12) -> Array:
    """The transported rewards r̃ ``[T]`` of one environment's window (module docstring).

    Args:
      weights: ``[T, H, R]`` read weights of each head over the memory rows.
      strengths: ``[T, H]`` read strengths.
      rows: ``[T]`` rows written before each step (its index in its episode).
      value: ``[T]`` V̂(s_t), the agent's value.
      first: ``[T]`` bool, the step starts an episode.
      alpha, top_k, threshold, no_transport_period: the rule's constants.
    """
    T, H, R = weights.shape
    age = rows[:, None] - jnp.arange(R)[None, :]  # t2 − j, in steps of the episode
    far = age > no_transport_period
    position = jnp.arange(T)[:, None] - rows[:, None] + jnp.arange(R)[None, :]  # j in window
    inside = far & (position >= 0)

    def one_head(w: Array, strength: Array) -> Array:
        masked = jnp.where(far, w, 0.0)
        most_read = jnp.argmax(w, axis=-1)
        strength = jnp.where(rows - most_read > no_transport_period, strength, 0.0)
        events = read_events(strength, threshold, first)
        if R > top_k:
            kth = jax.lax.top_k(masked, top_k)[0][:, -1:]
            masked = jnp.where(masked >= kth, masked, 0.0)
        paid = alpha * masked * value[:, None] * (events[:, None] & inside)
        target = jnp.where(inside, position, T)  # T: dropped
        return jnp.zeros((T,), paid.dtype).at[target.reshape(-1)].add(
            paid.reshape(-1), mode="drop")

    return jax.vmap(one_head, in_axes=(1, 1))(weights, strengths).sum(0)


def make_tvt(alpha: float = 0.9, top_k: int = 50, threshold: float = 2.0,
             no_transport_period: int = 12) -> Redistributor:
    """Temporal Value Transport (module docstring) for an agent with ``--policy rma``.

    Args:
      alpha: α, the weight of the transported value (reference: 0.9).
      top_k: rows paid per read event and head (reference: 50).
      threshold: the read strength above which a read is an event (reference: 2).
      no_transport_period: P, in steps (reference: ⌊1 / (1 − γ)⌋, 25 at γ = 1; 12 for its
        pycolab γ = 0.92).
    """
    alpha, threshold = float(alpha), float(threshold)
    top_k, period = int(top_k), int(no_transport_period)
    if top_k < 1:
        raise ValueError(f"tvt: top_k must be a positive integer, got {top_k}")
    if period < 0:
        raise ValueError(f"tvt: no_transport_period must be >= 0, got {period}")

    def redistribute(params, traj: Trajectory, key: Array, memory):
        del params, key
        reads = traj.memory_reads
        if not isinstance(reads, MemoryReads):
            raise ValueError("tvt transports value along the agent's memory reads; the "
                             "trajectory has none (use --policy rma)")
        first = jnp.concatenate([jnp.ones_like(traj.done[:1]), traj.done[:-1]])
        transported = jax.vmap(
            lambda w, s, r, v, f: tvt_rewards(w, s, r, v, f, alpha, top_k, threshold, period),
            in_axes=(1, 1, 1, 1, 1), out_axes=1)(
                reads.weights, reads.strengths, reads.rows, traj.value, first)
        metrics = {"transported": jnp.mean(transported),
                   "transported_abs": jnp.mean(jnp.abs(transported)),
                   "read_strength": jnp.mean(reads.strengths)}
        return traj.replace(reward=traj.reward + transported), memory, metrics

    return Redistributor(name="tvt", redistribute=redistribute, continuous_actions=True,
                         reads_agent_state=True, reads_memory=True)

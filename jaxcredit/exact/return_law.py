"""The law of the undiscounted return on a grid, fast enough for every compiled training update.

For a tabular policy π and γ = 1, the return from (s, a) is Z = Σ_{k≥0} R_k, with S_0 = s,
A_0 = a, then π, the episode ending on arrival in a terminal state (the episodic convention of
:mod:`jaxcredit.exact.tabular`). Its law satisfies the distributional Bellman equation (Bellemare,
Dabney & Munos 2017) with γ = 1:

    p(z | s, a) = Σ_s' P(s'|s,a) E_R[ p(z − R | s') ],      p(z | s) = Σ_a π(a|s) p(z | s, a),

with R the reward of s -a-> s' and p(· | s') = δ_0 at terminal s'. From it the return-conditioned
hindsight of Harutyunyan et al. (2019, "Hindsight Credit Assignment", Thm 2) is

    h(a | s, z) = π(a|s) p(z|s,a) / Σ_b π(b|s) p(z|s,b).

Two steps, as for any compiled program with a fixed shape:

* :func:`jaxcredit.exact.return_grid.plan_return_grid` runs once on the *concrete* MDP (numpy,
  outside jit). It picks a uniform grid ``support`` (contains 0, covers every return the MDP
  can produce), lists the transitions with P(s'|s,a) > 0 and the reward atoms of each, and a
  schedule: ``"levels"`` when the MDP is acyclic and every episode ends within the horizon (one
  backup per state, in reverse topological order: exact and fast), else ``"sweep"``
  (``horizon`` backups of every state, the return truncated after ``horizon + 1`` rewards, as
  :func:`jaxcredit.exact.hindsight.return_distribution`).
* :func:`return_law` is jittable in ``mdp`` and ``pi`` (the MDP may be traced, e.g. σ as a
  traced env parameter, as long as the plan's edges and reward atoms still cover it).
  :func:`return_hindsight_at` reads h(a | s, z) at continuous returns.

Reward atoms of a transition: the exact discrete law when given (``reward_law``, e.g. KeyToDoor's
two-point apples); otherwise the MDP's Gaussian N(μ, σ²), a single atom when σ = 0. Gaussian noise
is discretised (``noise``):

* ``"grid"`` (default): the Gaussian sampled at the grid points, μ + t·step for |t| ≤ K,
  renormalised, with its variance reduced by what the interpolation of μ adds (below), so the mean
  is exact and the variance exact whenever σ ≥ step/2 (the plan makes step ≤ σ/4 when the atom
  budget allows). p(z | s, a) is then a smooth density on the grid, which is what the hindsight
  at a continuous z needs.
* ``"hermite"``: ``noise_points`` Gauss–Hermite atoms μ + σ√2 x_i with weights w_i/√π (mean and
  variance exact). On a grid finer than the atom spacing the law is a comb of spikes, so h at an
  arbitrary z is poor (AmbiguousBandit: errors up to 0.67 in h, against 3e-3 with ``"grid"``);
  moments and Q-values are right.

A reward value v = (k + f)·step (k integer, 0 ≤ f < 1) moves the mass at grid point z to z + k
(weight 1 − f) and z + k + 1 (weight f): the mean is preserved exactly; the variance grows by
f(1 − f)·step² (zero for grid-aligned rewards, so deterministic grid-aligned MDPs are exact). It is
implemented as a pull (a gather of p(z − k) and p(z − k − 1) along the grid), over the edge list
only, then a segment sum of the edges into (s, a). Mass pushed beyond the grid is dropped, so a
grid too small shows as missing mass.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.exact.return_grid import GRID_SNAP, ReturnGridPlan
from jaxcredit.exact.tabular import TabularMDP

Array = jax.Array


def _split_on_grid(x: Array) -> tuple[Array, Array]:
    """x = k + f in grid units, k integer, 0 ≤ f < 1; values within GRID_SNAP snap to it."""
    nearest = jnp.round(x)
    x = jnp.where(jnp.abs(x - nearest) < GRID_SNAP, nearest, x)
    k = jnp.floor(x)
    return k.astype(jnp.int32), x - k


def _pair_atoms(mdp: TabularMDP, plan: ReturnGridPlan, reward_law) -> tuple[Array, Array]:
    """(reward value [Q], P(s'|s,a) · P(atom) [Q]) of every (edge, atom) pair of the plan."""
    e_s, e_a, e_n = plan.edge_state, plan.edge_action, plan.edge_next
    q_edge, q_atom = plan.pair_edge, plan.pair_atom
    prob_edge = mdp.transition[e_s, e_a, e_n]
    mean = mdp.transition_reward[e_s, e_a, e_n][q_edge]
    if plan.reward_kind == "discrete":
        if reward_law is None:
            raise ValueError("this plan was made with a reward_law; pass the same law")
        values = jnp.asarray(reward_law[0], jnp.float32)
        probs = jnp.asarray(reward_law[1], jnp.float32)
        chex.assert_shape(values, (plan.num_reward_atoms,))
        if probs.ndim == 4:
            atom_prob = probs[e_s[q_edge], e_a[q_edge], e_n[q_edge], q_atom]
        else:
            atom_prob = probs[e_s[q_edge], e_a[q_edge], q_atom]
        value, weight = values[q_atom], atom_prob
    elif plan.reward_kind == "deterministic":
        value, weight = mean, jnp.ones_like(mean)
    elif plan.noise == "hermite":
        nodes, node_weights = np.polynomial.hermite.hermgauss(plan.num_reward_atoms)
        std = mdp.transition_reward_std[e_s, e_a, e_n][q_edge]
        noisy = jnp.asarray(plan.pair_noisy)
        # E f(μ + σ ε) ≈ Σ_i w_i/√π f(μ + σ √2 x_i): mean and variance exact.
        value = mean + jnp.where(noisy, std * np.sqrt(2.0) * nodes[q_atom].astype(np.float32),
                                 0.0)
        weight = jnp.where(noisy, (node_weights[q_atom] / np.sqrt(np.pi)).astype(np.float32),
                           1.0)
    else:
        std = mdp.transition_reward_std[e_s, e_a, e_n][q_edge]
        offset = (q_atom - plan.kernel_taps).astype(np.float32)  # t of μ + t·step
        _, frac = _split_on_grid(mean / plan.step)
        # The interpolation of μ between grid points adds f(1 − f) step² of variance: the kernel
        # supplies the rest, so that the total is σ² (exact when σ² ≥ step²/4).
        kernel_var = jnp.maximum(std**2 - frac * (1.0 - frac) * plan.step**2, 0.0)
        logits = -0.5 * (offset * plan.step) ** 2 / jnp.maximum(kernel_var, 1e-30)
        raw = jnp.exp(logits)  # t = 0 keeps weight 1 when the kernel is a point mass
        norm = jax.ops.segment_sum(raw, q_edge, num_segments=plan.num_edges)
        value, weight = mean + offset * plan.step, raw / norm[q_edge]
    return value, weight * prob_edge[q_edge]


def _pull(p_s: Array, next_state: Array, shift: Array, frac: Array, weight: Array) -> Array:
    """``[Q, Z]`` w·((1 − f)·p(z − k | s') + f·p(z − k − 1 | s')), zero outside the grid.

    One gather of the window p(z' − k − 1 | s') for z' = 0..Z; the two terms are its two slices.
    """
    num_atoms = p_s.shape[-1]
    source = jnp.arange(num_atoms + 1)[None, :] - (shift + 1)[:, None]
    inside = (source >= 0) & (source < num_atoms)
    flat = next_state[:, None] * num_atoms + jnp.clip(source, 0, num_atoms - 1)
    window = jnp.where(inside, p_s.reshape(-1)[flat], 0.0)
    on_k = (weight * (1.0 - frac))[:, None] * window[:, 1:]  # p(z − k)
    on_k1 = (weight * frac)[:, None] * window[:, :-1]  # p(z − k − 1)
    return on_k + on_k1


@functools.partial(jax.jit, static_argnames=("plan",))
def return_law(
    mdp: TabularMDP, pi: Array, plan: ReturnGridPlan, reward_law: tuple[Array, Array] | None = None
) -> tuple[Array, Array]:
    """The law of the undiscounted return on ``plan.support`` (jittable in ``mdp`` and ``pi``).

    Args:
      mdp: the tabular MDP (may be traced; the plan's edges and atoms must cover it).
      pi: ``[S, A]`` policy.
      plan: from :func:`plan_return_grid` on the concrete MDP (static).
      reward_law: the discrete law the plan was made with (may be traced), else None.

    Returns:
      (p_sa ``[S, A, Z]`` = P(Z = z | s, a), p_s ``[S, Z]`` = Σ_a π(a|s) p_sa). Rows of terminal
      states are zero (the episode is over), as in :func:`hindsight.return_distribution`, which this
      equals on deterministic grid-aligned MDPs.
    """
    num_states, num_actions, num_atoms = plan.num_states, plan.num_actions, plan.num_atoms
    chex.assert_shape(pi, (num_states, num_actions))
    value, weight = _pair_atoms(mdp, plan, reward_law)
    shift, frac = _split_on_grid(value / plan.step)
    next_state = jnp.asarray(plan.edge_next[plan.pair_edge])
    delta = jax.nn.one_hot(plan.zero_index, num_atoms, dtype=jnp.float32)
    p_s = jnp.broadcast_to(delta, (num_states, num_atoms))

    if plan.schedule == "sweep":
        segment = jnp.asarray(plan.edge_state[plan.pair_edge] * num_actions
                              + plan.edge_action[plan.pair_edge])
        terminal = mdp.terminal[:, None]

        def backup(p_s):
            contrib = _pull(p_s, next_state, shift, frac, weight)
            p_sa = jax.ops.segment_sum(contrib, segment, num_segments=num_states * num_actions)
            return p_sa.reshape(num_states, num_actions, num_atoms)

        def body(p_s, _):
            p_s_new = jnp.einsum("sa,saz->sz", pi, backup(p_s))
            return jnp.where(terminal, delta[None, :], p_s_new), None

        p_s, _ = jax.lax.scan(body, p_s, None, length=plan.horizon)
        p_sa = backup(p_s)
        return p_sa, jnp.einsum("sa,saz->sz", pi, p_sa)

    # Levels: states of height 1 (every action ends the episode) first; a state's successors are
    # all of lower height, so each state is backed up once, from final successor laws.
    width = plan.level_states.shape[1]
    pad = lambda x: jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])  # noqa: E731
    # One padding row (index Q of the pairs, S of the states) with zero weight / policy.
    shift_p, frac_p, weight_p, next_p, pi_p = map(pad, (shift, frac, weight, next_state, pi))

    def level(p_s, tables):
        states, pairs, segment = tables
        contrib = _pull(p_s, next_p[pairs], shift_p[pairs], frac_p[pairs], weight_p[pairs])
        p_sa = jax.ops.segment_sum(contrib, segment, num_segments=width * num_actions + 1)
        p_sa = p_sa[:-1].reshape(width, num_actions, num_atoms)
        p_s_level = jnp.einsum("wa,waz->wz", pi_p[states], p_sa)
        return p_s.at[states].set(p_s_level, mode="drop"), p_sa

    states = jnp.asarray(plan.level_states)
    tables = (states, jnp.asarray(plan.level_pairs), jnp.asarray(plan.level_segment))
    _, per_level = jax.lax.scan(level, p_s, tables)
    p_sa = jnp.zeros((num_states, num_actions, num_atoms), jnp.float32)
    p_sa = p_sa.at[states.reshape(-1)].set(
        per_level.reshape(-1, num_actions, num_atoms), mode="drop")
    return p_sa, jnp.einsum("sa,saz->sz", pi, p_sa)


@jax.jit
def return_hindsight_at(p_sa: Array, p_s: Array, pi: Array, support: Array, state: Array,
                        z: Array) -> Array:
    """``[..., A]`` h(a | s, z) = π(a|s) p(z|s,a) / Σ_b π(b|s) p(z|s,b) at continuous returns.

    p(z | s, a) is interpolated linearly between the two nearest grid points (so at a grid point
    it is the table's value). Where p(z | s) ≈ 0 (z not reachable from s) h is the prior π(·|s).

    Args:
      p_sa, p_s: the law of :func:`return_law` on the uniform grid ``support [Z]``.
      pi: ``[S, A]`` policy.
      state: integer states ``[...]``.
      z: returns ``[...]`` (same shape as ``state``).
    """
    state = jnp.asarray(state, jnp.int32)
    z = jnp.asarray(z, jnp.float32)
    chex.assert_equal_shape([state, z])
    num_atoms = support.shape[0]
    step = support[1] - support[0]
    index, frac = _split_on_grid((z - support[0]) / step)

    def at(table, i):
        inside = (i >= 0) & (i < num_atoms)
        return jnp.where(inside[..., None], table[state, ..., jnp.clip(i, 0, num_atoms - 1)],
                         0.0)

    def interpolate(table):
        return ((1.0 - frac)[..., None] * at(table, index)
                + frac[..., None] * at(table, index + 1))

    p_z_sa = interpolate(p_sa)  # [..., A]
    p_z_s = interpolate(p_s[:, None, :])[..., 0]
    prior = pi[state]
    joint = prior * p_z_sa
    possible = p_z_s > 1e-12
    total = jnp.sum(joint, axis=-1, keepdims=True)
    return jnp.where(possible[..., None], joint / jnp.where(possible[..., None], total, 1.0),
                     prior)

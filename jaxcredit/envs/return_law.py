"""The law of the undiscounted return on a grid, fast enough for every compiled training update.

For a tabular policy π and γ = 1, the return from (s, a) is Z = Σ_{k≥0} R_k, with S_0 = s,
A_0 = a, then π, the episode ending on arrival in a terminal state (the episodic convention of
:mod:`jaxcredit.envs.tabular`). Its law satisfies the distributional Bellman equation (Bellemare,
Dabney & Munos 2017) with γ = 1:

    p(z | s, a) = Σ_s' P(s'|s,a) E_R[ p(z − R | s') ],      p(z | s) = Σ_a π(a|s) p(z | s, a),

with R the reward of s -a-> s' and p(· | s') = δ_0 at terminal s'. From it the return-conditioned
hindsight of Harutyunyan et al. (2019, "Hindsight Credit Assignment", Thm 2) is

    h(a | s, z) = π(a|s) p(z|s,a) / Σ_b π(b|s) p(z|s,b).

Two steps, as for any compiled program with a fixed shape:

* :func:`plan_return_grid` runs once on the *concrete* MDP (numpy, outside jit). It picks a
  uniform grid ``support`` (contains 0, covers every return the MDP can produce), lists the
  transitions with P(s'|s,a) > 0 and the reward atoms of each, and a schedule: ``"levels"`` when
  the MDP is acyclic and every episode ends within the horizon (one backup per state, in reverse
  topological order: exact and fast), else ``"sweep"`` (``horizon`` backups of every state,
  the return truncated after ``horizon + 1`` rewards, as :func:`tabular.return_distribution`).
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

import dataclasses
import fractions
import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.envs.tabular import TabularMDP

Array = jax.Array

NOISE_KINDS = ("grid", "hermite")
SCHEDULES = ("auto", "levels", "sweep")
# A reward within this fraction of a grid step of a grid point is on it: float32 rounding of a
# value such as 0.9 · 23/103 must not leak a 1e-7 share of the mass to the next grid point.
_SNAP = 1e-3
# Gaussian noise: the grid covers ±_NOISE_SDS standard deviations of the summed noise of an
# episode, and the "grid" kernel keeps ±_KERNEL_SDS standard deviations of each reward.
_NOISE_SDS = 6.0
_KERNEL_SDS = 5.0


@dataclasses.dataclass(frozen=True, eq=False)
class ReturnGridPlan:
    """Static description of the return grid and of the backups (numpy arrays, built once).

    Hashable by identity, so it can be a static argument of ``jax.jit``; its arrays become
    constants of the compiled program.

    Attributes:
      support: ``[Z]`` float32 uniform grid of returns; ``support[zero_index] == 0``.
      step: grid step.
      zero_index: index of the return 0.
      horizon: the backups cover ``horizon + 1`` rewards (exact when episodes are that short).
      num_states, num_actions: S and A of the MDP.
      edge_state, edge_action, edge_next: ``[E]`` int32, the transitions s -a-> s' with
        P(s'|s,a) > 0 from non-terminal s.
      reward_kind: ``"discrete"`` (a ``reward_law`` was given), ``"deterministic"`` (σ = 0
        everywhere) or ``"gaussian"``.
      noise: ``"grid"`` or ``"hermite"`` (how Gaussian rewards are discretised).
      num_reward_atoms: J, atoms per transition: the law's size (discrete), 1 (deterministic),
        ``noise_points`` (hermite) or 2K + 1 (grid kernel).
      pair_edge, pair_atom: ``[Q]`` int32, the (edge, reward atom) pairs that can carry mass.
      pair_noisy: ``[Q]`` bool, the pair belongs to a transition with Gaussian noise.
      schedule: ``"levels"`` or ``"sweep"``.
      level_states: ``[H, W]`` int32 states of each level (height 1..H), padded with S.
      level_pairs: ``[H, P]`` int32 pairs leaving each level's states, padded with Q.
      level_segment: ``[H, P]`` int32 slot · A + action of each pair in its level, padded W · A.
    """

    support: np.ndarray
    step: float
    zero_index: int
    horizon: int
    num_states: int
    num_actions: int
    edge_state: np.ndarray
    edge_action: np.ndarray
    edge_next: np.ndarray
    reward_kind: str
    noise: str
    num_reward_atoms: int
    pair_edge: np.ndarray
    pair_atom: np.ndarray
    pair_noisy: np.ndarray
    schedule: str
    level_states: np.ndarray | None = None
    level_pairs: np.ndarray | None = None
    level_segment: np.ndarray | None = None

    @property
    def num_atoms(self) -> int:
        return int(self.support.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_state.shape[0])

    @property
    def num_pairs(self) -> int:
        return int(self.pair_edge.shape[0])

    @property
    def kernel_taps(self) -> int:
        """K of the ``"grid"`` noise kernel (offsets −K..K)."""
        return (self.num_reward_atoms - 1) // 2


# ----------------------------------------------------------------------------------------------
# Planning (numpy, concrete MDP)
# ----------------------------------------------------------------------------------------------


def _common_step(values: np.ndarray, max_denominator: int = 1000) -> float | None:
    """Largest g with every value an integer multiple of g (up to float32 rounding), or None.

    All values are compared with the smallest non-zero magnitude b: each v / b must be a fraction
    p / q with q ≤ ``max_denominator``; then g = b / lcm(q).
    """
    magnitudes = np.unique(np.abs(values[np.abs(values) > 1e-12]))
    if magnitudes.size == 0:
        return 1.0
    base = float(magnitudes.min())
    denominator = 1
    for ratio in magnitudes / base:
        approx = fractions.Fraction(float(ratio)).limit_denominator(max_denominator)
        if abs(float(approx) - ratio) > 1e-5 * max(1.0, ratio):
            return None
        denominator = denominator * approx.denominator // math.gcd(denominator,
                                                                   approx.denominator)
    return base / denominator


def _heights(num_states: int, edge_state, edge_next, terminal) -> np.ndarray | None:
    """Longest number of steps to the end of the episode from each state (0 at terminals).

    Kahn's algorithm on the successor graph of the non-terminal states; None if it has a cycle.
    """
    live = ~terminal
    pairs = {(int(s), int(t)) for s, t in zip(edge_state, edge_next, strict=True) if live[t]}
    predecessors = [[] for _ in range(num_states)]
    remaining = np.zeros(num_states, np.int64)
    for s, t in pairs:
        predecessors[t].append(s)
        remaining[s] += 1
    height = np.where(live, 1, 0).astype(np.int64)
    ready = [s for s in range(num_states) if live[s] and remaining[s] == 0]
    done = 0
    while ready:
        t = ready.pop()
        done += 1
        for s in predecessors[t]:
            height[s] = max(height[s], height[t] + 1)
            remaining[s] -= 1
            if remaining[s] == 0:
                ready.append(s)
    return height if done == int(live.sum()) else None


def _return_bounds(num_states, edge_state, edge_next, edge_low, edge_high, terminal,
                   num_steps) -> tuple[float, float]:
    """Smallest and largest partial return over ``num_steps`` steps from any state (DP, numpy).

    Every intermediate distribution of the backups lies within these bounds too (running min /
    max over the number of steps), so no mass leaves the grid on the way.
    """
    low, high = np.zeros(num_states), np.zeros(num_states)
    overall_low, overall_high = 0.0, 0.0
    for _ in range(num_steps):
        cand_low = edge_low + low[edge_next]
        cand_high = edge_high + high[edge_next]
        new_low, new_high = np.full(num_states, np.inf), np.full(num_states, -np.inf)
        np.minimum.at(new_low, edge_state, cand_low)
        np.maximum.at(new_high, edge_state, cand_high)
        low = np.where(terminal | np.isinf(new_low), 0.0, new_low)
        high = np.where(terminal | np.isinf(new_high), 0.0, new_high)
        overall_low, overall_high = min(overall_low, low.min()), max(overall_high, high.max())
    return overall_low, overall_high


def _grid_size(low: float, high: float, step: float) -> tuple[int, int]:
    """(number of atoms, zero index) of the grid from ≤ low to ≥ high, one spare atom each side."""
    below = int(math.ceil(-low / step - _SNAP)) + 1
    above = int(math.ceil(high / step - _SNAP)) + 1
    return below + above + 1, below


def _discrete_atoms(reward_law, edge_state, edge_action, edge_next):
    """(pair_edge, pair_atom, atom value) of the (edge, atom) pairs with positive probability."""
    values = np.asarray(reward_law[0], np.float64)
    probs = np.asarray(reward_law[1], np.float64)
    if probs.ndim == 4:
        edge_probs = probs[edge_state, edge_action, edge_next]
    elif probs.ndim == 3:
        edge_probs = probs[edge_state, edge_action]
    else:
        raise ValueError(f"reward_law probs must be [S, A, S, J] or [S, A, J], got {probs.shape}")
    pair_edge, pair_atom = (a.astype(np.int32) for a in np.nonzero(edge_probs > 0))
    return pair_edge, pair_atom, values[pair_atom]


def _noise_atoms(std: np.ndarray, noise: str, noise_points: int, step: float):
    """(pair_edge, pair_atom, J) for Gaussian rewards; noise-free edges keep one atom.

    ``"hermite"``: atom i is the i-th Gauss–Hermite node. ``"grid"``: atom i is the offset
    t = i − K of the reward μ + t·step, K covering 5 σ_max (a noise-free edge keeps t = 0).
    """
    noisy = std > 0
    if noise == "hermite":
        if noise_points < 1:
            raise ValueError(f"noise_points must be >= 1, got {noise_points}")
        num_atoms, still = int(noise_points), 0
    else:
        taps = int(math.ceil(_KERNEL_SDS * float(std.max()) / step))
        num_atoms, still = 2 * taps + 1, taps
    per_edge = np.where(noisy, num_atoms, 1)
    pair_edge = np.repeat(np.arange(std.shape[0], dtype=np.int32), per_edge)
    pair_atom = np.concatenate([np.arange(num_atoms) if n > 1 else np.array([still])
                                for n in per_edge]).astype(np.int32)
    return pair_edge, pair_atom, num_atoms


def _grid_step(low: float, high: float, means: np.ndarray, sigma_min: float,
               atoms_per_sigma: int, max_atoms: int) -> float:
    """The grid step (see :func:`plan_return_grid`); ``sigma_min`` = 0 for noise-free rewards."""
    common = _common_step(means)
    finest = max(high - low, 1e-6) / max(max_atoms - 4, 1)
    if sigma_min == 0.0:
        return common if common is not None else finest
    target = sigma_min / atoms_per_sigma
    step = common / max(1, math.ceil(common / target - 1e-9)) if common is not None else target
    # Coarser than wished when over budget: the noise is then still right in mean.
    return step if _grid_size(low, high, step)[0] <= max_atoms else finest


def plan_return_grid(
    mdp: TabularMDP,
    horizon: int,
    reward_law: tuple[Array, Array] | None = None,
    max_atoms: int = 4096,
    noise: str = "grid",
    noise_points: int = 7,
    atoms_per_sigma: int = 4,
    schedule: str = "auto",
) -> ReturnGridPlan:
    """Plans the return grid of a concrete MDP (numpy; call outside jit).

    Args:
      mdp: the concrete tabular MDP.
      horizon: the backups cover ``horizon + 1`` rewards (the episode time limit: every episode
        of the environment ends within it).
      reward_law: ``(values [J], probs [S, A, S, J] or [S, A, J])``, the exact discrete reward
        law (``env.reward_law(params)``), or None for the MDP's Gaussian law.
      max_atoms: largest grid allowed.
      noise: ``"grid"`` or ``"hermite"`` discretisation of Gaussian rewards (module docstring).
      noise_points: Gauss–Hermite atoms per Gaussian reward (``noise="hermite"``).
      atoms_per_sigma: Gaussian rewards: the step is at most σ_min / atoms_per_sigma when the
        budget allows.
      schedule: ``"auto"`` (levels when possible), ``"levels"`` or ``"sweep"``.

    Grid step: the largest step dividing every reward atom when they are commensurate (then the
    law is exact), subdivided to resolve Gaussian noise; otherwise the finest step within
    ``max_atoms``. Bounds: the extreme partial returns over the episode (dynamic programming over
    the atoms' min and max), widened by 6 standard deviations of the summed Gaussian noise.

    Raises:
      ValueError: the exact grid would need more than ``max_atoms`` atoms, or a bad argument.
    """
    if noise not in NOISE_KINDS:
        raise ValueError(f"noise must be one of {NOISE_KINDS}, got {noise!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if int(horizon) < 0:
        raise ValueError(f"horizon must be >= 0, got {horizon}")
    horizon = int(horizon)
    transition = np.asarray(mdp.transition, np.float64)
    num_states, num_actions, _ = transition.shape
    terminal = np.asarray(mdp.terminal, bool)
    # Edges: P(s'|s,a) > 0 from non-terminal s (the episode ends on arrival in a terminal).
    edges = np.nonzero(~terminal[:, None, None] & (transition > 0))
    edge_state, edge_action, edge_next = (a.astype(np.int32) for a in edges)
    mean = np.asarray(mdp.transition_reward, np.float64)[edges]
    std = np.asarray(mdp.transition_reward_std, np.float64)[edges]
    num_edges = edge_state.shape[0]

    # Reward atoms known before the step: the discrete law's, else the means (noise: margin).
    if reward_law is not None:
        kind = "discrete"
        pair_edge, pair_atom, pair_value = _discrete_atoms(reward_law, *edges)
        num_reward_atoms = int(np.asarray(reward_law[0]).shape[0])
    else:
        kind = "gaussian" if np.any(std > 0) else "deterministic"
        pair_edge, pair_atom, pair_value = (np.arange(num_edges, dtype=np.int32),
                                            np.zeros(num_edges, np.int32), mean)
        num_reward_atoms = 1
    low_per_edge, high_per_edge = np.full(num_edges, np.inf), np.full(num_edges, -np.inf)
    np.minimum.at(low_per_edge, pair_edge, pair_value)
    np.maximum.at(high_per_edge, pair_edge, pair_value)

    heights = _heights(num_states, edge_state, edge_next, terminal)
    can_level = heights is not None and int(heights.max()) <= horizon + 1
    if schedule == "levels" and not can_level:
        raise ValueError("schedule='levels' needs an acyclic MDP whose episodes end within "
                         f"horizon + 1 = {horizon + 1} steps")
    use_levels = can_level and schedule != "sweep"
    num_steps = int(heights.max()) if use_levels else horizon + 1
    low, high = _return_bounds(num_states, edge_state, edge_next, low_per_edge, high_per_edge,
                               terminal, num_steps)
    sigma_min = 0.0
    if kind == "gaussian":
        margin = _NOISE_SDS * float(std.max()) * math.sqrt(num_steps)
        low, high = low - margin, high + margin
        sigma_min = float(std[std > 0].min())
    step = _grid_step(low, high, pair_value, sigma_min, atoms_per_sigma, max_atoms)
    num_atoms, zero_index = _grid_size(low, high, step)
    if num_atoms > max_atoms:
        raise ValueError(f"the return grid needs {num_atoms} atoms (step {step:.6g}, returns in "
                         f"[{low:.6g}, {high:.6g}]) > max_atoms={max_atoms}")
    support = ((np.arange(num_atoms) - zero_index) * step).astype(np.float32)

    if kind == "gaussian":
        pair_edge, pair_atom, num_reward_atoms = _noise_atoms(std, noise, noise_points, step)
    levels = {}
    if use_levels:
        levels = _level_arrays(heights, num_states, num_actions, edge_state, edge_action,
                               pair_edge)
    return ReturnGridPlan(
        support=support, step=float(step), zero_index=int(zero_index), horizon=horizon,
        num_states=int(num_states), num_actions=int(num_actions), edge_state=edge_state,
        edge_action=edge_action, edge_next=edge_next, reward_kind=kind, noise=noise,
        num_reward_atoms=int(num_reward_atoms), pair_edge=pair_edge, pair_atom=pair_atom,
        pair_noisy=(std[pair_edge] > 0) & (kind == "gaussian"),
        schedule="levels" if use_levels else "sweep", **levels)


def _level_arrays(heights, num_states, num_actions, edge_state, edge_action,
                  pair_edge) -> dict[str, np.ndarray]:
    """Padded per-level tables for the ``"levels"`` schedule (height 1 first)."""
    max_height = int(heights.max())
    members = [np.flatnonzero(heights == h) for h in range(1, max_height + 1)]
    width = max(len(m) for m in members)
    slot = np.zeros(num_states, np.int64)
    for m in members:
        slot[m] = np.arange(len(m))
    pair_source = edge_state[pair_edge]
    pair_lists = [np.flatnonzero(heights[pair_source] == h) for h in range(1, max_height + 1)]
    num_pairs = pair_edge.shape[0]
    pad = max(len(p) for p in pair_lists)
    level_states = np.full((max_height, width), num_states, np.int32)
    level_pairs = np.full((max_height, pad), num_pairs, np.int32)
    level_segment = np.full((max_height, pad), width * num_actions, np.int32)
    for h, (m, p) in enumerate(zip(members, pair_lists, strict=True)):
        level_states[h, :len(m)] = m
        level_pairs[h, :len(p)] = p
        level_segment[h, :len(p)] = (slot[pair_source[p]] * num_actions
                                     + edge_action[pair_edge[p]])
    return {"level_states": level_states, "level_pairs": level_pairs,
            "level_segment": level_segment}


# ----------------------------------------------------------------------------------------------
# The law (jittable)
# ----------------------------------------------------------------------------------------------


def _split_on_grid(x: Array) -> tuple[Array, Array]:
    """x = k + f in grid units, k integer, 0 ≤ f < 1; values within _SNAP of a point snap to it."""
    nearest = jnp.round(x)
    x = jnp.where(jnp.abs(x - nearest) < _SNAP, nearest, x)
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
      states are zero (the episode is over), as in :func:`tabular.return_distribution`, which this
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

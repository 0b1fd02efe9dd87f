"""The grid plan of the law of the return: run once, on the concrete MDP (numpy, outside jit).

:func:`plan_return_grid` picks a uniform grid ``support`` (contains 0, covers every return the
MDP can produce), lists the transitions with P(s'|s,a) > 0 and the reward atoms of each, and a
schedule: ``"levels"`` when the MDP is acyclic and every episode ends within the horizon (one
backup per state, in reverse topological order), else ``"sweep"`` (``horizon`` backups of every
state). :func:`jaxcredit.exact.return_law.return_law` then computes the law on that plan inside
any compiled program; its docstring describes the grid, the reward atoms and the noise kernels.
"""

from __future__ import annotations

import dataclasses
import fractions
import math

import numpy as np
from numpy.typing import ArrayLike

from jaxcredit.exact.tabular import TabularMDP

NOISE_KINDS = ("grid", "hermite")
SCHEDULES = ("auto", "levels", "sweep")
# A reward within this fraction of a grid step of a grid point is on it: float32 rounding of a
# value such as 0.9 · 23/103 must not leak a 1e-7 share of the mass to the next grid point.
GRID_SNAP = 1e-3
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
    below = int(math.ceil(-low / step - GRID_SNAP)) + 1
    above = int(math.ceil(high / step - GRID_SNAP)) + 1
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
    reward_law: tuple[ArrayLike, ArrayLike] | None = None,
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

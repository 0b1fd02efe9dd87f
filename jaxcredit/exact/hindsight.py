"""Exact hindsight distributions of a tabular MDP: the models hindsight credit estimators learn.

For a tabular policy π (episodic convention of :mod:`jaxcredit.exact.tabular`):

* :func:`state_hindsight` h_γ(a | s, s') of Harutyunyan et al. (2019, "Hindsight Credit
  Assignment"), the state-conditioned model of HCA and COCOA's state variant;
* :func:`reward_hindsight` h(a | s, u) for the reward value u met later (Meulemans et al. 2023,
  "Would I have gotten that reward? Long-term credit assignment by counterfactual contribution
  analysis"), with :func:`reward_value_law` the law of u given (s, a);
* :func:`return_distribution`, :func:`return_hindsight` h(a | s, z) for the return z (HCA, Thm 2)
  on a grid by a truncated sweep, and :func:`bandit_return_hindsight` in closed form for one-step
  episodes with Gaussian rewards. :mod:`jaxcredit.exact.return_law` computes the same law on a
  planned grid fast enough for every training update.

Everything is pure ``jnp`` and jittable except :func:`reward_value_law` (it reads concrete arrays).
"""

from __future__ import annotations

from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.exact.tabular import TabularMDP, episodic_transition, future_occupancy

Array = jax.Array


@jax.jit
def state_hindsight(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S, S, A]`` time-independent state-conditioned hindsight h_γ(a | s, s').

    Harutyunyan et al. (2019), with β = γ weighting of future steps:

        d_γ(s'|s, a) = Σ_{k≥1} γ^{k−1} P(S_{t+k} = s' | S_t = s, A_t = a)
        d_γ(s'|s)    = Σ_a π(a|s) d_γ(s'|s, a)
        h[s, s', a]  = π(a|s) d_γ(s'|s, a) / d_γ(s'|s)

    Only strictly future states (k ≥ 1) within the episode count; a terminal state counts once,
    on arrival. Then Q^π(s, a) = r(s, a) + E_π[Σ_{k≥1} γ^k h(a|s, S_k)/π(a|s) R_k] exactly.
    Where s' is unreachable from s (d_γ(s'|s) = 0), h is defined as the prior π(·|s).
    """
    d_sa = future_occupancy(mdp, pi, gamma)
    joint = pi[:, :, None] * d_sa
    marginal = jnp.sum(joint, axis=1)
    reachable = marginal > 1e-12
    h = joint / jnp.where(reachable, marginal, 1.0)[:, None, :]
    h = jnp.where(reachable[:, None, :], h, pi[:, :, None])
    return jnp.transpose(h, (0, 2, 1))


@jax.jit
def reward_hindsight(mdp: TabularMDP, pi: Array, gamma: float, reward_probs: Array) -> Array:
    """``[S, U, A]`` reward-conditioned hindsight p^π_γ(a | s, u) of COCOA (Meulemans et al. 2023).

    The hindsight object u is the reward *value* of a later step, with law
    ``reward_probs[y, b, u]`` = P(U = u | S = y, A = b) (the environment's ``reward_distribution``):

        d_γ(u|s, a) = Σ_{k≥1} γ^{k−1} Σ_{y,b} P(S_{t+k} = y | s, a) π(b|y) P(u | y, b)
        p(a|s, u)   = π(a|s) d_γ(u|s, a) / Σ_b π(b|s) d_γ(u|s, b)

    The contribution coefficient is w(s, a, u) = p(a|s, u)/π(a|s), and because the reward is a
    function of u, Q^π(s, a) = r(s, a) + E_π[Σ_{k≥1} γ^k w(s, a, U_k) R_k] exactly (COCOA, Thm 1).
    Only steps of the episode count: the arrival in a terminal state (which
    :func:`future_occupancy` counts once) takes no action and earns nothing. Where u cannot
    follow s the prior π(·|s) is returned (the coefficient is then 1).
    """
    chex.assert_rank(reward_probs, 3)
    d_sa = future_occupancy(mdp, pi, gamma) * (1.0 - mdp.terminal)   # [S, A, Y]
    d_u = jnp.einsum("say,yb,ybu->sau", d_sa, pi, reward_probs)      # [S, A, U]
    joint = pi[:, :, None] * d_u
    marginal = jnp.sum(joint, axis=1)                                # [S, U]
    reachable = marginal > 1e-12
    h = joint / jnp.where(reachable, marginal, 1.0)[:, None, :]
    h = jnp.where(reachable[:, None, :], h, pi[:, :, None])
    return jnp.transpose(h, (0, 2, 1))


def reward_value_law(mdp: TabularMDP, decimals: int = 6) -> tuple[Array, Array]:
    """``(values [U], probs [S, A, U])``: the law of the reward value given (s, a) of an MDP with
    deterministic transition rewards (``transition_reward_std == 0``), for COCOA-reward.

    Values are the distinct transition rewards (rounded to ``decimals``), 0 always included.
    Runs on concrete arrays (numpy); raises a one-line ValueError for noisy rewards, whose values
    do not form a finite set.
    """

    std = np.asarray(mdp.transition_reward_std)
    if np.any(std > 0):
        raise ValueError("the rewards are Gaussian, not a finite set of values; give the "
                         "environment a reward_distribution or the estimator reward_values")
    reward = np.round(np.asarray(mdp.transition_reward, np.float64), decimals)
    values = np.unique(np.concatenate([[0.0], reward.reshape(-1)]))
    onehot = (reward[..., None] == values).astype(np.float32)          # [S, A, S', U]
    probs = np.einsum("sat,satu->sau", np.asarray(mdp.transition, np.float32), onehot)
    return jnp.asarray(values, jnp.float32), jnp.asarray(probs)


def _shift_indices(mdp: TabularMDP, support: Array) -> tuple[Array, Array]:
    step = support[1] - support[0]
    shift = jnp.round(mdp.transition_reward / step).astype(jnp.int32)
    return shift, step


@partial(jax.jit, static_argnames=("horizon",))
def return_distribution(
    mdp: TabularMDP, pi: Array, support: Array, horizon: int
) -> tuple[Array, Array]:
    """Distribution of the undiscounted return Z on a uniform grid ``support`` ``[Z]``.

    Z(s, a) = Σ_{k≥0} R_k from S_0 = s, A_0 = a, then π, over at most ``horizon + 1`` steps (exact
    when every episode ends within ``horizon`` steps). Rewards must be deterministic and multiples
    of the grid step; the grid must contain 0 (exactly, up to rounding). Mass of returns outside the
    grid is dropped, so a too-small grid shows as probabilities summing to less than one.

    This is the dense reference ([S, A, S, Z] per backup). :mod:`jaxcredit.exact.return_law`
    computes the same law over the transitions only, with discrete or Gaussian rewards, fast enough
    for a training step.

    Returns:
      (p_sa ``[S, A, Z]`` = P(Z = z | s, a), p_s ``[S, Z]`` = P(Z = z | s) under π).
    """
    num_atoms = support.shape[0]
    shift, step = _shift_indices(mdp, support)
    zero = jnp.round(-support[0] / step).astype(jnp.int32)
    delta = jax.nn.one_hot(zero, num_atoms, dtype=jnp.float32)
    terminal = mdp.terminal[:, None]
    p_ep = episodic_transition(mdp)
    atoms = jnp.arange(num_atoms)
    source = atoms[None, None, None, :] - shift[..., None]  # [S, A, S, Z]
    valid = (source >= 0) & (source < num_atoms)
    source = jnp.clip(source, 0, num_atoms - 1)

    def backup(p_s):
        # Z(s, a) = r(s, a, s') + Z(s'): shift the successor's distribution by r, mix over s'.
        # Terminal successors hold δ_0 in p_s, so only their arrival reward counts.
        shifted = jnp.where(valid, p_s[jnp.arange(p_s.shape[0])[None, None, :, None], source], 0.0)
        return jnp.einsum("sat,satz->saz", p_ep, shifted)

    def body(p_s, _):
        p_sa = backup(p_s)
        p_s_new = jnp.einsum("sa,saz->sz", pi, p_sa)
        return jnp.where(terminal, delta[None, :], p_s_new), None

    init = jnp.broadcast_to(delta, (mdp.num_states, num_atoms))
    p_s, _ = jax.lax.scan(body, init, None, length=horizon)
    # p_s now covers `horizon` steps from each state; one more backup gives (s, a) with a first.
    p_sa = backup(p_s)
    return p_sa, jnp.einsum("sa,saz->sz", pi, p_sa)


@partial(jax.jit, static_argnames=("horizon",))
def return_hindsight(mdp: TabularMDP, pi: Array, support: Array, horizon: int) -> Array:
    """``[S, Z, A]`` return-conditioned hindsight h(a | s, z) for discrete returns.

    h(a|s, z) = π(a|s) P(Z = z | s, a) / P(Z = z | s) (Harutyunyan et al. 2019, Thm 2), with Z the
    undiscounted return from s (see :func:`return_distribution`). Where P(Z = z | s) = 0 the prior
    π(·|s) is returned.
    """
    p_sa, p_s = return_distribution(mdp, pi, support, horizon)
    joint = pi[:, :, None] * p_sa
    possible = p_s > 1e-12
    h = jnp.where(possible[:, None, :], joint / jnp.where(possible, p_s, 1.0)[:, None, :],
                  pi[:, :, None])
    return jnp.transpose(h, (0, 2, 1))


@jax.jit
def bandit_return_hindsight(mdp: TabularMDP, pi: Array, z: Array) -> Array:
    """``[..., S, A]`` closed-form return hindsight for one-step episodes with Gaussian rewards.

    When every action from s ends the episode (a bandit such as AmbiguousBandit), the return is the
    first reward, a Gaussian mixture:

        p(z | s, a) = Σ_s' P(s'|s,a) N(z; μ(s,a,s'), σ(s,a,s')²)
        h(a | s, z) = π(a|s) p(z|s,a) / Σ_b π(b|s) p(z|s,b).

    Requires σ > 0 on the transitions with positive probability. Rows of states whose actions do
    not all end the episode are meaningless. ``z`` may have any shape.
    """
    z = jnp.asarray(z, jnp.float32)[..., None, None, None]
    std = jnp.maximum(mdp.transition_reward_std, 1e-12)
    log_density = -0.5 * ((z - mdp.transition_reward) / std) ** 2 - jnp.log(std)
    density = jnp.sum(mdp.transition * jnp.exp(log_density), axis=-1)  # [..., S, A]
    joint = pi * density
    return joint / jnp.sum(joint, axis=-1, keepdims=True)

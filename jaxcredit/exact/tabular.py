"""Exact ground truth for small environments: tabular MDPs and dynamic programming in JAX.

Every small environment is a :class:`~jaxcredit.envs.tabular_env.TabularEnv`: it exposes
``env.tabular_mdp(params) -> TabularMDP`` and ``env.state_index(state) -> int32`` (the tabular
index of an environment state; :func:`has_ground_truth` checks for both). From a tabular
policy ``pi[s, a]`` the functions below give exact V^π, Q^π, A^π, discounted occupancies and the
exact policy gradient of a softmax-tabular policy, and sample episodes;
:mod:`jaxcredit.exact.hindsight` gives the hindsight distributions built on them. Everything is
pure ``jnp`` and jittable.

Episodic convention. Terminal states are absorbing with zero reward in ``transition``; for every
quantity below the episode *ends* on arrival in a terminal state, i.e. the dynamic programming uses
the sub-stochastic matrix ``P_ep[s] = P[s] * (1 - terminal[s])``. A terminal state is therefore
visited (counted) once, on arrival, exactly as it appears once as the final observation of a
rollout. This also makes ``gamma = 1`` valid for every MDP whose episodes end with probability one.

Rewards. ``transition_reward[s, a, s']`` is the mean reward of the transition s -a-> s' and
``transition_reward_std[s, a, s']`` the std of its Gaussian noise (0 for deterministic rewards).
``reward[s, a]`` and ``reward_std[s, a]`` are the implied mean and std of the reward given (s, a)
(a Gaussian mixture over s' in general). Use :func:`make_tabular_mdp` to build a consistent record.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array


def has_ground_truth(env: Any) -> bool:
    """True if ``env`` (possibly wrapped) exposes ``tabular_mdp`` and ``state_index``."""
    try:
        return callable(getattr(env, "tabular_mdp")) and callable(getattr(env, "state_index"))
    except AttributeError:
        return False


@struct.dataclass
class TabularMDP:
    """A finite MDP with absorbing zero-reward terminal states.

    Attributes:
      transition: ``[S, A, S]`` P(s' | s, a). Rows of terminal states are the identity.
      reward: ``[S, A]`` expected reward r(s, a) = Σ_s' P(s'|s,a) transition_reward[s, a, s'].
      reward_std: ``[S, A]`` std of the reward given (s, a) (mixture over s' included).
      transition_reward: ``[S, A, S]`` mean reward of s -a-> s'.
      transition_reward_std: ``[S, A, S]`` std of the Gaussian noise of that reward.
      initial: ``[S]`` start-state distribution.
      terminal: ``[S]`` bool, terminal (absorbing) states.
      observation: ``[S, *obs_shape]`` what the environment's observation is in each state
        (aliasing preserved: two states may share an observation).
    """

    transition: Array
    reward: Array
    reward_std: Array
    transition_reward: Array
    transition_reward_std: Array
    initial: Array
    terminal: Array
    observation: Array

    @property
    def num_states(self) -> int:
        return self.transition.shape[0]

    @property
    def num_actions(self) -> int:
        return self.transition.shape[1]


@struct.dataclass
class EpisodeBatch:
    """Episodes sampled from a :class:`TabularMDP`, time-major ``[T, B]``.

    ``state[t]`` is s_t, ``reward[t]`` the (noisy) reward of s_t -> ``next_state[t]``. After an
    episode has ended, ``valid`` is False and state/next_state repeat the last next state, action
    is 0 and reward is 0. ``truncated[T-1]`` is True for episodes cut by ``max_steps``.
    """

    state: Array
    action: Array
    reward: Array
    next_state: Array
    terminated: Array
    truncated: Array
    valid: Array

    @property
    def done(self) -> Array:
        return jnp.logical_or(self.terminated, self.truncated)


def make_tabular_mdp(
    transition: Array,
    transition_reward: Array,
    initial: Array,
    terminal: Array,
    observation: Array,
    transition_reward_std: Array | None = None,
) -> TabularMDP:
    """Builds a consistent :class:`TabularMDP`.

    Terminal rows are forced absorbing (identity transition) with zero reward, and the per-(s, a)
    reward mean and std are derived from the per-transition ones.

    Args:
      transition: ``[S, A, S]`` P(s'|s,a).
      transition_reward: ``[S, A, S]`` mean reward of s -a-> s' (or ``[S, A]``, broadcast over s').
      initial: ``[S]`` start distribution.
      terminal: ``[S]`` bool.
      observation: ``[S, *obs_shape]``.
      transition_reward_std: optional ``[S, A, S]`` (or ``[S, A]``) Gaussian noise std.
    """
    transition = jnp.asarray(transition, jnp.float32)
    num_states, num_actions, _ = transition.shape
    chex.assert_shape(transition, (num_states, num_actions, num_states))
    transition_reward = jnp.asarray(transition_reward, jnp.float32)
    if transition_reward.ndim == 2:
        transition_reward = jnp.broadcast_to(transition_reward[:, :, None], transition.shape)
    if transition_reward_std is None:
        transition_reward_std = jnp.zeros_like(transition)
    transition_reward_std = jnp.asarray(transition_reward_std, jnp.float32)
    if transition_reward_std.ndim == 2:
        transition_reward_std = jnp.broadcast_to(transition_reward_std[:, :, None],
                                                 transition.shape)
    chex.assert_equal_shape([transition, transition_reward, transition_reward_std])
    terminal = jnp.asarray(terminal, bool)
    chex.assert_shape(terminal, (num_states,))

    absorbing = jnp.broadcast_to(jnp.eye(num_states)[:, None, :], transition.shape)
    is_term = terminal[:, None, None]
    transition = jnp.where(is_term, absorbing, transition)
    transition_reward = jnp.where(is_term, 0.0, transition_reward)
    transition_reward_std = jnp.where(is_term, 0.0, transition_reward_std)

    reward = jnp.sum(transition * transition_reward, axis=-1)
    second_moment = jnp.sum(transition * (transition_reward_std**2 + transition_reward**2), -1)
    reward_std = jnp.sqrt(jnp.maximum(second_moment - reward**2, 0.0))
    return TabularMDP(
        transition=transition,
        reward=reward,
        reward_std=reward_std,
        transition_reward=transition_reward,
        transition_reward_std=transition_reward_std,
        initial=jnp.asarray(initial, jnp.float32),
        terminal=terminal,
        observation=jnp.asarray(observation),
    )


@jax.jit
def softmax_policy(theta: Array) -> Array:
    """π(a|s) = exp θ[s, a] / Σ_b exp θ[s, b] for a ``[S, A]`` logit table."""
    return jax.nn.softmax(theta, axis=-1)


def uniform_policy(mdp: TabularMDP) -> Array:
    """The uniformly random policy ``[S, A]``."""
    return jnp.full((mdp.num_states, mdp.num_actions), 1.0 / mdp.num_actions)


def episodic_transition(mdp: TabularMDP) -> Array:
    """``[S, A, S]`` transition with terminal rows zeroed: the episode ends on arrival."""
    return mdp.transition * (1.0 - mdp.terminal.astype(mdp.transition.dtype))[:, None, None]


@jax.jit
def policy_transition(mdp: TabularMDP, pi: Array) -> Array:
    """``[S, S]`` P_π(s'|s) = Σ_a π(a|s) P_ep(s'|s,a) (episodic, see module docstring)."""
    chex.assert_shape(pi, (mdp.num_states, mdp.num_actions))
    return jnp.einsum("sa,sat->st", pi, episodic_transition(mdp))


def _sequential_solve(a: Array, b: Array) -> Array:
    # Under vmap a loop of unbatched solves, never one batched LAPACK call: two batched LAPACK
    # calls running at once deadlocked XLA:CPU's thread pool (docs/xla_cpu_hang.md; gdb:
    # lapack_strsm_ffi -> ParallelBatchMap -> BlockingCounter::Wait in a vmapped oracle run).
    return jax.custom_batching.sequential_vmap(jnp.linalg.solve)(a, b)


@jax.custom_vjp
def linear_solve(a: Array, b: Array) -> Array:
    """x = a⁻¹ b (``b`` ``[S]`` or ``[S, K]``), batch-safe on XLA:CPU and differentiable.

    ``jnp.linalg.solve`` with its batched form replaced by a loop of unbatched solves
    (``jax.custom_batching.sequential_vmap``), which does not differentiate by itself, so the
    gradient is written out: with λ = a⁻ᵀ ḡ, ∂b = λ and ∂a = −λ xᵀ.
    """
    return _sequential_solve(a, b)


def _solve_fwd(a, b):
    x = _sequential_solve(a, b)
    return x, (a, x)


def _solve_bwd(residuals, g):
    a, x = residuals
    lam = _sequential_solve(jnp.swapaxes(a, -1, -2), g)
    if x.ndim == a.ndim - 1:
        return -jnp.einsum("...i,...j->...ij", lam, x), lam
    return -jnp.einsum("...ik,...jk->...ij", lam, x), lam


linear_solve.defvjp(_solve_fwd, _solve_bwd)


@jax.jit
def successor_representation(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S, S]`` M[s, s'] = Σ_{k≥0} γ^k P(S_k = s' | S_0 = s) within the episode.

    M = (I − γ P_π)^{-1}; k = 0 included, so M[s, s] ≥ 1.
    """
    eye = jnp.eye(mdp.num_states, dtype=mdp.transition.dtype)
    return linear_solve(eye - gamma * policy_transition(mdp, pi), eye)


@jax.jit
def state_values(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S]`` V^π = (I − γ P_π)^{-1} r_π, with r_π(s) = Σ_a π(a|s) r(s, a). V = 0 at terminals."""
    eye = jnp.eye(mdp.num_states, dtype=mdp.transition.dtype)
    r_pi = jnp.sum(pi * mdp.reward, axis=-1)
    return linear_solve(eye - gamma * policy_transition(mdp, pi), r_pi)


@jax.jit
def action_values(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S, A]`` Q^π(s, a) = r(s, a) + γ Σ_s' P_ep(s'|s,a) V^π(s')."""
    v = state_values(mdp, pi, gamma)
    return mdp.reward + gamma * jnp.einsum("sat,t->sa", episodic_transition(mdp), v)


@jax.jit
def advantages(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S, A]`` A^π(s, a) = Q^π(s, a) − V^π(s)."""
    v = state_values(mdp, pi, gamma)
    q = mdp.reward + gamma * jnp.einsum("sat,t->sa", episodic_transition(mdp), v)
    return q - v[:, None]


@jax.jit
def discounted_occupancy(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S]`` d^π_γ(s) = Σ_{t≥0} γ^t P(S_t = s) from the start distribution (not normalised).

    This is the weighting of the policy-gradient theorem: ∇J = Σ_s d(s) Σ_a ∇π(a|s) Q(s, a).
    """
    return mdp.initial @ successor_representation(mdp, pi, gamma)


@partial(jax.jit, static_argnames=("horizon",))
def finite_horizon_values(mdp: TabularMDP, pi: Array, horizon: int, gamma: float = 1.0) -> Array:
    """``[S]`` expected return of the first ``horizon`` steps from each state (V_0 = 0).

    V_{h+1} = r_π + γ P_π V_h, applied ``horizon`` times: exact for an environment whose time limit
    cuts episodes after ``horizon`` steps, when the policy does not depend on time.
    """
    p_pi = policy_transition(mdp, pi)
    r_pi = jnp.sum(pi * mdp.reward, axis=-1)
    v, _ = jax.lax.scan(lambda v, _: (r_pi + gamma * p_pi @ v, None), jnp.zeros_like(r_pi),
                        None, length=horizon)
    return v


@jax.jit
def future_occupancy(mdp: TabularMDP, pi: Array, gamma: float) -> Array:
    """``[S, A, S]`` D[s, a, s'] = Σ_{k≥1} γ^{k−1} P(S_k = s' | S_0 = s, A_0 = a) (episodic)."""
    m = successor_representation(mdp, pi, gamma)
    return jnp.einsum("sau,ut->sat", episodic_transition(mdp), m)


@jax.jit
def objective(mdp: TabularMDP, theta: Array, gamma: float) -> Array:
    """J(θ) = Σ_s μ_0(s) V^{π_θ}(s) for the softmax-tabular policy π_θ = softmax(θ[s, :])."""
    return mdp.initial @ state_values(mdp, softmax_policy(theta), gamma)


@jax.jit
def policy_gradient(mdp: TabularMDP, theta: Array, gamma: float) -> Array:
    """``[S, A]`` exact ∇_θ J for a softmax-tabular policy, by the policy-gradient theorem.

    ∇J = Σ_s d_γ(s) Σ_a ∇π(a|s) Q(s, a) and ∂π(a|s)/∂θ[s, b] = π(a|s)(1[a=b] − π(b|s)) give
    ∂J/∂θ[s, b] = d_γ(s) π(b|s) A^π(s, b) (Sutton et al. 2000).
    """
    pi = softmax_policy(theta)
    return discounted_occupancy(mdp, pi, gamma)[:, None] * pi * advantages(mdp, pi, gamma)


@partial(jax.jit, static_argnames=("num_episodes", "max_steps"))
def sample_episodes(
    mdp: TabularMDP, pi: Array, key: Array, num_episodes: int, max_steps: int
) -> EpisodeBatch:
    """Samples ``num_episodes`` episodes of π in the MDP, time-major ``[max_steps, B]``.

    Rewards carry their Gaussian noise. An episode not terminated after ``max_steps`` steps has
    ``truncated`` True at its last step. Used for Monte-Carlo checks of the exact quantities.
    """
    init_key, key = jax.random.split(key)
    s0 = jax.random.categorical(init_key, jnp.log(mdp.initial), shape=(num_episodes,))
    log_pi = jnp.log(pi)
    log_p = jnp.log(mdp.transition)

    def step(carry, inputs):
        state, alive = carry
        t, step_key = inputs
        ka, ks, kr = jax.random.split(step_key, 3)
        action = jax.random.categorical(ka, log_pi[state])
        next_state = jax.random.categorical(ks, log_p[state, action])
        noise = jax.random.normal(kr, state.shape)
        reward = (mdp.transition_reward[state, action, next_state]
                  + mdp.transition_reward_std[state, action, next_state] * noise)
        terminated = alive & mdp.terminal[next_state]
        truncated = alive & ~terminated & (t == max_steps - 1)
        record = EpisodeBatch(
            state=state,
            action=jnp.where(alive, action, 0),
            reward=jnp.where(alive, reward, 0.0),
            next_state=jnp.where(alive, next_state, state),
            terminated=terminated,
            truncated=truncated,
            valid=alive,
        )
        new_state = jnp.where(alive, next_state, state)
        return (new_state, alive & ~terminated), record

    keys = jax.random.split(key, max_steps)
    alive0 = ~mdp.terminal[s0]
    _, batch = jax.lax.scan(step, (s0, alive0), (jnp.arange(max_steps), keys))
    return batch


@jax.jit
def discounted_returns(batch: EpisodeBatch, gamma: float) -> Array:
    """``[B]`` Σ_t γ^t r_t of each sampled episode (the Monte-Carlo estimate of V(s_0))."""
    t = jnp.arange(batch.reward.shape[0], dtype=jnp.float32)
    return jnp.sum((gamma**t)[:, None] * batch.reward, axis=0)


@partial(jax.jit, static_argnames=("horizon",))
def finite_horizon_optimal_values(mdp: TabularMDP, horizon: int, gamma: float = 1.0) -> Array:
    """``[S]`` optimal expected return of the first ``horizon`` steps (value iteration from 0).

    V*_{h+1}(s) = max_a [r(s, a) + γ Σ_s' P_ep(s'|s,a) V*_h(s')]; with γ = 1 and ``horizon`` the
    time limit it is the best return achievable in a time-limited episode.
    """
    p_ep = episodic_transition(mdp)

    def backup(v, _):
        return jnp.max(mdp.reward + gamma * jnp.einsum("sat,t->sa", p_ep, v), axis=-1), None

    v, _ = jax.lax.scan(backup, jnp.zeros(mdp.num_states, mdp.reward.dtype), None, length=horizon)
    return v

"""Q-learning targets: one implementation of each, for the off-policy engine (DQN), PQN and the
rlax-named TD errors of :mod:`jaxcredit.estimators.value_learning` (time-major, episode-aware).

The bootstrap value of a transition is read at s'_{t+1}, the *final* observation when the episode
ended at t (docs/design.md, "Termination is not truncation"):

    Q-learning (Watkins 1989; DQN, Mnih et al. 2015):
        v'_t = max_a Q_target(s'_{t+1}, a)
    Double Q-learning (van Hasselt et al. 2016, "Deep RL with Double Q-learning"):
        v'_t = Q_target(s'_{t+1}, argmax_a Q_online(s'_{t+1}, a))

and the n-step target of step t is the episode-aware n-step return of the estimator core
(:func:`jaxcredit.estimators.returns.episode_aware_n_step_returns`) with these bootstrap values:

    y_t = r_t + γ r_{t+1} + ... + γ^{m-1} r_{t+m-1} + γ^m (1 − terminated_{t+m-1}) v'_{t+m-1},

m = min(n, steps to the end of the episode): a termination stops the sum without a bootstrap, a
time-out stops it and bootstraps from the final observation. n = 1 is the one-step target
``r_t + γ (1 − terminated_t) v'_t``. Peng's Q(λ) (:func:`peng_q_lambda_targets`) mixes every
n over a sequence instead (PQN's target; the DQN engine's ``--estimator q_lambda``).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from jaxcredit.estimators.returns import episode_aware_n_step_returns, lambda_returns

Array = jax.Array


def q_learning_bootstrap(q_target_next: Array) -> Array:
    """``max_a Q_target(s', a)``: ``[..., A] -> [...]``."""
    return jnp.max(q_target_next, axis=-1)


def double_q_learning_bootstrap(q_target_next: Array, q_online_next: Array) -> Array:
    """``Q_target(s', argmax_a Q_online(s', a))``: ``[..., A], [..., A] -> [...]``."""
    chex.assert_equal_shape([q_target_next, q_online_next])
    best = jnp.argmax(q_online_next, axis=-1)
    return jnp.take_along_axis(q_target_next, best[..., None], axis=-1)[..., 0]


def one_step_q_targets(reward: Array, discount: Array, bootstrap: Array) -> Array:
    """``y = r + γ_t v'``, the one-step target with ``discount`` γ_t = γ (1 − terminated) and a
    bootstrap value v' from :func:`q_learning_bootstrap` or :func:`double_q_learning_bootstrap`."""
    return reward + discount * bootstrap


def q_lambda_targets(reward: Array, discount: Array, q_next: Array, lambda_,
                     stop_target_gradients: bool = True) -> Array:
    """Peng's Q(λ) returns ``G_t = r_t + γ_t [(1 − λ_t) max_a Q(s_{t+1}, a) + λ_t G_{t+1}]``
    (``G_{T−1}`` bootstraps fully) from per-step discounts γ_t and λ_t (scalar or ``[T, ...]``);
    Watkins's with λ_t cut at non-greedy actions (``value_learning.watkins_lambda``)."""
    return lambda_returns(reward, discount, q_learning_bootstrap(q_next), lambda_,
                          stop_target_gradients=stop_target_gradients)


def n_step_q_targets(reward: Array, terminated: Array, truncated: Array, bootstrap: Array,
                     gamma, n: int) -> Array:
    """Episode-aware n-step Q targets ``y_t`` for every step of a ``[T, *batch]`` window.

    Args:
      reward, terminated, truncated: ``[T, *batch]`` (bools for the episode ends).
      bootstrap: ``[T, *batch]`` v'_t, the bootstrap value at s'_{t+1} (see module docstring).
      gamma: discount (scalar).
      n: static horizon ≥ 1. Steps whose n-step horizon passes the window's end bootstrap from
        the window's last step; the off-policy engine samples windows long enough that the steps
        it trains on never do.

    Returns:
      ``[T, *batch]`` targets (no gradient flows into them).
    """
    chex.assert_equal_shape([reward, terminated, truncated, bootstrap])
    if n == 1:  # the same numbers without the n-step machinery
        discount = gamma * (1.0 - jnp.asarray(terminated, reward.dtype))
        return jax.lax.stop_gradient(one_step_q_targets(reward, discount, bootstrap))
    targets = episode_aware_n_step_returns(reward, bootstrap, terminated, truncated, gamma, n)
    return jax.lax.stop_gradient(targets)


def peng_q_lambda_targets(reward: Array, terminated: Array, truncated: Array,
                          q_next: Array, gamma, lambda_) -> Array:
    """Peng's Q(λ) returns over a window (Peng & Williams 1996; rlax's ``q_lambda`` with a
    scalar λ; PQN's ``_get_target``), ``[T, *batch]``::

        G_t = r_t + γ (1 − terminated_t) [(1 − λ_t) max_a Q(s'_{t+1}, a) + λ_t G_{t+1}],
        λ_t = λ (1 − done_t),   G_{T−1} = r_{T−1} + γ (1 − terminated_{T−1}) max_a Q(s'_T, a)

    ``q_next [T, *batch, A]`` is Q at s'_{t+1}, the final observation where the episode ended
    at t: a time-out bootstraps from it, a termination does not, and neither continues the
    λ-chain into the next episode.
    """
    done = jnp.logical_or(terminated, truncated)
    discount = gamma * (1.0 - terminated.astype(reward.dtype))
    lam = lambda_ * (1.0 - done.astype(reward.dtype))
    return q_lambda_targets(reward, discount, q_next, lam)

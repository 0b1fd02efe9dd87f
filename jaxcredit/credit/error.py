"""How far a fitted credit model's credit is from the exact model's: the metrics of the oracle
ablation, measured inside a run.

The KL between a fitted hindsight model and the exact one is not the error that matters: on
KeyToDoor a KL of 0.003 nats at s₀ gives a coefficient h/π 10 % low, and that error multiplies the
apples' return (about 8) in the credit (experiments/key_to_door). So at each evaluation point the
engine assigns the credit of one held-out window twice, with the fitted model and with the same
estimator's exact model (the oracle twin), on the same window and key, and compares

* the credit itself: ``rmse_to_exact`` = √mean (A_fit − A_exact)², ``corr_to_exact`` (Pearson, over
  every entry: every action's credit for all-action estimators);
* the credit of the action taken at the *decisive* steps, those whose state's exact delayed
  advantage spread (:func:`decisive_states`: the spread over actions of A^π(s, a) − r(s, a)) is
  at least :data:`DECISIVE_SHARE` of the largest over the MDP's states (KeyToDoor: the key and
  the door; DelayedEffect: the first action): its error (``rmse_decisive``) and its sign
  (``sign_agreement``, over the ``signed_steps`` whose exact credit is not 0 up to rounding;
  ``sign_zero``, the share of them where the fitted credit is 0 up to the same floor: the rest,
  1 − agreement − zero, is of the wrong sign);
* the policy gradient each credit gives against the exact gradient ∇_θ J(π_θ) of the
  undiscounted return by dynamic programming: ``grad_cos_fitted``, ``grad_cos_oracle`` (the
  oracle's own noise floor on the same window) and ``grad_cos_to_oracle``; and their sizes, which
  a cosine cannot see: ``grad_norm_ratio`` = ‖g_fit‖ / ‖g_oracle‖ (the exact model's credit's
  gradient on the same window), and ``grad_ascent_fitted`` and
  ``grad_ascent_oracle``, each gradient's component ⟨g, ∇J⟩ / ‖∇J‖ along the exact one: the ratio
  of their means is, to first order, how fast a learner on the fitted credit climbs J relative to
  one on the exact model's from the same policy.

The oracle's own error is 0 by construction; the gradient cosines are the only numbers that
compare both with the truth.

For the contribution estimators (``hca_state``, ``cocoa_reward``, ``cocoa_feature``, whose twin is
``cocoa_reward``'s oracle: learned features have no exact model of their own; their exact
models are ``linear_in_reward`` in ``exact.models``) the credit is linear in the later rewards,
A[t, a] = immediate + Σ_{k>t} γ^{k−t} (w(s_t, a, u_k) − 1) r̃_k, and the immediate term is the
same for both models, so the error splits exactly by the value of the reward it comes from:
``rmse_decisive_reward{i}`` is the error at the decisive steps of the credit that the rewards of
value ``values[i]`` carry (:func:`reward_value_windows`; the values in the order of
``exact.models.reward_value_law``, KeyToDoor's: 0, the low apple, the high apple, the treasure). On
KeyToDoor it separates the treasure's coefficient (the task) from the apples' (the distractor).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxcredit.types import Trajectory

Array = jax.Array

# A step is decisive when its state's exact (delayed) advantage spread is at least this share
# of the largest spread over the MDP.
DECISIVE_SHARE = 0.1
# Sign agreement counts the decisive steps whose exact credit exceeds this share of the window's
# largest |exact credit|.
SIGN_FLOOR = 1e-4


def taken_credit(advantage: Array, action: Array) -> Array:
    """The credit of the action taken, ``[T, *batch]``, from per-step or all-action credit."""
    if advantage.ndim == action.ndim:
        return advantage
    return jnp.take_along_axis(advantage, action[..., None], axis=-1)[..., 0]


def policy_surrogate(logits: Array, action: Array, advantage: Array) -> Array:
    """The policy-gradient surrogate of a credit, its gradient the estimated ∇J:
    mean_t log π(a_t|s_t) Â_t (per-step credit) or mean_t Σ_a π(a|s_t) A[t, a] (all-action)."""
    advantage = jax.lax.stop_gradient(advantage)
    log_pi = jax.nn.log_softmax(logits, axis=-1)
    if advantage.ndim == action.ndim:
        return jnp.mean(taken_credit(log_pi, action) * advantage)
    return jnp.mean(jnp.sum(jnp.exp(log_pi) * advantage, axis=-1))


def tree_cosine(a, b) -> Array:
    """The cosine between two pytrees of the same structure, as flat vectors."""
    return tree_dot(a, b) / jnp.maximum(optax.global_norm(a) * optax.global_norm(b), 1e-30)


def tree_dot(a, b) -> Array:
    """The inner product of two pytrees of the same structure, as flat vectors."""
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def decisive_states(exact_advantage: Array, reward: Array) -> Array:
    """``[S]`` bool: the states where the action changes what comes *later*: the spread over
    actions of the delayed part of the advantage, A^π(s, a) − r(s, a) (= γ E[V(s')] − V(s)), is
    at least :data:`DECISIVE_SHARE` of the largest such spread. The immediate reward is left
    out: on KeyToDoor every apple cell's action changes its own reward, and with it counted the
    decisive steps were almost all apple steps (at L = 103 and a uniform policy 154 apple cells
    and the door, the key left out). Where no action changes anything later (a one-step
    bandit) the spread of the whole advantage is used; none where every spread is 0.

    ``exact_advantage``, ``reward``: ``[S, A]``, A^π and the expected reward r(s, a)."""
    def width(x):
        return x.max(-1) - x.min(-1)

    delayed = width(exact_advantage - reward)
    spread = jnp.where(delayed.max() > 0, delayed, width(exact_advantage))
    return (spread >= DECISIVE_SHARE * spread.max()) & (spread > 0)


def credit_error(fitted: Array, exact: Array, action: Array, decisive: Array) -> dict:
    """rmse, correlation, and the decisive steps' sign agreement and rmse (of the taken
    action's credit) of ``fitted`` against ``exact`` credit (same shape: ``[T, *batch]`` or
    ``[T, *batch, A]``); ``decisive`` ``[T, *batch]`` bool. The decisive-step metrics are NaN
    where no step is decisive."""
    diff = fitted - exact
    f, e = fitted - fitted.mean(), exact - exact.mean()
    norms = jnp.sqrt(jnp.sum(f * f) * jnp.sum(e * e))
    # Undefined (NaN) where either credit is constant over the window.
    corr = jnp.where(norms > 0, jnp.sum(f * e) / jnp.maximum(norms, 1e-30), jnp.nan)
    fitted_taken, exact_taken = taken_credit(fitted, action), taken_credit(exact, action)
    # A sign is read only where the exact credit is not 0 up to float rounding: an exact 0
    # comes out as ±1e-7, whose sign is a coin flip. The fitted credit is read with the same
    # floor: a model that gives 0 there (COCOA's dead gates: w = 1) pushes neither way, which
    # is neither agreement nor a wrong sign.
    floor = SIGN_FLOOR * jnp.max(jnp.abs(exact))
    signed = decisive & (jnp.abs(exact_taken) > floor)
    # A NaN fitted credit (a diverged model) counts as a wrong sign, not as 0.
    fitted_sign = jnp.where(jnp.abs(fitted_taken) > floor, jnp.sign(fitted_taken),
                            jnp.where(jnp.isnan(fitted_taken), jnp.nan, 0.0))
    agree, zero = fitted_sign == jnp.sign(exact_taken), fitted_sign == 0
    count, signed_count = decisive.sum(), signed.sum()
    taken_diff = fitted_taken - exact_taken
    return {
        "rmse_to_exact": jnp.sqrt(jnp.mean(diff ** 2)),
        "rmse_decisive": jnp.where(count > 0, jnp.sqrt(jnp.sum(jnp.where(
            decisive, taken_diff ** 2, 0.0)) / jnp.maximum(count, 1)), jnp.nan),
        "corr_to_exact": corr,
        "sign_agreement": jnp.where(signed_count > 0, jnp.sum(agree & signed)
                                    / jnp.maximum(signed_count, 1), jnp.nan),
        "sign_zero": jnp.where(signed_count > 0, jnp.sum(zero & signed)
                               / jnp.maximum(signed_count, 1), jnp.nan),
        "decisive_steps": count.astype(jnp.float32),
        "signed_steps": signed_count.astype(jnp.float32),
    }


def reward_value_windows(traj: Trajectory, values: Array) -> list[Trajectory]:
    """One copy of ``traj`` per reward value, each keeping only the rewards nearest that value
    (and the bootstrap value of those steps, which a contribution estimator credits with its
    step's reward): the copies' rewards and bootstrap values sum to the original's."""
    index = jnp.argmin(jnp.abs(traj.reward[..., None] - values), axis=-1)
    return [traj.replace(reward=jnp.where(index == i, traj.reward, 0.0),
                         next_value=jnp.where(index == i, traj.next_value, 0.0))
            for i in range(values.shape[0])]


def reward_value_errors(assign_fitted, assign_exact, traj: Trajectory, values: Array,
                        decisive: Array) -> dict:
    """``rmse_decisive_reward{i}``: the decisive steps' error of the taken action's credit
    carried by the rewards of value ``values[i]``; ``assign_*`` map a window to its credit."""
    metrics = {}
    for i, window in enumerate(reward_value_windows(traj, values)):
        error = credit_error(assign_fitted(window), assign_exact(window), traj.action, decisive)
        metrics[f"rmse_decisive_reward{i}"] = error["rmse_decisive"]
    return metrics

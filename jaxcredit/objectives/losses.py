"""Policy, value and entropy losses shared by PPO, A2C and REINFORCE.

All functions take flat batches (leading axis B) and return ``(scalar loss, metrics)``. The policy
loss accepts per-step advantages ``[B]`` (credit of the action taken) and all-action advantages
``[B, A]`` (credit of every action, as HCA or COCOA assign).

Per-step, unclipped (A2C, REINFORCE; Williams 1992, Mnih et al. 2016)::

    L = − mean_b  log π_θ(a_b | s_b) · Â_b

Per-step, clipped (PPO; Schulman et al. 2017), with r = π_θ(a | s) / μ(a | s)::

    L = − mean_b  min(r_b Â_b, clip(r_b, 1 − ε, 1 + ε) Â_b)

For continuous actions log π_θ(a | s) is the Gaussian's log-density of the stored action
(``jaxcredit.policies``); the all-action forms need a categorical policy.

All-action, unclipped (the "all-action" / mean-actor-critic gradient, Sutton et al. 2000; Asadi
et al. 2017; HCA, Harutyunyan et al. 2019)::

    L = − mean_b  Σ_a π_θ(a | s_b) · Â_b(a)

All-action, clipped. Σ_a π_θ(a|s) Â(a) = Σ_a μ(a|s) r(a) Â(a) is the expectation, under the
behaviour policy μ, of the per-action surrogate r(a) Â(a). The clipped form applies PPO's
pessimistic clip to every action inside that expectation::

    L = − mean_b  Σ_a μ(a | s_b) · min(r_b(a) Â_b(a), clip(r_b(a), 1 − ε, 1 + ε) Â_b(a))

At θ = θ_old (r ≡ 1) its gradient equals the unclipped all-action gradient, and, exactly as in PPO,
the clip removes the incentive to move π(a|s) further than a factor 1 ± ε from μ(a|s) in the
direction Â(a) favours, for every action rather than only the sampled one. It reduces to the PPO
surrogate's expectation over a ~ μ, so per-step PPO is its single-sample Monte-Carlo estimate.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from jaxcredit.policies import ActionDistribution

Array = jax.Array


def normalize_advantage(advantage: Array, eps: float = 1e-8) -> Array:
    """Standardises advantages over the batch.

    Per-step ``[B]``: (Â − mean) / (std + eps), PPO's usual per-minibatch normalisation.
    All-action ``[B, A]``: Â / (std + eps) only. A state-only baseline never changes the all-action
    gradient (Σ_a ∇π(a|s) b(s) = 0), so subtracting a mean buys nothing there, and subtracting a
    global mean would shift the clipped surrogate's trust region asymmetrically per action.
    """
    if advantage.ndim == 1:
        return (advantage - advantage.mean()) / (advantage.std() + eps)
    return advantage / (advantage.std() + eps)


def policy_loss(
    logits: Array,
    action: Array,
    advantage: Array,
    behaviour_log_prob: Array,
    behaviour_logits: Array,
    clip_eps: Array,
    clip: bool,
    distribution: Optional[ActionDistribution] = None,
) -> tuple[Array, dict]:
    """Policy-gradient surrogate (module docstring) for per-step or all-action credit.

    Args:
      logits: ``[B, A]`` logits of π_θ.
      action: ``[B]`` actions taken.
      advantage: ``[B]`` or ``[B, A]``, a coefficient of the score function. The engine passes
        it under ``stop_gradient`` (``Engine.assign_credit``); it is not stopped here, so that
        the meta-gradient can differentiate the agent's update through the credit's γ and λ
        (``jaxcredit.agents.meta_gradient``). Pass a constant when calling this directly.
      behaviour_log_prob: ``[B]`` log μ(a_b | s_b) of the behaviour policy.
      behaviour_logits: ``[B, A]`` logits of μ (used by the all-action clipped form).
      clip_eps: ε of the ratio clip.
      clip: use the PPO clipped surrogate.
      distribution: the law of actions given ``logits`` (``jaxcredit.policies``); None:
        categorical. A continuous one takes per-step credit only.

    Returns:
      ``(loss, {"approx_kl", "clip_frac"})``, metrics measured on the action taken.
    """
    law = distribution or ActionDistribution("categorical", logits.shape[-1])
    if law.continuous and advantage.ndim != 1:
        raise ValueError(f"continuous actions take per-step credit [B]; got {advantage.shape}")
    log_pi_a = law.log_prob(logits, action)
    log_ratio_a = log_pi_a - behaviour_log_prob
    ratio_a = jnp.exp(log_ratio_a)
    if advantage.ndim == 1:
        if clip:
            clipped = jnp.clip(ratio_a, 1.0 - clip_eps, 1.0 + clip_eps)
            loss = -jnp.minimum(ratio_a * advantage, clipped * advantage).mean()
        else:
            loss = -(log_pi_a * advantage).mean()
    elif advantage.ndim == 2:
        log_pi = jax.nn.log_softmax(logits)
        if clip:
            log_mu = jax.nn.log_softmax(behaviour_logits)
            ratio = jnp.exp(log_pi - log_mu)
            clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
            surrogate = jnp.minimum(ratio * advantage, clipped * advantage)
            loss = -(jnp.exp(log_mu) * surrogate).sum(-1).mean()
        else:
            loss = -(jnp.exp(log_pi) * advantage).sum(-1).mean()
    else:
        raise ValueError(f"advantage must be [B] or [B, A], got shape {advantage.shape}")
    metrics = {
        # k3 estimator of KL(μ || π) (Schulman, "Approximating KL divergence", 2020).
        "approx_kl": ((ratio_a - 1.0) - log_ratio_a).mean(),
        "clip_frac": (jnp.abs(ratio_a - 1.0) > clip_eps).mean(),
    }
    return loss, metrics


def value_loss(
    value: Array, behaviour_value: Array, target: Array, clip_eps: Array, clip: bool
) -> Array:
    """½ (V_θ(s) − target)², or PPO's pessimistic clipped form.

    Clipped: ½ max((V_θ − G)², (V_old + clip(V_θ − V_old, −ε, ε) − G)²), as in OpenAI baselines
    and PureJaxRL; it keeps the critic within ε of its behaviour-time value per update. The
    target is not stopped here, for the same reason as the advantage in :func:`policy_loss`.
    """
    unclipped = jnp.square(value - target)
    if not clip:
        return 0.5 * unclipped.mean()
    moved = behaviour_value + jnp.clip(value - behaviour_value, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(unclipped, jnp.square(moved - target)).mean()


def entropy(logits: Array, distribution: Optional[ActionDistribution] = None) -> Array:
    """Mean entropy H(π(· | s)) over the batch: − Σ_a π(a|s) log π(a|s) for the categorical
    policy (``distribution`` None), the Gaussian's for a continuous one."""
    if distribution is None:
        log_pi = jax.nn.log_softmax(logits)
        return -(jnp.exp(log_pi) * log_pi).sum(-1).mean()
    return distribution.entropy(logits).mean()


def explained_variance(prediction: Array, target: Array) -> Array:
    """1 − Var[target − prediction] / Var[target]: 1 is perfect, ≤ 0 no better than a constant."""
    var = target.var()
    return jnp.where(var > 0, 1.0 - (target - prediction).var() / jnp.maximum(var, 1e-12), 0.0)

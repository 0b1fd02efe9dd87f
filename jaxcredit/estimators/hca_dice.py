"""Hindsight-DICE: return-conditioned hindsight credit with the ratio π/h learned directly.

Return-conditioned HCA (``hca_return``) credits the action taken with

    Â_t = (1 − ρ(s_t, a_t, Z_t)) Z_t,      ρ(s, a, z) = π(a | s) / h(a | s, z),

and obtains ρ by dividing the policy by a fitted classifier h_φ. A small error in h where h is
small is a large error in ρ. Velu, Vaidyanath and Arumugam ("Hindsight-DICE: Stable Credit
Assignment for Deep Reinforcement Learning", 2023, arXiv 2307.11897) learn ρ itself, as a
density ratio, with the DualDICE objective (Nachum et al. 2019):

    min_ν  E_{(s, a, z) ~ data}[½ ν(s, a, z)²] − E_{(s, z) ~ data, a ~ π(·|s)}[ν(s, a, z)].

The data's (s_t, a_t, Z_t) follow p(s) p(z | s) h(a | s, z) (Bayes' rule on p(s) π(a|s)
p(z | s, a)), the second expectation pairs the same (s_t, Z_t) with every action weighted by
π(a | s_t), so pointwise h ν − π = 0: the minimiser is ν* = π / h, with no division and no
classifier. Pairing each sampled return with its own state is the choice ψ(z | s) = p(z | s) of
the paper's proposal distribution; its public code (``skandavaidyanath/credit-assignment``,
``src/dualdice/``) instead draws z from a fitted return model or from a uniform ψ, which leaves
a constant factor (the uniform density) in ν that it does not divide out. The empirical pairing
needs no return model and has no such factor.

The model is ν_φ(s, ·, z) = 1 + f_φ(s, z) for every action (an MLP on the observation and the
return, the same input choices as ``hca_return``; its last layer starts at zero, so ν = 1 and the
credit is 0 at the start, as h = π for ``hca_return``). Its exact counterpart is the exact return
hindsight (``exact_model = "return_hindsight"``; the oracle twin is ``hca_return``'s), against
which the engine reports the credit error and ``credit/ratio_rmse_to_exact``, the error of ρ
itself at the steps taken, beside the same metric for ``hca_return``'s divided ratio.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.hca_return import (
    RETURN_KINDS, behaviour_policy, check_choice, conditioning_return, hca_return, input_grid,
    model_feature, obs_ndim, value_target)
from jaxcredit.types import Credit, Trajectory

Array = jax.Array


def dualdice_ratio_loss(nu: Array, nu_taken: Array, pi: Array) -> Array:
    """The DualDICE objective per step: ½ ν(s, a_t, z)² − Σ_a π(a|s) ν(s, a, z).

    Args:
      nu: ``[*b, A]`` ν(s_t, ·, Z_t).
      nu_taken: ``[*b]`` ν(s_t, a_t, Z_t).
      pi: ``[*b, A]`` π(·|s_t).

    Its expectation over the data is minimised by ν = π / h (module docstring).
    """
    return 0.5 * nu_taken ** 2 - jnp.sum(pi * nu, axis=-1)


def hca_dice(
    clip: Optional[float] = None,
    return_kind: str = "mc",
    model_input: str = "standardised",
    hidden: tuple = (64,),
    z_grid: Optional[Any] = None,
    z_range: Optional[Any] = None,
    z_bins: Optional[int] = None,
    env: Any = None,
    env_params: Any = None,
) -> Estimator:
    """Hindsight-DICE (Velu et al. 2023) — per-step credit with a learned ratio ρ = π/h.

        Â_t = (1 − ν_φ(s_t, a_t, Z_t)) Z_t,
        loss = mean_t [½ ν_φ(s_t, a_t, Z_t)² − Σ_a π(a|s_t) ν_φ(s_t, a, Z_t)]

    Args:
      clip: clip (1 − ν) to [−clip, clip] (None: off).
      return_kind: Z is the Monte-Carlo return ("mc") or the λ-return.
      model_input, z_grid, z_range, z_bins: how the MLP reads Z (as ``hca_return``).
      hidden: MLP widths.
      env, env_params: supplied by the engine (the return range of ``model_input="grid"``).
    """
    check_choice("return_kind", return_kind, RETURN_KINDS)
    if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip must be a positive number or None, got {clip!r}")
    grid = input_grid(model_input, False, z_grid, z_range, z_bins, env, env_params)
    hidden = tuple(int(w) for w in hidden)

    def build(trajectory: Trajectory) -> hm.ReturnHindsightModel:
        width = len(grid) if model_input == "grid" else 1
        return hm.return_mlp(obs_ndim(trajectory), hidden, policy_modulated=False,
                             feature_dim=width)

    def init(key, example: Trajectory):
        return build(example).init(key, example.obs, example.logits.shape[-1])

    def ratios(params, trajectory: Trajectory, hparams):
        """(Z, ν(s_t, ·, Z_t) [T, *b, A], ν at the action taken [T, *b])."""
        z = conditioning_return(trajectory, hparams, return_kind)
        feature = model_feature(z, trajectory, model_input, grid)
        nu = 1.0 + build(trajectory).logits(params, trajectory.obs, z, feature,
                                            trajectory.logits)
        return z, nu, jnp.take_along_axis(nu, trajectory.action[..., None], axis=-1)[..., 0]

    def assign(params, trajectory: Trajectory, hparams, key=None) -> Credit:
        del key
        z, _, rho = ratios(params, trajectory, hparams)
        weight = 1.0 - rho
        if clip is not None:
            weight = jnp.clip(weight, -clip, clip)
        advantage = weight * z
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=value_target(trajectory, hparams),
            diagnostics={"credit_ratio_mean": rho.mean(), "credit_ratio_max": rho.max(),
                         "advantage_std": advantage.std()},
        )

    def loss(params, trajectory: Trajectory, hparams, key=None):
        del key
        _, nu, nu_taken = ratios(params, trajectory, hparams)
        pi, _ = behaviour_policy(trajectory)
        value = dualdice_ratio_loss(nu, nu_taken, jax.lax.stop_gradient(pi)).mean()
        return value, {"dice_loss": value, "ratio_mean": jax.lax.stop_gradient(nu_taken).mean()}

    def hindsight(params, trajectory: Trajectory, hparams, key=None):
        """The hindsight the ratio implies, h ∝ π / max(ν, 10⁻³), normalised over actions (for
        ``estimator/kl_to_exact``; ν itself is not a distribution)."""
        del key
        _, nu, _ = ratios(params, trajectory, hparams)
        log_pi = jax.nn.log_softmax(trajectory.logits)
        log_h = jax.nn.log_softmax(log_pi - jnp.log(jnp.maximum(nu, 1e-3)))
        return log_h, jnp.ones(log_h.shape[:-1], jnp.float32)

    def credit_ratio(params, trajectory: Trajectory, hparams) -> Array:
        return ratios(params, trajectory, hparams)[2]

    twin_options = dict(return_kind=return_kind, clip=clip)
    return Estimator(
        name="hca_dice", init=init, assign=assign, loss=loss, learned=True,
        exact_model="return_hindsight" if return_kind == "mc" else None,
        oracle=(lambda: hca_return(**twin_options, model="oracle")) if return_kind == "mc"
        else None,
        hindsight=hindsight, credit_ratio=credit_ratio)

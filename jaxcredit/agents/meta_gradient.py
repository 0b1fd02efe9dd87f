"""Meta-gradient γ and λ: the discount and the trace adapted online, inside the compiled update.

Xu, van Hasselt & Silver, "Meta-Gradient Reinforcement Learning", NeurIPS 2018 (arXiv
1805.09801). The return the agent learns from depends on meta-parameters η = (γ, λ). One update
of the agent is a differentiable function of η,

    θ'(η) = θ + f(τ, θ, η)          (here: one Adam step on the actor-critic loss of window τ,
                                     its advantages and value targets computed with γ(η), λ(η)),

and η follows the gradient of the same loss J' on a *different* window τ' at θ', with the return
computed at fixed reference values η̄ (γ̄, λ̄):

    ∂J'(τ', θ', η̄)/∂η = ∂J'/∂θ' · dθ'/dη.

Choices made here (the paper has no public code): η = sigmoid(logit(h) + δ), with h the run's
``Hparams`` value and δ the learned offset (0 at the start, so a run starts at its γ and λ);
the one-step meta-gradient (the paper's μ = 0 of its Atari runs); the window's environments split
in two halves, τ for the inner step and τ' for the meta-objective (both collected by θ; the agent's
actual update then uses the whole window with the adapted η); Adam on δ at ``hparams.meta_lr``;
the gradient flows through the estimator's own use of γ and λ (GAE, λ-returns, Chunked-TD's γ),
not through the fitting of a learned credit model or an exact model. The paper also conditions
the policy and value on η (an embedding of η as an input); that is not done here.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

# The flag's names -> the Hparams fields they adapt.
META_PARAMETERS = {"gamma": "gamma", "lambda": "lambda_"}
# Inside the square root of the differentiated Adam step (optax's eps_root): d√v/dv is infinite
# at a zero gradient entry. The agent's own step keeps 0; the two differ by at most ~1e-4·lr.
EPS_ROOT = 1e-8
# The reference values η̄ of the meta-objective, by Hparams field.
REFERENCES = {"gamma": "meta_gamma_reference", "lambda_": "meta_lambda_reference"}

Array = jax.Array


@struct.dataclass
class MetaState:
    """The learned offsets δ of the adapted hyper-parameters and their Adam state."""

    offsets: dict
    opt_state: Any


def init_meta_state(names: tuple[str, ...]) -> MetaState:
    """Offsets 0 (the run's own values) for the adapted fields ``names`` (flag names)."""
    offsets = {META_PARAMETERS[name]: jnp.zeros((), jnp.float32) for name in names}
    return MetaState(offsets=offsets, opt_state=optax.scale_by_adam().init(offsets))


def _logit(p: Array) -> Array:
    p = jnp.clip(p, 1e-4, 1.0 - 1e-4)
    return jnp.log(p) - jnp.log1p(-p)


def adapted(hparams: Any, offsets: dict) -> Any:
    """``hparams`` with each adapted field at sigmoid(logit(value) + δ)."""
    return hparams.replace(**{field: jax.nn.sigmoid(_logit(getattr(hparams, field)) + delta)
                              for field, delta in offsets.items()})


def reference(hparams: Any, offsets: dict) -> Any:
    """``hparams`` with each adapted field at its reference value η̄."""
    return hparams.replace(**{field: getattr(hparams, REFERENCES[field]) for field in offsets})


def meta_gradient(offsets: dict, inner_loss: Callable[[Any, dict], Array],
                  inner_step: Callable[[Any, Any], Any], outer_loss: Callable[[Any], Array],
                  params: Any) -> tuple[Array, dict]:
    """``(J', ∂J'/∂δ)`` of the one-step meta-gradient.

    Args:
      offsets: δ, the pytree differentiated.
      inner_loss: ``(params, offsets) -> scalar`` the agent's loss on τ with η(δ).
      inner_step: ``(params, grads) -> params'``, the agent's optimiser step (differentiable).
      outer_loss: ``params' -> scalar`` the loss on τ' at the reference η̄.
      params: θ.
    """
    def objective(offsets):
        grads = jax.grad(inner_loss)(params, offsets)
        return outer_loss(inner_step(params, grads))

    return jax.value_and_grad(objective)(offsets)


def one_step(meta: MetaState, params: Any, inner: Any, outer: Any, hparams: Any,
             assign: Callable, loss: Callable, step: Callable) -> tuple[MetaState, Array]:
    """One meta-gradient step: ``(new meta state, J')``.

    Args:
      meta: δ and its Adam state. params: θ, the agent before its update.
      inner, outer: the windows τ (the inner step's data) and τ' (the meta-objective's).
      hparams: the run's hyper-parameters (the adapted fields at their base values).
      assign: ``(window, hparams) -> Credit``, the estimator with the current model.
      loss: ``(params, window, credit, hparams) -> scalar``, the agent's loss.
      step: ``(params, grads) -> params'``, the agent's optimiser step.
    """
    ref = reference(hparams, meta.offsets)
    outer_credit = jax.lax.stop_gradient(assign(outer, ref))

    def inner_loss(params, offsets):
        hp = adapted(hparams, offsets)
        return loss(params, inner, assign(inner, hp), hp)

    value, grads = meta_gradient(meta.offsets, inner_loss, step,
                                 lambda p: loss(p, outer, outer_credit, ref), params)
    return meta_update(meta, grads, hparams.meta_lr), value


def meta_update(meta: MetaState, grads: dict, lr: Array) -> MetaState:
    """One Adam step on δ."""
    direction, opt_state = optax.scale_by_adam().update(grads, meta.opt_state)
    offsets = jax.tree.map(lambda d, u: d - lr * u, meta.offsets, direction)
    return MetaState(offsets=offsets, opt_state=opt_state)


def split_columns(tree: Any, num_envs: int) -> tuple[Any, Any]:
    """The ``[T, N, ...]`` leaves of a window split into its first and second N/2 columns."""
    half = num_envs // 2
    return (jax.tree.map(lambda x: x[:, :half], tree),
            jax.tree.map(lambda x: x[:, half:2 * half], tree))

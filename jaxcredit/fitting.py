"""Fitting a learned credit model inside the compiled update: its own optimiser and schedule.

A learned stage of the credit pipeline (a hindsight classifier, a return decomposer, a reward
model) is a model with a loss. The engine fits it *before* it assigns credit to the fresh window,
in the same compiled update step, with

* its own Adam optimiser state and its own learning rate and global grad-norm clip, taken from
  the sweepable ``Hparams`` (``estimator_lr``, ``estimator_max_grad_norm``, ...), so a sweep can
  tune the model and the agent separately;
* a schedule from the frozen config (:class:`FitSchedule`): ``steps`` optimiser steps per update,
  each on a random minibatch of ``1/minibatches`` of the window's environments (whole
  trajectories: hindsight and return models need the sequence), drawn from the fresh window and,
  with ``windows > 1``, the ``windows − 1`` most recent earlier windows kept in the train state.

Why not one shared optimiser step: with A2C's single step per update and the agent's learning
rate and grad-norm clip, a hindsight model barely moved from h = π in a KeyToDoor probe, so the
credit it assigned was mostly model error (docs/design.md, "Fitted credit models").

Earlier windows were collected by earlier policies. Models whose target depends on the policy
(hindsight h depends on π) see a mixture of recent policies; ``windows = 1`` (the default) fits on
on-policy data only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxcredit.types import Trajectory

Array = jax.Array
LossFn = Callable[[Any, Trajectory, Any, Array], tuple[Array, dict]]

# Adam's ε for credit models (optax's default); the agent uses PPO's 1e-5.
MODEL_ADAM_EPS = 1e-8


@dataclasses.dataclass(frozen=True)
class FitSchedule:
    """How a learned stage is fitted each update (``TrainConfig.estimator.fit``, whose record
    validates the fields).

    Attributes:
      steps: optimiser steps per update (0: the model is never fitted); with ``until_loss``,
        the most steps per update.
      minibatches: each step uses ``num_envs // minibatches`` environments' whole windows.
      windows: the fresh window plus ``windows − 1`` earlier ones are the data (1: fresh only).
      anneal_lr: decay the stage's learning rate linearly to 0 over the run, like the agent's.
      until_loss: 0, or fit each update until a running average of the loss falls to this
        value (RUDDER's schedule, :func:`fit`), at most ``steps`` steps.
    """

    steps: int = 4
    minibatches: int = 1
    windows: int = 1
    anneal_lr: bool = False
    until_loss: float = 0.0


@struct.dataclass
class FitState:
    """A fitted stage's part of the train state.

    Attributes:
      params: the model's parameters.
      opt_state: its Adam state.
      buffer: a ring of the ``windows`` most recent windows, environment-major ``[W·N, T, ...]``
        (slot w is rows w·N .. w·N + N − 1, each one environment's whole window, so a draw
        copies contiguous rows; slot order is not age order); ``fit`` writes the fresh window
        into it before it draws. None with ``windows = 1``.
      filled: int32, how many ring slots hold data yet (slots ``0 .. filled − 1``).
      cursor: int32, the slot the next window overwrites (the oldest once the ring is full), or
        None without a buffer.
      memory: what the stage itself keeps between updates (a redistributor's episode memory,
        ``jaxcredit.redistribute``), or None.
      pretrain_buffer: the burn-in windows ``[B, T, N, ...]`` a pretraining loss is fitted on,
        or None.
    """

    params: Any
    opt_state: Any
    buffer: Optional[Trajectory] = None
    filled: Any = None
    memory: Any = None
    pretrain_buffer: Optional[Trajectory] = None
    cursor: Any = None


def init_fit_state(params: Any, example: Trajectory, schedule: FitSchedule) -> FitState:
    """The initial :class:`FitState` for ``params`` (an empty buffer shaped like ``example``)."""
    buffer = None
    if schedule.windows > 1:
        buffer = jax.tree.map(lambda x: jnp.zeros(
            (schedule.windows * x.shape[1], x.shape[0]) + x.shape[2:], x.dtype), example)
    return FitState(params=params, opt_state=optax.scale_by_adam(eps=MODEL_ADAM_EPS).init(params),
                     buffer=buffer, filled=jnp.zeros((), jnp.int32),
                     cursor=None if buffer is None else jnp.zeros((), jnp.int32))


def adam_step(params, opt_state, grads, lr, max_grad_norm, eps: float, weight_decay=0.0,
              eps_root: float = 0.0):
    """One Adam step after global grad-norm clipping: ``(params, opt_state, grad_norm)``.

        θ ← θ − lr · (adam(clip(g)) + weight_decay · θ)

    With ``weight_decay > 0`` this is AdamW (Loshchilov & Hutter 2019: the decay is decoupled
    from the gradient's moments, as ``optax.adamw``); ``max_grad_norm = inf`` is no clipping.
    Written out rather than as an optax chain because ``lr``, ``max_grad_norm`` and
    ``weight_decay`` are traced hyper-parameters (a vmapped sweep gives every member its own).
    ``eps_root`` > 0 (optax's) keeps the step differentiable where a gradient entry is 0 (the
    meta-gradient differentiates through it).
    """
    grad_norm = optax.global_norm(grads)
    # No clipping at max_grad_norm = inf, written so that the step stays differentiable there
    # (inf / norm would give 0 · inf = NaN in the derivative of the branch not taken).
    unclipped = jnp.isinf(max_grad_norm)
    bound = jnp.where(unclipped, 1.0, max_grad_norm)
    scale = jnp.where(unclipped, 1.0, jnp.minimum(1.0, bound / jnp.maximum(grad_norm, 1e-12)))
    grads = jax.tree.map(lambda g: g * scale, grads)
    direction, opt_state = optax.scale_by_adam(eps=eps, eps_root=eps_root).update(grads,
                                                                                  opt_state)
    params = jax.tree.map(lambda p, d: p - lr * (d + weight_decay * p), params, direction)
    return params, opt_state, grad_norm


def _push(fit: FitState, fresh: Trajectory) -> FitState:
    """The fresh window written over the ring's oldest slot, in place (no shift, no copy)."""
    num_envs = fresh.action.shape[1]
    slots = fit.buffer.action.shape[0] // num_envs
    buffer = jax.tree.map(
        lambda ring, new: jax.lax.dynamic_update_slice_in_dim(
            ring, jnp.moveaxis(new, 1, 0), fit.cursor * num_envs, axis=0), fit.buffer, fresh)
    return fit.replace(buffer=buffer, filled=jnp.minimum(fit.filled + 1, slots),
                       cursor=(fit.cursor + 1) % slots)


def _draw_columns(fit: FitState, fresh: Trajectory, size: int, key: Array) -> Trajectory:
    """``size`` whole windows' columns ``[T, size, ...]`` drawn uniformly without replacement
    (Gumbel top-k) from the fresh window, or with a ring (which holds the fresh window already,
    :func:`_push`) from its filled slots. Only the drawn rows are gathered."""
    if fit.buffer is None:
        num_columns = fresh.action.shape[1]
        valid = jnp.ones((num_columns,), bool)
    else:
        num_envs = fresh.action.shape[1]
        slots = fit.buffer.action.shape[0] // num_envs
        valid = jnp.repeat(jnp.arange(slots) < fit.filled, num_envs)
    scores = jax.random.gumbel(key, valid.shape) + jnp.where(valid, 0.0, -jnp.inf)
    columns = jax.lax.top_k(scores, size)[1]
    if fit.buffer is None:
        return jax.tree.map(lambda x: jnp.take(x, columns, axis=1), fresh)
    return jax.tree.map(lambda ring: jnp.moveaxis(jnp.take(ring, columns, axis=0), 0, 1),
                        fit.buffer)


def pretrain(loss_fn: LossFn, fit_state: FitState, hparams: Any, lr: Array,
             max_grad_norm: Array, key: Array, steps: int, trainable: Any,
             when: Array, prepare: Optional[Callable[[Any], Any]] = None) -> FitState:
    """``steps`` full-batch Adam steps of ``loss_fn`` on the burn-in windows
    (``fit_state.pretrain_buffer``, all of them side by side), moving only the ``trainable``
    leaves; the optimiser state then starts afresh for the fits that follow (Adam's moments and
    step count of the pretraining are not the model's).

    ``when``: a bool; where False nothing changes and no step runs. The steps are a loop whose
    trip count is ``steps`` or 0, not a ``lax.cond``: under ``vmap`` (seeds, settings) a
    ``cond`` on a per-run predicate becomes a select that runs both branches, so every update
    would pay for the whole pretraining; a batched loop runs as long as its longest member,
    which is 0 at every update but the one that pretrains. Step i's key is ``fold_in(key, i)``,
    made inside the loop, so the updates that do not pretrain make no keys either.
    ``prepare``: applied to the windows once, before the steps (``Estimator.pretrain_data``)."""
    data = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1).reshape(
        (x.shape[1], x.shape[0] * x.shape[2]) + x.shape[3:]), fit_state.pretrain_buffer)
    adam = optax.scale_by_adam(eps=MODEL_ADAM_EPS)

    def step(data, carry, step_key):
        params, opt_state = carry
        grads = jax.grad(lambda p: loss_fn(p, data, hparams, step_key)[0])(params)
        new, opt_state, _ = adam_step(params, opt_state, grads, lr, max_grad_norm,
                                      MODEL_ADAM_EPS)
        new = jax.tree.map(lambda n, o, t: jnp.where(t, n, o), new, params, trainable)
        return new, opt_state

    def all_steps(carry):
        prepared = data if prepare is None else prepare(data)
        return jax.lax.fori_loop(
            0, steps, lambda i, c: step(prepared, c, jax.random.fold_in(key, i)), carry)

    # A loop of one trip or none around the steps, so that ``prepare`` too runs only when
    # pretraining (under vmap: when any member does).
    params, _ = jax.lax.fori_loop(0, jnp.where(when, 1, 0), lambda _, c: all_steps(c),
                                  (fit_state.params, adam.init(fit_state.params)))
    opt_state = jax.tree.map(lambda new, old: jnp.where(when, new, old), adam.init(params),
                             fit_state.opt_state)
    return fit_state.replace(params=params, opt_state=opt_state)


def fit(loss_fn: LossFn, fit_state: FitState, fresh: Trajectory, hparams: Any, lr: Array,
        max_grad_norm: Array, key: Array, schedule: FitSchedule,
        sample: Optional[Callable[[Array], Any]] = None,
        weight_decay: Any = 0.0, frozen: Any = None) -> tuple[FitState, dict]:
    """``schedule.steps`` Adam steps of ``loss_fn`` on minibatches of whole windows (AdamW with
    ``weight_decay > 0``; no clipping with ``max_grad_norm = inf``). ``frozen``: a pytree of
    bools, True for leaves that keep their values (a pretrained part).

    With ``sample`` (``key -> batch``, a stage with a memory of its own, such as a buffer of
    whole episodes), every step fits the batch ``sample`` draws instead; ``minibatches`` and
    ``windows`` of the schedule do not apply.

    With ``schedule.until_loss = ℓ > 0`` the steps stop once a running average of the loss falls
    to ℓ (at most ``schedule.steps`` steps), the rule of RUDDER's demonstration code
    (``ml-jku/rudder-demonstration-code``, ``rudder.py``, ``RRLSTM.train``): the average starts
    at 2ℓ every update, each step moves it 1 % of the way to the step's loss, ``ℓ_i``, and a
    step whose loss is above twice the average resets the average to that loss. The loss is the
    stage's ``main_loss`` metric where it reports one (RUDDER: the final-step prediction error),
    else its value. The metric ``fit_steps`` says how many steps ran.

    Returns the new state (the fresh window pushed into the buffer) and metrics: ``loss`` (mean
    over the steps), ``loss_first`` and ``loss_last`` (the first and last step's minibatch loss,
    before their update), ``grad_norm`` and the loss's own metrics (means over the steps).
    """
    size = fresh.action.shape[1] // schedule.minibatches

    def draw(pick_key):
        if sample is not None:
            return sample(pick_key)
        return _draw_columns(fit_state, fresh, size, pick_key)

    def step(carry, step_key):
        params, opt_state = carry
        pick_key, loss_key = jax.random.split(step_key)
        batch = draw(pick_key)
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch, hparams, loss_key)
        new, opt_state, grad_norm = adam_step(params, opt_state, grads, lr, max_grad_norm,
                                              MODEL_ADAM_EPS, weight_decay)
        if frozen is not None:
            new = jax.tree.map(lambda n, o, f: jnp.where(f, o, n), new, params, frozen)
        return (new, opt_state), (loss, grad_norm, metrics)

    if fit_state.buffer is not None:
        # Written before the draws: a loop that read the ring and an in-place write after it
        # would make XLA copy the whole ring every update.
        fit_state = _push(fit_state, fresh)
    params, opt_state = fit_state.params, fit_state.opt_state
    if schedule.steps > 0 and schedule.until_loss > 0:
        params, opt_state, metrics = _fit_until(step, params, opt_state, key, schedule)
    elif schedule.steps > 0:
        (params, opt_state), (losses, norms, model_metrics) = jax.lax.scan(
            step, (params, opt_state), jax.random.split(key, schedule.steps))
        metrics = {"loss": losses.mean(), "loss_first": losses[0], "loss_last": losses[-1],
                   "grad_norm": norms.mean(),
                   **{k: v.mean() for k, v in model_metrics.items()}}
    else:
        metrics = {}
    return fit_state.replace(params=params, opt_state=opt_state), metrics


def _fit_until(step, params, opt_state, key: Array, schedule: FitSchedule):
    """The steps of :func:`fit` until the running loss reaches ``schedule.until_loss``."""
    target = jnp.float32(schedule.until_loss)
    keys = jax.random.split(key, schedule.steps)
    # One step traced abstractly gives the shapes of the metrics to accumulate.
    _, (loss0, norm0, metrics0) = jax.eval_shape(step, (params, opt_state), keys[0])
    zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), (norm0, metrics0))

    def running(carry):
        i, _, _, average, _, _, _, _ = carry
        return jnp.logical_and(i < schedule.steps, average > target)

    def body(carry):
        i, params, opt_state, average, first, last, loss_sum, sums = carry
        (params, opt_state), (loss, norm, metrics) = step((params, opt_state), keys[i])
        watched = metrics.get("main_loss", loss)
        average = average - 0.01 * (average - watched)
        average = jnp.where(watched > 2.0 * average, loss, average)
        first = jnp.where(i == 0, loss, first)
        sums = jax.tree.map(jnp.add, sums, (norm, metrics))
        return i + 1, params, opt_state, average, first, loss, loss_sum + loss, sums

    nan = jnp.full(loss0.shape, jnp.nan, loss0.dtype)
    count, params, opt_state, _, first, last, loss_sum, (norms, model_metrics) = (
        jax.lax.while_loop(running, body, (jnp.zeros((), jnp.int32), params, opt_state,
                                           2.0 * target, nan, nan, jnp.zeros_like(loss0),
                                           zeros)))
    n = jnp.maximum(count, 1).astype(jnp.float32)
    metrics = {"loss": loss_sum / n, "loss_first": first, "loss_last": last,
               "grad_norm": norms / n, "fit_steps": count.astype(jnp.float32),
               **{k: v / n for k, v in model_metrics.items()}}
    return params, opt_state, metrics

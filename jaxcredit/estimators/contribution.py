"""Pairwise contribution estimators: credit through a hindsight model of later steps' objects.

One record builder serves every estimator of the form (COCOA's ``causal.py``; HCA Theorem 1)

    A[t, a] = (1[a = a_t]/π(a_t|s_t) − 1) r̃_t + Σ_{k>t} γ^{k−t} (w(s_t, a, u_k) − 1) r̃_k,
    w(s, a, u) = p(a | s, u) / π(a | s),

where u_k is a *hindsight object* of step k and p(a | s, u) a classifier of the action at s given
an object that followed (fitted by the γ^{k−t−1}-weighted cross-entropy over pairs t < k of one
episode). The object decides the estimator:

* u_k = s_k (the state): state-conditioned HCA, "HCA+" in COCOA (``hca_state``);
* u_k = the reward value r_k: COCOA-reward (``cocoa_reward``);
* u_k = a learned binary feature of (s_k, a_k) that predicts r_k: COCOA-feature
  (``cocoa_feature``).

The identity is exact when the reward is a function of u (COCOA, Theorem 1): the coarser the
object, the fewer spurious contributions (an action that changes the state but not the reward
gets w = 1), which is COCOA's variance argument against HCA+.

Reference: Meulemans et al., "Would I have gotten that reward? Long-term credit assignment by
counterfactual contribution analysis", NeurIPS 2023 (arXiv 2306.16803).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import chex
import jax
import jax.numpy as jnp

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.hca import (
    PAIR_MODES, chunked_rows, chunked_sum, episode_index, rewarded_pair_offsets,
    sampled_pair_offsets, state_hca_future_credit, state_hca_pair_loss, state_pair_hindsight)
from jaxcredit.estimators.hca_return import behaviour_policy, check_choice, value_target
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

# Offsets per step at which the model is compared with the exact one (estimator/kl_to_exact).
KL_PAIRS = 8


@dataclasses.dataclass(frozen=True)
class HindsightObject:
    """u_k, what a later step is summarised by, as pure functions of a flat ``[T, N]`` window.

    Attributes:
      apply: ``apply(params, trajectory) -> u [T, N, ...]``, the input of the hindsight model's
        ``target`` (it also receives r_k). ``params`` is None for a parameter-free object.
      init: ``init(key, trajectory) -> params`` of a learned object (None: no parameters).
      loss: ``loss(params, trajectory) -> (scalar, metrics)`` of a learned object; it is added
        to the hindsight model's cross-entropy (the object sees no gradient of the latter).
      summarise, summary_loss: for a learned object whose loss is a mean over steps of a
        function of (observation, action, reward) that is quadratic in the reward (COCOA's
        reward regression): ``summarise(trajectory) -> summary``, its sufficient statistics
        (each distinct (observation, action) with its count, mean reward and the rewards'
        spread), and ``summary_loss(params, summary) -> (scalar, metrics)``, the same loss
        and gradient from them. The pretraining computes the summary once and steps on it.
      groups: for an object with a finite set of U values (a reward value),
        ``groups(params, trajectory) -> (index [T, N], u [U, ...], r [U])``: each step's value
        index, and every value as the model's ``target`` reads it (u and its reward). It makes
        ``pairs="grouped"`` possible: the pair sums grouped by value, exact in O(T·U).
    """

    apply: Callable[[Any, Trajectory], Array]
    init: Optional[Callable[[Array, Trajectory], Any]] = None
    loss: Optional[Callable[[Any, Trajectory], tuple[Array, dict]]] = None
    groups: Optional[Callable[[Any, Trajectory], tuple[Array, Array, Array]]] = None
    summarise: Optional[Callable[[Trajectory], Any]] = None
    summary_loss: Optional[Callable[[Any, Any], tuple[Array, dict]]] = None


def observation_object(oracle: bool) -> HindsightObject:
    """u_k = s_k: the observation, or for an exact model the tabular state index."""
    return HindsightObject(apply=lambda params, tr: tr.state if oracle else tr.obs)


def flat(trajectory: Trajectory) -> Trajectory:
    """``[T, *batch, ...] -> [T, N, ...]``."""
    batch = trajectory.action.shape[1:]
    n = math.prod(batch)
    return jax.tree_util.tree_map(
        lambda x: jnp.reshape(x, (x.shape[0], n) + x.shape[1 + len(batch):]), trajectory)


def future_group_sums(values: Array, done: Array, gamma) -> Array:
    """G_t = Σ_{k>t, same episode} γ^{k−t−1} v_k for every step, by one reverse scan.

        G_t = (1 − done_t) (v_{t+1} + γ G_{t+1}),   G_{T−1} = 0,

    so a sum stops at the first episode end (terminated or truncated) at or after t, and at the
    window's end. ``values`` ``[T, *b, U]`` (per-step contributions to U groups), ``done``
    ``[T, *b]``; returns ``[T, *b, U]``. With v_k = 1[u_k = u] r_k it gives COCOA's pair sum
    grouped by the value u of the later step's object: Σ_{k>t} γ^{k−t} (w(s_t,a,u_k) − 1) r_k =
    Σ_u (w(s_t,a,u) − 1) γ G_t(u).
    """
    chex.assert_rank(values, done.ndim + 1)
    chex.assert_equal_shape_prefix([values, done], done.ndim)
    keep = (1.0 - done.astype(values.dtype))[..., None]

    def step(later, inputs):
        v_next, keep_t = inputs
        g = keep_t * (v_next + gamma * later)
        return g, g

    nxt = jnp.concatenate([values[1:], jnp.zeros_like(values[:1])])
    _, g = jax.lax.scan(step, jnp.zeros_like(values[0]), (nxt, keep), reverse=True)
    return g


def check_pair_options(pairs: str, num_pairs: int, chunk: int) -> None:
    """One-line ValueErrors for the pair options shared by every pairwise estimator."""
    check_choice("pairs", pairs, PAIR_MODES + ("grouped",))
    for name, value in (("num_pairs", num_pairs), ("chunk", chunk)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def pairwise_estimator(
    name: str,
    build_model: Callable[[Trajectory], hm.StateHindsightModel],
    hindsight_object: HindsightObject,
    *,
    pairs: str,
    num_pairs: int,
    chunk: int,
    bootstrap: bool,
    mask_zero_reward_loss: bool,
    oracle: bool,
    exact_model: Optional[str],
    make_oracle: Optional[Callable[[], Estimator]],
    object_schedule: str = "joint",
) -> Estimator:
    """The :class:`Estimator` of the module formula for one hindsight object and model.

    Args:
      name: registry name.
      build_model: ``flat trajectory -> StateHindsightModel`` whose ``source`` reads s_t (the
        observation, or the tabular state for an exact model) and ``target`` reads u_k and r_k.
      hindsight_object: u_k.
      pairs: "all" (the exact double sum over the window), "sampled" (``num_pairs`` offsets
        per step, uniform over the rest of the window, importance-weighted: unbiased) or
        "rewarded" (only later steps with a non-zero reward, all of them where there are at
        most ``num_pairs``, else ``num_pairs`` drawn uniformly and importance-weighted:
        ``hca.rewarded_pair_offsets``; the credit is unchanged in expectation, and so is the
        loss when zero-reward pairs are masked), or "grouped" (an object with a finite set of
        values, ``HindsightObject.groups``: the later steps summed by the value of their object,
        Σ_{k>t} γ^{k−t} (w(s_t,a,u_k) − 1) r̃_k = Σ_u (w(s_t,a,u) − 1) Σ_{k>t, u_k=u} γ^{k−t} r̃_k,
        and the loss weighted by the same counts: the "all" numbers exactly, in O(T·U)).
      num_pairs, chunk: sampled offsets per step; rows t per chunk (memory).
      bootstrap: fold γ V(final obs) into the reward at window ends and time-outs (credit beyond
        the window then goes through the hindsight of the last step's object: an approximation).
      mask_zero_reward_loss: fit the model only on pairs whose later reward is non-zero (COCOA;
        a zero reward adds nothing to the credit, so those pairs only dilute the fit).
      oracle: the model is exact: the engine supplies its parameters every update.
      exact_model: the exact model this one approximates (``Estimator.exact_model``); for a
        learned object, that of the ideal object (cocoa_feature: the reward value).
      make_oracle: builds the oracle twin (None for an oracle or where none exists).
      object_schedule: for a learned object, "joint" (its loss added to the hindsight model's
        at every fit) or "pretrain" (its loss is the estimator's ``pretrain_loss``, fitted once
        on the burn-in windows, and the object is frozen afterwards: COCOA-feature's schedule).
    """
    learned_object = hindsight_object.init is not None
    grouped = pairs == "grouped"
    check_choice("object_schedule", object_schedule, ("joint", "pretrain"))
    pretrained_object = learned_object and object_schedule == "pretrain"
    if grouped and hindsight_object.groups is None:
        raise ValueError(f"{name}: pairs='grouped' needs a hindsight object with a finite set "
                         f"of values (cocoa_reward's reward value); use all, sampled or rewarded")

    def split(params):
        """(hindsight model params, object params)."""
        if learned_object:
            return params["hindsight"], params["object"]
        return params, None

    def init(key, example: Trajectory):
        tr = flat(example)
        if not learned_object:
            u = hindsight_object.apply(None, tr)
            return build_model(tr).init(key, tr.obs, tr.logits.shape[-1], u)
        model_key, object_key = jax.random.split(key)
        object_params = hindsight_object.init(object_key, tr)
        u = hindsight_object.apply(object_params, tr)
        return {"hindsight": build_model(tr).init(model_key, tr.obs, tr.logits.shape[-1], u),
                "object": object_params}

    def tilde_reward(tr: Trajectory, gamma):
        if not bootstrap:
            return tr.reward
        window_end = jnp.zeros_like(tr.done).at[-1].set(True)
        cut = jnp.logical_or(tr.truncated, window_end) & ~tr.terminated
        return tr.reward + cut * gamma * tr.next_value

    def features(net, params, tr: Trajectory):
        model_params, object_params = split(params)
        u = jax.lax.stop_gradient(hindsight_object.apply(object_params, tr))
        source = net.source(model_params, tr.state if oracle else tr.obs)
        return model_params, source, net.target(model_params, u, tr.reward)

    def pair_plan(tr: Trajectory, r: Array, key, mode: str, k: int):
        """Offsets and scales ``[N, T, K]``; ``r`` is the credited reward r̃ ``[T, N]``. Every
        pair ("all") is (None, None): the dense grid of ``hca.state_hca_future_credit``."""
        num_steps, n = tr.action.shape
        if mode == "all":
            return None, None
        keys = jax.random.split(key, n)
        if mode == "rewarded":
            return jax.vmap(lambda kk, rr: rewarded_pair_offsets(kk, rr, k),
                            in_axes=(0, 1))(keys, r)
        return jax.vmap(lambda kk: sampled_pair_offsets(kk, num_steps, k))(keys)

    def group_log_hindsight(net, params, u, r, inputs, policy_logits):
        """log h(·|s_t, u) ``[C, N, U, A]`` at every value u (``u``, ``r``: the object's values,
        ``HindsightObject.groups``), for a chunk's observations."""
        model_params = split(params)[0]
        src = net.source(model_params, inputs)                              # [C, N, ...]
        logits = net.pair_logits(model_params, src[:, :, None],
                                 net.target(model_params, u, r)[None, None],
                                 policy_logits[:, :, None])
        return jax.nn.log_softmax(logits)

    def grouped_rows(net, params, tr: Trajectory, row_fn, *row_args):
        """``row_fn(log_h, *row_args[rows])`` over chunks of ``chunk`` steps t, with
        log_h = log h(·|s_t, u) ``[C, N, U, A]`` at every value u of the object. The target
        projection is computed once; the source projection and the per-(t, u) hidden layer one
        chunk at a time, recomputed in the backward pass, which keeps them in cache (1.8× faster
        than the whole ``[T, N, U, hidden]`` tensor at once on a CPU, KeyToDoor L = 103; the
        source rows inside the chunk rather than one ``[T, N, hidden]`` tensor: a further 20 %,
        the padding, transposes and gradient accumulator of that tensor cost more than
        projecting a chunk's observations twice)."""
        _, u, r = hindsight_object.groups(split(params)[1], tr)

        def rows(_, valid, inputs, policy_logits, *args):
            del valid  # padded rows are cut off by chunked_rows
            return row_fn(group_log_hindsight(net, params, u, r, inputs, policy_logits), *args)

        return chunked_rows(rows, tr.action.shape[0], chunk, tr.state if oracle else tr.obs,
                            tr.logits, *row_args)

    def group_counts(params, tr: Trajectory, values: Array, gamma) -> Array:
        """Σ_{k>t, same episode, u_k = u} γ^{k−t−1} v_k for every step and value ``[T, N, U]``."""
        index, u, _ = hindsight_object.groups(split(params)[1], tr)
        return future_group_sums(jax.nn.one_hot(index, u.shape[0], dtype=values.dtype)
                                 * values[..., None], tr.done, gamma)

    def grouped_future_credit(net, params, tr: Trajectory, r: Array, gamma) -> Array:
        # γ G_t(u) = Σ_{k>t, same episode, u_k = u} γ^{k−t} r̃_k.
        later = gamma * group_counts(params, tr, r, gamma)
        log_pi = jax.nn.log_softmax(tr.logits)

        def credit(log_h, later_rows, log_pi_rows):
            return jnp.einsum("tnu,tnua->tna", later_rows,
                              jnp.exp(log_h - log_pi_rows[:, :, None]) - 1.0)

        return grouped_rows(net, params, tr, credit, later, log_pi)

    def grouped_loss(net, params, tr: Trajectory, r: Array, gamma):
        counted = r != 0 if mask_zero_reward_loss else jnp.ones_like(r, bool)
        # C_t(u) = Σ_{k>t, same episode, u_k = u} γ^{k−t−1}: the pair weights of the loss.
        weight = group_counts(params, tr, counted.astype(r.dtype), gamma)

        _, u, r_values = hindsight_object.groups(split(params)[1], tr)

        def weighted_ce(params, _, valid, inputs, policy_logits, weight_rows, action_rows):
            log_h = group_log_hindsight(net, params, u, r_values, inputs, policy_logits)
            ce = -jnp.take_along_axis(log_h, action_rows[:, :, None, None], axis=-1)[..., 0]
            return (valid[:, None, None] * weight_rows * ce).sum()

        ce = chunked_sum(weighted_ce, params, tr.action.shape[0], chunk,
                         tr.state if oracle else tr.obs, tr.logits, weight, tr.action)
        return ce, weight.sum()

    def assign(params, trajectory: Trajectory, hparams, key) -> Credit:
        tr = flat(trajectory)
        net = build_model(tr)
        gamma = hparams.gamma
        r = tilde_reward(tr, gamma)
        pi, pi_a = behaviour_policy(tr)
        taken = jax.nn.one_hot(tr.action, pi.shape[-1], dtype=pi.dtype)
        immediate = (taken / pi_a[..., None] - 1.0) * r[..., None]
        if grouped:
            future = grouped_future_credit(net, params, tr, r, gamma)
        else:
            model_params, src, tgt = features(net, params, tr)
            offsets, scale = pair_plan(tr, r, key, pairs, num_pairs)
            future = jax.vmap(
                lambda s, g, lg, rr, ep, off, sc: state_hca_future_credit(
                    net, model_params, s, g, lg, rr, ep, gamma, off, sc, chunk),
                in_axes=(1, 1, 1, 1, 1, 0, 0), out_axes=1,
            )(src, tgt, tr.logits, r, episode_index(tr.done), offsets, scale)
        advantage = jnp.reshape(immediate + future, trajectory.logits.shape)
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=value_target(trajectory, hparams),
            diagnostics={"advantage_std": advantage.std(),
                         "future_credit_abs": jnp.abs(future).mean()},
        )

    def loss(params, trajectory: Trajectory, hparams, key):
        tr = flat(trajectory)
        net = build_model(tr)
        gamma = hparams.gamma
        r = tilde_reward(tr, gamma)
        if grouped:
            ce, w = grouped_loss(net, params, tr, r, gamma)
        else:
            model_params, src, tgt = features(net, params, tr)
            offsets, scale = pair_plan(tr, r, key, pairs, num_pairs)
            ce, w = jax.vmap(
                lambda s, g, lg, a, rr, ep, off, sc: state_hca_pair_loss(
                    net, model_params, s, g, lg, a, rr, ep, gamma, off, sc, chunk,
                    mask_zero_reward_loss),
                in_axes=(1, 1, 1, 1, 1, 1, 0, 0),
            )(src, tgt, tr.logits, tr.action, r, episode_index(tr.done), offsets, scale)
        value = ce.sum() / jnp.maximum(w.sum(), 1e-8)
        metrics = {"hindsight_loss": value, "hindsight_pairs": w.sum()}
        if learned_object and hindsight_object.loss is not None and not pretrained_object:
            object_loss, object_metrics = hindsight_object.loss(split(params)[1], tr)
            metrics.update(object_metrics)
            value = value + object_loss
        return value, metrics

    def hindsight(params, trajectory: Trajectory, hparams, key):
        """log h at KL_PAIRS sampled future pairs per step, weighted as in the loss."""
        tr = flat(trajectory)
        net = build_model(tr)
        model_params, src, tgt = features(net, params, tr)
        offsets, scale = pair_plan(tr, tr.reward, key, "sampled", KL_PAIRS)
        log_h, weight = jax.vmap(
            lambda s, g, lg, ep, off, sc: state_pair_hindsight(
                net, model_params, s, g, lg, ep, hparams.gamma, off, sc),
            in_axes=(1, 1, 1, 1, 0, 0),
        )(src, tgt, tr.logits, episode_index(tr.done), offsets, scale)
        if mask_zero_reward_loss:
            k = jnp.minimum(jnp.arange(tr.action.shape[0])[:, None] + offsets,
                            tr.action.shape[0] - 1)
            weight = weight * (jax.vmap(lambda rr, kk: rr[kk], in_axes=(1, 0))(tr.reward, k) != 0)
        return log_h, weight

    summarised = hindsight_object.summarise is not None

    def pretrain_data(trajectory: Trajectory):
        return hindsight_object.summarise(flat(trajectory))

    def pretrain_loss(params, data, hparams, key):
        """The object's loss on the burn-in windows (``data``), or on their summary."""
        del hparams, key
        if summarised:
            return hindsight_object.summary_loss(split(params)[1], data)
        return hindsight_object.loss(split(params)[1], flat(data))

    def pretrained(params):
        return {"hindsight": jax.tree.map(lambda _: False, params["hindsight"]),
                "object": jax.tree.map(lambda _: True, params["object"])}

    return Estimator(name=name, init=init, assign=assign, loss=loss, all_action=True,
                     learned=not oracle, exact_model=exact_model, is_oracle=oracle,
                     oracle=None if oracle else make_oracle,
                     # A learned object's model conditions on another u than the exact
                     # model's (cocoa_feature's twin reads the reward value): no KL between them.
                     hindsight=hindsight if exact_model is not None and not learned_object
                     else None,
                     pretrain_loss=pretrain_loss if pretrained_object else None,
                     pretrained=pretrained if pretrained_object else None,
                     pretrain_data=pretrain_data if pretrained_object and summarised else None)

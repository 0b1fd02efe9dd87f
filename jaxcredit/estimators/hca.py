"""Hindsight credit assignment: the pure credit functions of HCA, HCA+ and C2A2C.

The estimator records built on them live in ``hca_return`` (return-conditioned HCA and C2A2C) and
``hca_state`` (state-conditioned HCA, "HCA+" in COCOA).

References:
  * Harutyunyan et al., "Hindsight Credit Assignment", NeurIPS 2019 (arXiv 1912.02503): HCA.
  * Alipov et al., "Towards Practical Credit Assignment for Deep RL" (arXiv 2106.04499): C2A2C,
    the credit-constrained advantage actor-critic. Its full text was not available to us: the
    ``c2a2c`` estimator below is a reconstruction from the abstract and the HCA theory, and every
    design choice is listed in docs/hca.md.
  * Meulemans et al., "Would I have gotten that reward?" (COCOA), NeurIPS 2023 (arXiv 2306.16803):
    policy-modulated hindsight logits and the all-action advantage convention.

Conventions. All-action credit ``A[t, a]`` is an estimate of the advantage A^π(s_t, a) of every
action; the policy gradient it stands for is Σ_t Σ_a ∇π(a|s_t) A[t, a] (the all-action loss of
``jaxcredit.agents.losses``). Per-step credit ``Â_t`` is for the action taken, with gradient
Σ_t ∇log π(a_t|s_t) Â_t.

Return-conditioned hindsight (HCA Theorem 2). With h(a|s,z) = P(A_0 = a | S_0 = s, Z = z) for
trajectories that follow π from s, Bayes' rule gives, for any return Z with E[Z|s,a] = Q^π(s,a),

    A^π(s,a) = E_{Z|s,a}[(1 − π(a|s)/h(a|s,Z)) Z]           (sampled form, a = a_t)
    A^π(s,a) = E_{Z|s}  [(h(a|s,Z)/π(a|s) − 1) Z]           (all-action form, every a)

and the two give the same policy gradient in expectation, because P(A_t = a | s_t, Z_t) = h.
c = π/h is the credit ratio: c ≈ 1 means the outcome carries no evidence that the action mattered.

State-conditioned hindsight (HCA Theorem 1, time-independent form). With the discounted future-state
occupancy d_γ(y|s,a) = (1 − γ) Σ_{k≥1} γ^{k−1} P(S_k = y | s, a) and h_γ(a|s,y) = π(a|s)
d_γ(y|s,a) / d_γ(y|s),

    A^π(s_t,a) = E[(1[a = a_t]/π(a_t|s_t) − 1) r_t
                   + Σ_{k>t} γ^{k−t} (h_γ(a|s_t,s_k)/π(a|s_t) − 1) r_k]

exactly (the sum over k stops at the episode end). The immediate reward uses the action taken
(no reward model), as in COCOA's implementation of HCA+.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.estimators import hindsight_models as hm

Array = jax.Array

RETURN_KINDS = ("mc", "lambda")
FORMS = ("sampled", "all_action")
GATES = ("hard", "soft")
PAIR_MODES = ("all", "sampled", "rewarded")


# ----------------------------------------------------------------------------------------------
# Pure credit functions
# ----------------------------------------------------------------------------------------------


def mixed_hindsight(h: Array, pi: Array, mix: Union[float, Array]) -> Array:
    """h_λ = λ h + (1 − λ) π, the smoothed hindsight (docs/hca.md, "mix").

    For λ < 1 the credit ratio c = π / h_λ lies in [π/(λ + (1 − λ)π), 1/(1 − λ)], so the sampled
    advantage (1 − c) Z is bounded by max(1, λ/(1 − λ)) |Z|. The all-action advantage
    (h_λ/π − 1) Z is exactly λ times the unmixed one: mixing only shrinks it.
    """
    return mix * h + (1.0 - mix) * pi


def credit_ratio(pi_a: Array, h_a: Array) -> Array:
    """c = π(a|s) / h(a|s, ·) for the action taken."""
    return pi_a / h_a


def return_hca_sampled(
    pi_a: Array, h_a: Array, z: Array, clip: Optional[float] = None
) -> Array:
    """Sampled return-HCA advantage Â_t = (1 − π(a_t|s_t)/h(a_t|s_t,Z_t)) Z_t (HCA Theorem 2).

    Args:
      pi_a: ``[T, *batch]`` π(a_t|s_t).
      h_a: ``[T, *batch]`` h(a_t|s_t, Z_t) (possibly mixed, see :func:`mixed_hindsight`).
      z: ``[T, *batch]`` the return Z_t.
      clip: if given, (1 − c) is clipped to [−clip, clip] before multiplying by Z.

    Returns:
      ``[T, *batch]`` per-step advantage.
    """
    chex.assert_equal_shape([pi_a, h_a, z])
    weight = 1.0 - credit_ratio(pi_a, h_a)
    if clip is not None:
        weight = jnp.clip(weight, -clip, clip)
    return weight * z


def return_hca_all_action(pi: Array, h: Array, z: Array) -> Array:
    """All-action return-HCA advantage A[t,a] = (h(a|s_t,Z_t)/π(a|s_t) − 1) Z_t.

    Σ_a π(a|s) A[t,a] = 0, so it is an advantage; its expectation over Z_t ~ p(·|s_t) is A^π(s_t,a).

    Args:
      pi: ``[T, *batch, A]`` π(·|s_t).
      h: ``[T, *batch, A]`` h(·|s_t, Z_t).
      z: ``[T, *batch]``.
    """
    chex.assert_equal_shape([pi, h])
    return (h / pi - 1.0) * z[..., None]


def credit_gate(c: Array, threshold: float, kind: str = "hard") -> Array:
    """C2A2C's gate on the credit ratio (reconstruction, docs/hca.md).

    hard: m = 1[|1 − c| ≥ δ];   soft: m = min(1, |1 − c| / δ).
    m = 0 switches off the policy update for an action whose hindsight probability equals its
    policy probability (the outcome carries no evidence that the action mattered).
    """
    if kind not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {kind!r}")
    evidence = jnp.abs(1.0 - c)
    if kind == "hard":
        return (evidence >= threshold).astype(c.dtype)
    return jnp.minimum(1.0, evidence / threshold)


def episode_index(done: Array) -> Array:
    """Number of episode ends strictly before each step: steps t < k share an episode iff equal."""
    done = jnp.asarray(done, jnp.int32)
    return jnp.cumsum(done, axis=0) - done


def all_pair_offsets(num_steps: int) -> tuple[Array, Array]:
    """Every future offset d = 1..T−1 for every step: ``(offsets, scale)``, both ``[T, T−1]``."""
    k = max(num_steps - 1, 1)
    offsets = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=jnp.int32), (num_steps, k))
    return offsets, jnp.ones((num_steps, k), jnp.float32)


def sampled_pair_offsets(key: Array, num_steps: int, num_pairs: int) -> tuple[Array, Array]:
    """K offsets per step, uniform over the rest of the window, with importance scale (T−1−t)/K.

    Σ_j scale · f(t + d_j) is an unbiased estimate of Σ_{k>t} f(k) over the window.
    """
    remaining = (num_steps - 1 - jnp.arange(num_steps))[:, None]
    u = jax.random.uniform(key, (num_steps, num_pairs))
    offsets = 1 + jnp.minimum(jnp.floor(u * remaining), jnp.maximum(remaining - 1, 0))
    scale = jnp.broadcast_to(remaining / num_pairs, (num_steps, num_pairs)).astype(jnp.float32)
    return offsets.astype(jnp.int32), scale


def rewarded_pair_offsets(key: Array, reward: Array, num_pairs: int) -> tuple[Array, Array]:
    """K offsets per step to later steps whose reward is non-zero: ``(offsets, scale)`` ``[T, K]``.

    A pair (t, k) with r_k = 0 adds nothing to a contribution estimator's credit, and nothing to
    its loss when zero-reward pairs are masked (COCOA), so only rewarded later steps are worth
    computing. Where step t has c_t ≤ K rewarded later steps in the window they are all taken
    (scale 1: exact); otherwise K are drawn uniformly among them with scale c_t/K (unbiased).
    Unused slots point past the window (invalid). ``reward`` is one environment's ``[T]``.
    """
    num_steps = reward.shape[0]
    rewarded = reward != 0
    # Positions of the rewarded steps in order, padded with T (past the window).
    order = jnp.sort(jnp.where(rewarded, jnp.arange(num_steps), num_steps))
    after = jnp.cumsum(rewarded[::-1])[::-1] - rewarded  # c_t: rewarded steps k > t
    first = jnp.sum(rewarded) - after                   # index in `order` of the first k > t
    slot = jnp.arange(num_pairs)
    u = jax.random.uniform(key, (num_steps, num_pairs))
    sampled = jnp.floor(u * after[:, None]).astype(jnp.int32)
    enumerate_all = (after <= num_pairs)[:, None]
    pick = jnp.where(enumerate_all, slot[None, :], sampled)
    used = jnp.where(enumerate_all, slot[None, :] < after[:, None], after[:, None] > 0)
    k = jnp.where(used, order[jnp.minimum(first[:, None] + pick, num_steps - 1)], num_steps)
    offsets = (k - jnp.arange(num_steps)[:, None]).astype(jnp.int32)
    scale = jnp.where(enumerate_all, 1.0, after[:, None] / num_pairs) * used
    return offsets, scale.astype(jnp.float32)


def _chunks(num_rows: int, chunk: int, row_args) -> tuple:
    """``(n_chunks, chunk, (rows, row_valid, *row_args))`` with every array ``[n_chunks, chunk,
    ...]``: rows padded to a multiple of ``chunk`` (padded rows repeat the last index and are
    not valid, their arguments are zeros)."""
    chunk = max(1, min(chunk, num_rows))
    n_chunks = -(-num_rows // chunk)
    pad = n_chunks * chunk - num_rows
    rows = jnp.arange(n_chunks * chunk, dtype=jnp.int32)
    row_valid = rows < num_rows
    rows = jnp.minimum(rows, num_rows - 1)
    args = [jnp.reshape(jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)),
                        (n_chunks, chunk) + a.shape[1:]) for a in row_args]
    return n_chunks, chunk, (rows.reshape(n_chunks, chunk),
                             row_valid.reshape(n_chunks, chunk), *args)


def chunked_rows(fn, num_rows: int, chunk: int, *row_args):
    """Applies ``fn(rows, row_valid, *row_args[rows])`` chunk by chunk over rows (``lax.map``).

    Rows are padded to a multiple of ``chunk``; padded rows get ``row_valid = False``. Each chunk
    is rematerialised in the backward pass (``jax.checkpoint``), so memory is that of one chunk.
    """
    n_chunks, chunk, xs = _chunks(num_rows, chunk, row_args)
    out = jax.lax.map(jax.checkpoint(lambda x: fn(*x)), xs)
    return jax.tree_util.tree_map(
        lambda x: jnp.reshape(x, (n_chunks * chunk,) + x.shape[2:])[:num_rows], out)


def _zero_cotangent(x: Array):
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


# Rows per band of the triangle, in chunks (:func:`triangle_bands`).
TRIANGLE_BAND_CHUNKS = 2


def triangle_bands(num_rows: int, chunk: int) -> list[tuple[int, int]]:
    """The static ``[start, end)`` of each band of ``TRIANGLE_BAND_CHUNKS × chunk`` rows."""
    band = TRIANGLE_BAND_CHUNKS * max(1, min(chunk, num_rows))
    return [(start, min(start + band, num_rows)) for start in range(0, num_rows, band)]


def triangle_rows(fn, num_rows: int, chunk: int):
    """``fn(rows, row_valid, first)`` over the rows, concatenated, band by band
    (:func:`triangle_bands`), where ``first`` (a Python int) is the band's first row + 1: the
    earliest later step k > t that any of its rows pairs with. A band then computes only the
    pairs k ≥ first; over all bands of b rows that is about T²/2 + T·b/2 pairs of the square
    ``[T, T]`` grid (the rest lie at k ≤ t). Within a band the rows go ``chunk`` at a time
    through :func:`chunked_rows` (a loop, each chunk rematerialised in the backward pass), so
    memory stays that of one chunk: the bands themselves, unrolled with static shapes, would
    not (one chunk per band, straight-line code, took 2.7× the temporaries of the loop for the
    pair loss's gradient, N = 256, T = 64, hidden 128, chunk 8, on XLA:CPU)."""
    outs = [chunked_rows(lambda _, valid, rows, first=start + 1: fn(rows, valid, first),
                         end - start, chunk, jnp.arange(start, end, dtype=jnp.int32))
            for start, end in triangle_bands(num_rows, chunk)]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *outs)


def chunked_sum(fn, params: Any, num_rows: int, chunk: int, *row_args,
                triangle: bool = False) -> Array:
    """Σ over chunks of ``fn(params, rows, row_valid, *row_args[rows])`` (a scalar per chunk),
    chunked as :func:`chunked_rows`, with its gradient with respect to ``params`` computed in
    the same pass.

    A loss summed over chunks and differentiated by ``jax.value_and_grad`` would otherwise run
    every chunk's forward pass twice: once for the value and once again, rematerialised, for the
    gradient. Here each chunk's value and gradient come from one ``jax.value_and_grad`` of the
    chunk and the gradients are summed as they go (a ``[*params]`` carry, nothing per row kept);
    the backward pass only scales them by the cotangent. Gradients flow to ``params`` only: the
    row arguments are the data of a fit (no gradient reaches them), and the function supports
    reverse-mode differentiation once (no ``jax.jvp``, no second derivatives).

    ``triangle``: the bands and chunks of :func:`triangle_rows`,
    ``fn(params, rows, row_valid, first)`` (no row arguments).
    """
    def forward(params, *args):
        # Integer leaves of the parameters (indices, sizes) are constants of the sum.
        leaves, treedef = jax.tree.flatten(params)
        inexact = [jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact) for x in leaves]

        def of_inexact(inexact_leaves, *xs):
            it = iter(inexact_leaves)
            full = [next(it) if d else x for x, d in zip(leaves, inexact)]
            return fn(jax.tree.unflatten(treedef, full), *xs)

        differentiated = [x for x, d in zip(leaves, inexact) if d]

        def one(carry, xs):
            value, grad = jax.value_and_grad(of_inexact)(differentiated, *xs)
            return jax.tree.map(jnp.add, carry, (value, grad)), None

        zero = (jnp.zeros((), jnp.float32), [jnp.zeros_like(x) for x in differentiated])
        if triangle:
            carry = zero
            for start, end in triangle_bands(num_rows, chunk):
                rows = _chunks(end - start, chunk, (jnp.arange(start, end, dtype=jnp.int32),))
                _, valid, absolute = rows[2]
                carry, _ = jax.lax.scan(
                    lambda c, x, first=start + 1: one(c, (x[0], x[1], first)),
                    carry, (absolute, valid))
            value, grad = carry
        else:
            (value, grad), _ = jax.lax.scan(one, zero, _chunks(num_rows, chunk, args)[2])
        it = iter(grad)
        grad = [next(it) if d else None for d in inexact]
        return value, grad

    @jax.custom_vjp
    def total(params, *args):
        return forward(params, *args)[0]

    def total_fwd(params, *args):
        value, grad = forward(params, *args)
        return value, (grad, params, args)

    def total_bwd(residuals, g):
        grad, params, args = residuals
        leaves, treedef = jax.tree.flatten(params)
        cotangents = [_zero_cotangent(x) if d is None else g * d for x, d in zip(leaves, grad)]
        return (jax.tree.unflatten(treedef, cotangents), *(_zero_cotangent(a) for a in args))

    total.defvjp(total_fwd, total_bwd)
    return total(params, *row_args)


def state_hca_future_credit(
    model: hm.StateHindsightModel,
    params: Any,
    src: Array,
    tgt: Array,
    policy_logits: Array,
    reward: Array,
    episode: Array,
    gamma: Union[float, Array],
    offsets: Optional[Array] = None,
    scale: Optional[Array] = None,
    chunk: int = 8,
) -> Array:
    """Future part of the state-HCA advantage for one environment's window.

        F[t, a] = Σ_j valid(t, k_j) scale[t,j] γ^{d_j} (h(a|s_t, s_{k_j}) / π(a|s_t) − 1) r_{k_j},
        k_j = t + d_j,  d_j = offsets[t, j]

    ``offsets`` None (the default): every later step of the window, the exact double sum
    Σ_{k>t}, each band of rows paired with the steps after its first row, their features
    sliced and broadcast, not gathered (:func:`triangle_rows`: about T²/2 + T·b/2 pairs where
    the offsets of :func:`all_pair_offsets`, which give the same sum, take T(T − 1)). With
    :func:`sampled_pair_offsets` an unbiased estimate of it. Pairs that cross an episode end
    are invalid. Memory: one chunk of ``chunk × K × (2·hidden + 3A)`` floats at a time.

    Args:
      model, params: the state hindsight model.
      src, tgt: ``[T, ...]`` per-step source / target features (``model.source`` / ``.target``).
      policy_logits: ``[T, A]``.
      reward: ``[T]`` rewards r_k (with any bootstrap tail folded in).
      episode: ``[T]`` :func:`episode_index`.
      gamma: discount.
      offsets, scale: ``[T, K]``, or both None for every later step.
      chunk: rows of t per chunk.

    Returns:
      ``[T, A]``.
    """
    num_steps = reward.shape[0]

    def credit_rows(t, t_valid, pairs):
        k, valid, d, log_h = _pair_log_hindsight(model, params, src, tgt, policy_logits,
                                                 episode, t, pairs)
        log_pi = jax.nn.log_softmax(policy_logits[t])[:, None]
        scl = 1.0 if isinstance(pairs, int) else pairs[1]
        weight = (valid * t_valid[:, None] * scl * gamma ** d.astype(reward.dtype)
                  * _later(reward, k, pairs))
        return jnp.einsum("ck,cka->ca", weight, jnp.exp(log_h - log_pi) - 1.0)

    if _all_pairs(offsets, scale):
        return triangle_rows(credit_rows, num_steps, chunk)
    return chunked_rows(lambda t, t_valid, offs, scl: credit_rows(t, t_valid, (offs, scl)),
                        num_steps, chunk, offsets, scale)


def _all_pairs(offsets: Optional[Array], scale: Optional[Array]) -> bool:
    """Whether a pair plan is "every later step" (both None) rather than explicit offsets."""
    if (offsets is None) != (scale is None):
        raise ValueError("offsets and scale go together: give both, or neither for all pairs")
    return offsets is None


def _later(x: Array, k: Array, pairs) -> Array:
    """``x`` at the later steps k of the pairs. Every later step (``pairs`` the first one, an
    int): the window from there on, broadcast over the rows, not gathered (the gradient of a
    gather is a scatter-add, which XLA:CPU runs one element at a time)."""
    return x[pairs:][None] if isinstance(pairs, int) else x[k]


def _pair_index(episode, t, pairs):
    """For rows t: (k clipped to the window, valid pair mask, d = k − t ≥ 1 where valid). A pair
    is valid when s_k lies inside the window and in the same episode as s_t. ``pairs``:
    ``(offsets, scale)`` with offsets = k − t ``[rows, K]``, or an int ``first``: every later
    step from ``first`` on (k = first..T−1 for every row, ``[1, T − first]``), valid where
    k > t."""
    num_steps = episode.shape[0]
    if isinstance(pairs, int):
        k = jnp.arange(pairs, num_steps, dtype=jnp.int32)[None, :]
        valid = (k > t[:, None]) & (episode[pairs:][None, :] == episode[t][:, None])
        return k, valid, jnp.maximum(k - t[:, None], 1)
    offs = pairs[0]
    k = t[:, None] + offs
    valid = (k < num_steps) & (episode[jnp.minimum(k, num_steps - 1)] == episode[t][:, None])
    return jnp.minimum(k, num_steps - 1), valid, offs


def _pair_log_hindsight(model, params, src, tgt, policy_logits, episode, t, pairs):
    """For rows t: (k, valid, d, log h(·|s_t, s_k)) (:func:`_pair_index`)."""
    k, valid, d = _pair_index(episode, t, pairs)
    logits = model.pair_logits(params, src[t][:, None], _later(tgt, k, pairs),
                               policy_logits[t][:, None])
    return k, valid, d, jax.nn.log_softmax(logits)


def state_hca_pair_loss(
    model: hm.StateHindsightModel,
    params: Any,
    src: Array,
    tgt: Array,
    policy_logits: Array,
    action: Array,
    reward: Array,
    episode: Array,
    gamma: Union[float, Array],
    offsets: Optional[Array] = None,
    scale: Optional[Array] = None,
    chunk: int = 8,
    mask_zero_reward: bool = False,
) -> tuple[Array, Array]:
    """γ-weighted cross-entropy of h(a_t | s_t, s_k) over future pairs of one window (every
    later step with ``offsets`` None, as :func:`state_hca_future_credit`).

    Pair weight γ^{k−t−1}: its minimiser is h_γ, the hindsight of the discounted future-state
    occupancy (module docstring). Returns ``(Σ weight · CE, Σ weight)`` so that the caller can
    average over a whole batch.
    """
    num_steps = reward.shape[0]

    def pair_weight(t, t_valid, pairs):
        k, valid, d = _pair_index(episode, t, pairs)
        scl = 1.0 if isinstance(pairs, int) else pairs[1]
        # d ≥ 1 at valid pairs; a padded row's offsets are 0, and γ^(−1) at γ = 0 is inf
        # (times its zero mask: NaN), so the power is taken at d − 1 ≥ 0.
        weight = (valid * t_valid[:, None] * scl
                  * gamma ** jnp.maximum(d - 1, 0).astype(reward.dtype))
        return weight * (_later(reward, k, pairs) != 0) if mask_zero_reward else weight

    def ce_sum(differentiable, t, t_valid, pairs):
        model_params, src_, tgt_ = differentiable
        *_, log_h = _pair_log_hindsight(model, model_params, src_, tgt_, policy_logits,
                                        episode, t, pairs)
        ce = -jnp.take_along_axis(log_h, action[t][:, None, None], axis=-1)[..., 0]
        return (pair_weight(t, t_valid, pairs) * ce).sum()

    # The source and target features carry the gradient to their projections.
    differentiable = (params, src, tgt)
    if _all_pairs(offsets, scale):
        ce = chunked_sum(ce_sum, differentiable, num_steps, chunk, triangle=True)
        w = triangle_rows(lambda *a: pair_weight(*a).sum(-1), num_steps, chunk)
    else:
        ce = chunked_sum(lambda p, t, t_valid, offs, scl: ce_sum(p, t, t_valid, (offs, scl)),
                         differentiable, num_steps, chunk, offsets, scale)
        w = chunked_rows(lambda t, t_valid, offs, scl: pair_weight(
            t, t_valid, (offs, scl)).sum(-1), num_steps, chunk, offsets, scale)
    return ce, w.sum()


def state_pair_hindsight(
    model: hm.StateHindsightModel,
    params: Any,
    src: Array,
    tgt: Array,
    policy_logits: Array,
    episode: Array,
    gamma: Union[float, Array],
    offsets: Array,
    scale: Array,
) -> tuple[Array, Array]:
    """log h(·|s_t, s_{t+d}) at the pairs of ``offsets`` with their loss weights, one window.

    Returns ``(log_h [T, K, A], weight [T, K])``, weight = valid · scale · γ^{d−1} as in
    :func:`state_hca_pair_loss`: the points (and weights) at which the model is fitted, where the
    engine compares it with the exact hindsight (``estimator/kl_to_exact``).
    """
    t = jnp.arange(episode.shape[0], dtype=jnp.int32)
    _, valid, _, log_h = _pair_log_hindsight(model, params, src, tgt, policy_logits, episode,
                                             t, (offsets, scale))
    weight = valid * scale * gamma ** jnp.maximum(offsets - 1, 0).astype(jnp.float32)
    return log_h, weight

"""Hindsight credit assignment: return-conditioned HCA, state-conditioned HCA and C2A2C.

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

import dataclasses
import math
from typing import Any, Optional, Union

import chex
import jax
import jax.numpy as jnp

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import returns
from jaxcredit.estimators.base import Estimator
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

RETURN_KINDS = ("mc", "lambda")
FORMS = ("sampled", "all_action")
GATES = ("hard", "soft")
PAIR_MODES = ("all", "sampled")


# ----------------------------------------------------------------------------------------------
# Pure credit functions
# ----------------------------------------------------------------------------------------------


def mixed_hindsight(h: Array, pi: Array, mix: Union[float, Array]) -> Array:
    """h_λ = λ h + (1 − λ) π, the smoothed hindsight (hca_family.md §1.3).

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


def _chunked_rows(fn, num_rows: int, chunk: int, *row_args):
    """Applies ``fn(rows, row_valid, *row_args[rows])`` chunk by chunk over rows (``lax.map``).

    Rows are padded to a multiple of ``chunk``; padded rows get ``row_valid = False``. Each chunk
    is rematerialised in the backward pass (``jax.checkpoint``), so memory is that of one chunk.
    """
    chunk = max(1, min(chunk, num_rows))
    n_chunks = -(-num_rows // chunk)
    pad = n_chunks * chunk - num_rows
    rows = jnp.arange(n_chunks * chunk, dtype=jnp.int32)
    row_valid = rows < num_rows
    rows = jnp.minimum(rows, num_rows - 1)
    args = [jnp.reshape(jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)),
                        (n_chunks, chunk) + a.shape[1:]) for a in row_args]
    out = jax.lax.map(jax.checkpoint(lambda xs: fn(*xs)),
                      (rows.reshape(n_chunks, chunk), row_valid.reshape(n_chunks, chunk), *args))
    return jax.tree_util.tree_map(
        lambda x: jnp.reshape(x, (n_chunks * chunk,) + x.shape[2:])[:num_rows], out)


def state_hca_future_credit(
    model: hm.StateHindsightModel,
    params: Any,
    src: Array,
    tgt: Array,
    policy_logits: Array,
    reward: Array,
    episode: Array,
    gamma: Union[float, Array],
    offsets: Array,
    scale: Array,
    chunk: int = 8,
) -> Array:
    """Future part of the state-HCA advantage for one environment's window.

        F[t, a] = Σ_j valid(t, k_j) scale[t,j] γ^{d_j} (h(a|s_t, s_{k_j}) / π(a|s_t) − 1) r_{k_j},
        k_j = t + d_j,  d_j = offsets[t, j]

    With :func:`all_pair_offsets` this is the exact double sum Σ_{k>t} over the window; with
    :func:`sampled_pair_offsets` an unbiased estimate of it. Pairs that cross an episode end are
    invalid. Memory: one chunk of ``chunk × K × (2·hidden + 3A)`` floats at a time.

    Args:
      model, params: the state hindsight model.
      src, tgt: ``[T, ...]`` per-step source / target features (``model.source`` / ``.target``).
      policy_logits: ``[T, A]``.
      reward: ``[T]`` rewards r_k (with any bootstrap tail folded in).
      episode: ``[T]`` :func:`episode_index`.
      gamma: discount.
      offsets, scale: ``[T, K]``.
      chunk: rows of t per chunk.

    Returns:
      ``[T, A]``.
    """
    num_steps = reward.shape[0]

    def rows_fn(t, t_valid, offs, scl):
        k, valid, log_h = _pair_log_hindsight(model, params, src, tgt, policy_logits, episode,
                                              t, offs)
        log_pi = jax.nn.log_softmax(policy_logits[t])[:, None]
        weight = valid * t_valid[:, None] * scl * gamma ** offs.astype(reward.dtype) * reward[k]
        return jnp.einsum("ck,cka->ca", weight, jnp.exp(log_h - log_pi) - 1.0)

    return _chunked_rows(rows_fn, num_steps, chunk, offsets, scale)


def _pair_log_hindsight(model, params, src, tgt, policy_logits, episode, t, offs):
    """For rows t and offsets k − t: (k clipped to the window, valid pair mask, log h(·|s_t, s_k)).

    A pair is valid when s_k lies inside the window and in the same episode as s_t.
    """
    num_steps = episode.shape[0]
    k = t[:, None] + offs
    valid = (k < num_steps) & (episode[jnp.minimum(k, num_steps - 1)] == episode[t][:, None])
    k = jnp.minimum(k, num_steps - 1)
    logits = model.pair_logits(params, src[t][:, None], tgt[k], policy_logits[t][:, None])
    return k, valid, jax.nn.log_softmax(logits)


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
    offsets: Array,
    scale: Array,
    chunk: int = 8,
    mask_zero_reward: bool = False,
) -> tuple[Array, Array]:
    """γ-weighted cross-entropy of h(a_t | s_t, s_k) over future pairs of one window.

    Pair weight γ^{k−t−1}: its minimiser is h_γ, the hindsight of the discounted future-state
    occupancy (module docstring). Returns ``(Σ weight · CE, Σ weight)`` so that the caller can
    average over a whole batch.
    """
    num_steps = reward.shape[0]

    def rows_fn(t, t_valid, offs, scl):
        k, valid, log_h = _pair_log_hindsight(model, params, src, tgt, policy_logits, episode,
                                              t, offs)
        ce = -jnp.take_along_axis(log_h, action[t][:, None, None], axis=-1)[..., 0]
        weight = valid * t_valid[:, None] * scl * gamma ** (offs - 1).astype(reward.dtype)
        if mask_zero_reward:
            weight = weight * (reward[k] != 0)
        return (weight * ce).sum(-1), weight.sum(-1)

    ce, w = _chunked_rows(rows_fn, num_steps, chunk, offsets, scale)
    return ce.sum(), w.sum()


# ----------------------------------------------------------------------------------------------
# Shared helpers for the estimator records
# ----------------------------------------------------------------------------------------------


def _check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_unit(name: str, value: float, low_open: bool = True) -> None:
    inside = (0.0 < value <= 1.0) if low_open else (0.0 <= value <= 1.0)
    if not isinstance(value, (int, float)) or not inside:
        raise ValueError(f"{name} must lie in {'(0, 1]' if low_open else '[0, 1]'}, got {value!r}")


def _obs_ndim(trajectory: Trajectory) -> int:
    return trajectory.obs.ndim - trajectory.action.ndim


def _num_actions(trajectory: Trajectory) -> int:
    return trajectory.logits.shape[-1]


def _policy(trajectory: Trajectory) -> tuple[Array, Array]:
    """π(·|s_t) and π(a_t|s_t) from the behaviour logits."""
    pi = jax.nn.softmax(trajectory.logits)
    pi_a = jnp.take_along_axis(pi, trajectory.action[..., None], axis=-1)[..., 0]
    return pi, pi_a


def _conditioning_return(trajectory: Trajectory, hparams: Any, kind: str) -> Array:
    """Z_t: Monte-Carlo (λ = 1) or λ-return, both episode-aware (no leak across episode ends).

    Both bootstrap from V at time-outs and at the end of the window; a window that covers whole
    episodes gives the plain Monte-Carlo return for ``"mc"``.
    """
    lam = 1.0 if kind == "mc" else hparams.lambda_
    z = returns.episode_aware_lambda_returns(
        trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
        hparams.gamma, lam)
    return jax.lax.stop_gradient(z)


def _value_target(trajectory: Trajectory, hparams: Any) -> Array:
    return returns.episode_aware_lambda_returns(
        trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
        hparams.gamma, hparams.lambda_)


def _standardise(z: Array) -> Array:
    """Batch-standardised Z (the MLP's input); constant within one assign / loss call."""
    return jax.lax.stop_gradient((z - z.mean()) / (z.std() + 1e-6))


def _return_model(model, hidden, policy_modulated, num_states, z_grid, obs_ndim):
    if isinstance(model, hm.ReturnHindsightModel):
        return model
    if model == "mlp":
        return hm.return_mlp(obs_ndim, hidden, policy_modulated)
    return hm.return_tabular(num_states, z_grid, policy_modulated)


def _check_return_model(model, num_states, z_grid):
    if isinstance(model, hm.ReturnHindsightModel):
        return
    _check_choice("model", model, ("mlp", "tabular"))
    if model == "tabular" and (num_states is None or z_grid is None):
        raise ValueError("model='tabular' needs num_states and z_grid")


def _return_hindsight(model, params, trajectory, z):
    """log h(·|s_t, Z_t) for every step: ``[T, *batch, A]``."""
    logits = model.logits(params, trajectory.obs, z, _standardise(z), trajectory.logits)
    return jax.nn.log_softmax(logits)


def _return_model_loss(model, params, trajectory, z):
    log_h = _return_hindsight(model, params, trajectory, z)
    ce = -jnp.take_along_axis(log_h, trajectory.action[..., None], axis=-1)[..., 0]
    return ce.mean()


@dataclasses.dataclass(frozen=True)
class _ReturnHindsight:
    """What ``hca_return`` and ``c2a2c`` share: the return-conditioned model h_φ(a|s, Z), its
    ``init`` and cross-entropy ``loss``, and the mixed hindsight h_λ at the actions taken."""

    model: Any
    hidden: tuple
    policy_modulated: bool
    num_states: Optional[int]
    z_grid: Optional[Any]
    return_kind: str
    mix: float

    def build(self, trajectory: Trajectory):
        return _return_model(self.model, self.hidden, self.policy_modulated, self.num_states,
                             self.z_grid, _obs_ndim(trajectory))

    def init(self, key, example: Trajectory):
        return self.build(example).init(key, example.obs, _num_actions(example))

    def hindsight(self, params, trajectory: Trajectory, hparams):
        """(Z, π, π(a_t), h_λ, h_λ(a_t)) for every step of the window."""
        z = _conditioning_return(trajectory, hparams, self.return_kind)
        h = jnp.exp(_return_hindsight(self.build(trajectory), params, trajectory, z))
        pi, pi_a = _policy(trajectory)
        h = mixed_hindsight(h, pi, self.mix)
        h_a = jnp.take_along_axis(h, trajectory.action[..., None], axis=-1)[..., 0]
        return z, pi, pi_a, h, h_a

    def loss(self, params, trajectory: Trajectory, hparams):
        z = _conditioning_return(trajectory, hparams, self.return_kind)
        value = _return_model_loss(self.build(trajectory), params, trajectory, z)
        return value, {"hindsight_loss": value}


# ----------------------------------------------------------------------------------------------
# Estimators
# ----------------------------------------------------------------------------------------------


def hca_return(
    form: str = "sampled",
    mix: float = 1.0,
    clip: Optional[float] = None,
    return_kind: str = "mc",
    model: Union[str, hm.ReturnHindsightModel] = "mlp",
    hidden: tuple = (64,),
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    z_grid: Optional[Any] = None,
) -> Estimator:
    """Return-conditioned HCA (Harutyunyan et al. 2019, Theorem 2) with a learned h_φ(a|s,Z).

    Credit (module docstring): sampled Â_t = (1 − π/h_λ) Z_t, or all-action
    A[t,a] = (h_λ(a|s_t,Z_t)/π(a|s_t) − 1) Z_t, with h_λ = mix·h_φ + (1 − mix)·π. No critic baseline
    is subtracted (the (1 − c) factor is the baseline), as in the official HCA code; the critic is
    still trained on the λ-return (``value_target``) and bootstraps Z at window ends.
    Loss: cross-entropy −log h_φ(a_t|s_t,Z_t) on the same rollout.

    Args:
      form: "sampled" (per-step credit) or "all_action" (``[T, *batch, A]``).
      mix: λ of the mixture h_λ, in (0, 1]; 1 is plain HCA.
      clip: clip (1 − c) to [−clip, clip] in the sampled form (None: off).
      return_kind: Z is the Monte-Carlo return ("mc") or the λ-return with ``hparams.lambda_``.
      model: "mlp", "tabular" (one-hot state observations), or a ReturnHindsightModel.
      hidden: MLP widths.
      policy_modulated: logits = stop_gradient(log π) + f_φ, h = π at initialisation.
      num_states, z_grid: for the tabular model.
    """
    _check_choice("form", form, FORMS)
    _check_choice("return_kind", return_kind, RETURN_KINDS)
    _check_unit("mix", mix)
    if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip must be a positive number or None, got {clip!r}")
    _check_return_model(model, num_states, z_grid)
    parts = _ReturnHindsight(model, hidden, policy_modulated, num_states, z_grid, return_kind, mix)

    def assign(params, trajectory: Trajectory, hparams) -> Credit:
        z, pi, pi_a, h, h_a = parts.hindsight(params, trajectory, hparams)
        if form == "sampled":
            advantage = return_hca_sampled(pi_a, h_a, z, clip)
        else:
            advantage = return_hca_all_action(pi, h, z)
        c = credit_ratio(pi_a, h_a)
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=_value_target(trajectory, hparams),
            diagnostics={"credit_ratio_mean": c.mean(), "credit_ratio_max": c.max(),
                         "advantage_std": advantage.std()},
        )

    return Estimator(name="hca_return", init=parts.init, assign=assign, loss=parts.loss,
                     all_action=form == "all_action", learned=True)


def c2a2c(
    gate: str = "hard",
    threshold: float = 0.1,
    mix: float = 1.0,
    return_kind: str = "mc",
    model: Union[str, hm.ReturnHindsightModel] = "mlp",
    hidden: tuple = (64,),
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    z_grid: Optional[Any] = None,
) -> Estimator:
    """Credit-constrained advantage actor-critic (Alipov et al. 2021, C2A2C), reconstructed.

    The abstract: C2A2C "ignores policy updates for actions which don't affect future outcomes
    based on credit in hindsight, while updating the policy as normal for those that do". Read
    literally (docs/hca.md lists every choice):

        Â_t = m_t · Â_t^{GAE(γ, λ)},   m_t = gate(c_t),   c_t = π(a_t|s_t) / h_λ(a_t|s_t, Z_t)

    with the hard gate m = 1[|1 − c| ≥ δ] or the soft gate m = min(1, |1 − c|/δ), computed under
    stop-gradient. The critic, its λ-return targets and the entropy bonus are A2C's, unchanged.
    The hindsight model is the same as :func:`hca_return`'s and is trained the same way.

    Args:
      gate: "hard" or "soft".
      threshold: δ > 0.
      mix, return_kind, model, hidden, policy_modulated, num_states, z_grid: as in
        :func:`hca_return`.
    """
    _check_choice("gate", gate, GATES)
    if not (isinstance(threshold, (int, float)) and threshold > 0):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")
    _check_choice("return_kind", return_kind, RETURN_KINDS)
    _check_unit("mix", mix)
    _check_return_model(model, num_states, z_grid)
    parts = _ReturnHindsight(model, hidden, policy_modulated, num_states, z_grid, return_kind, mix)

    def assign(params, trajectory: Trajectory, hparams) -> Credit:
        _, _, pi_a, _, h_a = parts.hindsight(params, trajectory, hparams)
        c = credit_ratio(pi_a, h_a)
        m = credit_gate(c, threshold, gate)
        advantage, targets = returns.gae(
            trajectory.reward, trajectory.value, trajectory.next_value, trajectory.terminated,
            trajectory.truncated, hparams.gamma, hparams.lambda_)
        return Credit(
            advantage=jax.lax.stop_gradient(m * advantage),
            value_target=targets,
            diagnostics={"gate_open": m.mean(), "credit_evidence": jnp.abs(1.0 - c).mean(),
                         "credit_ratio_mean": c.mean()},
        )

    return Estimator(name="c2a2c", init=parts.init, assign=assign, loss=parts.loss,
                     all_action=False, learned=True)


def _data_key(seed: int, trajectory: Trajectory) -> Array:
    """A PRNG key derived from the rollout itself: the contract's ``assign`` takes no key.

    It changes from batch to batch (it hashes the float bits of the rewards and log-probs), is
    deterministic for a given batch, and is identical in ``assign`` and ``loss`` of one batch.
    """
    digest = jnp.sum(trajectory.reward) * 1.618 + jnp.sum(trajectory.log_prob)
    bits = jax.lax.bitcast_convert_type(digest.astype(jnp.float32), jnp.uint32)
    return jax.random.fold_in(jax.random.key(seed), bits)


def hca_state(
    pairs: str = "all",
    num_pairs: int = 16,
    chunk: int = 8,
    bootstrap: bool = True,
    mask_zero_reward_loss: bool = False,
    condition_on_reward: bool = False,
    model: Union[str, hm.StateHindsightModel] = "mlp",
    hidden: int = 128,
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    seed: int = 0,
) -> Estimator:
    """State-conditioned HCA (Harutyunyan et al. 2019, Theorem 1; "HCA+" in COCOA) — all-action.

        A[t,a] = (1[a = a_t]/π(a_t|s_t) − 1) r̃_t + Σ_{k>t} γ^{k−t} (h(a|s_t,s_k)/π(a|s_t) − 1) r̃_k

    over steps k of the same episode inside the window. r̃ = r, plus, with ``bootstrap``, the tail
    γ V(s'_{k+1}) folded into the last reward of the window or of a truncated episode (so credit
    beyond the window is assigned through the hindsight of the last state: an approximation).
    Loss: the γ^{k−t−1}-weighted cross-entropy of h(a_t|s_t,s_k) over the same pairs.

    Cost. The pairwise part is O(T²·A) per environment (``pairs="all"``) or O(T·K·A) with
    ``pairs="sampled"`` (K = ``num_pairs`` offsets per step, uniform over the rest of the window,
    importance-weighted: unbiased for the window sum). Rows t are processed ``chunk`` at a time and
    rematerialised in the backward pass, so the peak memory of the pairwise stage is about
    4·N·chunk·K·(2·hidden + 3A) bytes for N environments (:func:`hca_state_pair_memory_bytes`;
    docs/hca.md compares it with XLA's measured allocation).

    Args:
      pairs: "all" (exact double sum over the window) or "sampled".
      num_pairs: K for ``pairs="sampled"``.
      chunk: rows t per chunk.
      bootstrap: fold γ V(final obs) into the reward at window ends and time-outs.
      mask_zero_reward_loss: train h only on pairs whose later reward is non-zero (COCOA).
      condition_on_reward: the MLP conditions on (s_k, r_k) instead of s_k. The identity still
        holds, because r_k is then a function of the conditioning variable (R_k ⟂ A_t given
        it), and it is what lets hindsight work when states are aliased (DelayedEffect's
        observations): r_k then carries the evidence. A hybrid of HCA+ and COCOA-reward.
      model: "mlp", "tabular" (one-hot state observations; needs ``num_states``), or a
        StateHindsightModel.
      hidden: MLP width.
      policy_modulated: logits = stop_gradient(log π(·|s_t)) + f_φ(s_t, s_k).
      seed: seeds the pair sampler (the key is derived from the batch, see ``_data_key``).
    """
    _check_choice("pairs", pairs, PAIR_MODES)
    for name, value in (("num_pairs", num_pairs), ("chunk", chunk)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(model, hm.StateHindsightModel):
        _check_choice("model", model, ("mlp", "tabular"))
        if model == "tabular" and num_states is None:
            raise ValueError("model='tabular' needs num_states")

    def build(trajectory):
        if isinstance(model, hm.StateHindsightModel):
            return model
        if model == "mlp":
            return hm.state_mlp(_obs_ndim(trajectory), hidden, policy_modulated,
                                condition_on_reward)
        return hm.state_tabular(num_states, policy_modulated)

    def init(key, example: Trajectory):
        return build(example).init(key, example.obs, _num_actions(example))

    def flat(trajectory):
        """[T, *batch, ...] -> [T, N, ...] plus the batch shape."""
        batch = trajectory.action.shape[1:]
        n = math.prod(batch)
        return jax.tree_util.tree_map(
            lambda x: jnp.reshape(x, (x.shape[0], n) + x.shape[1 + len(batch):]), trajectory), batch

    def tilde_reward(tr: Trajectory, gamma):
        if not bootstrap:
            return tr.reward
        window_end = jnp.zeros_like(tr.done).at[-1].set(True)
        cut = jnp.logical_or(tr.truncated, window_end) & ~tr.terminated
        return tr.reward + cut * gamma * tr.next_value

    def pair_plan(tr: Trajectory):
        num_steps, n = tr.action.shape
        if pairs == "all":
            offsets, scale = all_pair_offsets(num_steps)
            return (jnp.broadcast_to(offsets, (n,) + offsets.shape),
                    jnp.broadcast_to(scale, (n,) + scale.shape))
        keys = jax.random.split(_data_key(seed, tr), n)
        return jax.vmap(lambda k: sampled_pair_offsets(k, num_steps, num_pairs))(keys)

    def assign(params, trajectory: Trajectory, hparams) -> Credit:
        tr, batch = flat(trajectory)
        net = build(tr)
        gamma = hparams.gamma
        r = tilde_reward(tr, gamma)
        pi, pi_a = _policy(tr)
        taken = jax.nn.one_hot(tr.action, pi.shape[-1], dtype=pi.dtype)
        immediate = (taken / pi_a[..., None] - 1.0) * r[..., None]
        src, tgt = net.source(params, tr.obs), net.target(params, tr.obs, tr.reward)
        offsets, scale = pair_plan(tr)
        future = jax.vmap(
            lambda s, g, lg, rr, ep, off, sc: state_hca_future_credit(
                net, params, s, g, lg, rr, ep, gamma, off, sc, chunk),
            in_axes=(1, 1, 1, 1, 1, 0, 0), out_axes=1,
        )(src, tgt, tr.logits, r, episode_index(tr.done), offsets, scale)
        advantage = immediate + future
        advantage = jnp.reshape(advantage, trajectory.logits.shape)
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=_value_target(trajectory, hparams),
            diagnostics={"advantage_std": advantage.std(),
                         "future_credit_abs": jnp.abs(future).mean()},
        )

    def loss(params, trajectory: Trajectory, hparams):
        tr, _ = flat(trajectory)
        net = build(tr)
        gamma = hparams.gamma
        r = tilde_reward(tr, gamma)
        src, tgt = net.source(params, tr.obs), net.target(params, tr.obs, tr.reward)
        offsets, scale = pair_plan(tr)
        ce, w = jax.vmap(
            lambda s, g, lg, a, rr, ep, off, sc: state_hca_pair_loss(
                net, params, s, g, lg, a, rr, ep, gamma, off, sc, chunk, mask_zero_reward_loss),
            in_axes=(1, 1, 1, 1, 1, 1, 0, 0),
        )(src, tgt, tr.logits, tr.action, r, episode_index(tr.done), offsets, scale)
        value = ce.sum() / jnp.maximum(w.sum(), 1e-8)
        return value, {"hindsight_loss": value, "hindsight_pairs": w.sum()}

    return Estimator(name="hca_state", init=init, assign=assign, loss=loss,
                     all_action=True, learned=True)


def hca_state_pair_memory_bytes(num_envs: int, num_steps: int, hidden: int, num_actions: int,
                                chunk: int = 8, num_pairs: Optional[int] = None) -> int:
    """Estimated peak bytes of hca_state's pairwise stage (float32), for sizing a run.

    One chunk holds, per environment, ``chunk × K`` pairs with the gathered target features and
    the hidden activations (2·hidden floats) and the logits, log h and ratio (3·A floats);
    K = T − 1 for ``pairs="all"``, ``num_pairs`` for ``pairs="sampled"``. Chunks are processed
    one at a time and rematerialised in the backward pass, so this is also the order of the
    loss's peak. Everything else the estimator stores is O(N·T·(hidden + A)).
    """
    pairs = num_steps - 1 if num_pairs is None else num_pairs
    return 4 * num_envs * min(chunk, num_steps) * pairs * (2 * hidden + 3 * num_actions)

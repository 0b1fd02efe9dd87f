"""Hindsight models for hindsight credit assignment (HCA, Harutyunyan et al., 2019).

A hindsight model is a classifier of the action taken at s_t given something observed later:

* return-conditioned:  h(a | s, Z), Z the return that followed (HCA Theorem 2);
* state-conditioned:   h(a | s_t, s_k), s_k a later state of the same episode (HCA Theorem 1).

Each model is a small record of pure functions over explicit parameters (no hidden state), so the
estimators in ``jaxcredit.estimators.hca`` can train it inside the agent's compiled update step and
the diagnostics can swap in the exact hindsight distribution computed by dynamic programming.

Two parametrisations of each:

* ``mlp``: a flax MLP on the flattened observation. With ``policy_modulated=True`` (COCOA,
  Meulemans et al., 2023) the logits are ``stop_gradient(log π(·|s)) + f_φ(·)`` and the last layer
  of f_φ starts at zero, so h = π at initialisation: the credit ratio starts at 1 and the model only
  learns the deviation of hindsight from the policy.
* ``tabular``: a logit table indexed by the state index (observations are one-hot states). The
  return model snaps Z to the nearest point of a fixed grid, as the official HCA code does. Loading
  exact log-probabilities into the table gives the exact hindsight distribution.

The return MLP reads Z as a feature chosen by the estimator (``hca_return``'s ``model_input``): a
scalar, or :func:`two_hot`, Z's linear interpolation weights on a fixed grid of returns.

The state model is split into ``source`` (s_t), ``target`` (s_k) and ``pair_logits``: the MLP's
first layer, linear in [s_t, s_k], is computed once per step and only added per pair.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


# ----------------------------------------------------------------------------------------------
# Return-conditioned hindsight h(a | s, Z)
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReturnHindsightModel:
    """h(a | s, Z) as pure functions.

    Attributes:
      init: ``init(key, obs, num_actions) -> params``; ``obs`` is ``[*batch, *obs_shape]`` (any
        batch), only its trailing ``obs_ndim`` dims are used.
      logits: ``logits(params, obs, z, z_feature, policy_logits) -> [*batch, A]`` logits of h.
        ``z`` ``[*batch]`` is the raw return and ``z_feature`` what the estimator's model input
        makes of it: ``[*batch]`` (the batch-standardised or the centred Z) or ``[*batch, K]``
        (:func:`two_hot` on a fixed grid). The MLP reads ``z_feature``; the tabular grid and the
        oracle read the raw value. ``policy_logits`` are log π up to a constant.
    """

    init: Callable[..., Any]
    logits: Callable[..., Array]


@dataclasses.dataclass(frozen=True)
class StateHindsightModel:
    """h(a | s_t, s_k) as pure functions, factored for the pairwise computation.

    Attributes:
      init: ``init(key, obs, num_actions, target=None) -> params``; ``target`` is an example of
        what ``target`` reads (the later observation by default).
      source: ``source(params, obs [*b, *obs_shape]) -> [*b, ...]`` features of s_t.
      target: ``target(params, u, reward) -> [*b, ...]`` features of the later step's hindsight
        object u_k (its observation s_k, or a reward value or feature for COCOA; ``reward``
        ``[*b]`` is r_k; a model may ignore it).
      pair_logits: ``pair_logits(params, src, tgt, policy_logits) -> [*b, A]``; ``src``, ``tgt`` and
        ``policy_logits`` broadcast against each other over the leading dims.
    """

    init: Callable[..., Any]
    source: Callable[..., Array]
    target: Callable[..., Array]
    pair_logits: Callable[..., Array]


def state_of(obs: Array) -> Array:
    """The tabular state index: ``obs`` itself if it holds integer indices, else the argmax of a
    one-hot state observation (the last axis)."""
    if jnp.issubdtype(obs.dtype, jnp.integer):
        return obs
    return jnp.argmax(obs, axis=-1)


def _flatten_obs(obs: Array, obs_ndim: int) -> Array:
    lead = obs.shape[: obs.ndim - obs_ndim]
    return jnp.reshape(obs, lead + (-1,)).astype(jnp.float32)


def two_hot(z: Array, grid: Array) -> Array:
    """Z as linear-interpolation weights on a fixed, increasing grid of returns g_0 < … < g_{K−1}.

    With g_i ≤ z ≤ g_{i+1} and f = (z − g_i)/(g_{i+1} − g_i),

        x(z) = (1 − f)·e_i + f·e_{i+1},     Σ_k x_k = 1,     Σ_k x_k g_k = z,

    so z is recovered exactly inside the grid; z beyond an end is clipped to that end point
    (x = e_0 or e_{K−1}). A function of z alone: the same return is the same input in every batch.

    Args:
      z: returns ``[*batch]``.
      grid: ``[K]`` strictly increasing bin centres, K ≥ 2.

    Returns:
      ``[*batch, K]`` float32 weights, two non-zero entries at most.
    """
    grid = jnp.asarray(grid, jnp.float32)
    chex.assert_rank(grid, 1)
    num_bins = grid.shape[0]
    if num_bins < 2:
        raise ValueError(f"the grid needs at least 2 points, got {num_bins}")
    z = jnp.clip(jnp.asarray(z, jnp.float32), grid[0], grid[-1])
    low = jnp.clip(jnp.searchsorted(grid, z, side="right") - 1, 0, num_bins - 2)
    frac = (z - grid[low]) / (grid[low + 1] - grid[low])
    out = ((1.0 - frac)[..., None] * jax.nn.one_hot(low, num_bins)
           + frac[..., None] * jax.nn.one_hot(low + 1, num_bins))
    chex.assert_shape(out, z.shape + (num_bins,))
    return out


class _ReturnMLP(nn.Module):
    num_actions: int
    hidden: Sequence[int]

    @nn.compact
    def __call__(self, x: Array) -> Array:
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        # Zero last layer: with policy modulation h = π exactly at initialisation.
        return nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)(x)


def return_mlp(
    obs_ndim: int, hidden: Sequence[int] = (64,), policy_modulated: bool = True,
    feature_dim: int = 1,
) -> ReturnHindsightModel:
    """An MLP hindsight model on [flatten(obs), z_feature].

    Args:
      obs_ndim: number of trailing observation dims (0 for scalar observations).
      hidden: widths of the hidden layers.
      policy_modulated: add stop_gradient(log π) to the output logits (COCOA's parametrisation).
      feature_dim: width of ``z_feature``: 1 for a scalar feature ``[*batch]``, K for the
        :func:`two_hot` encoding ``[*batch, K]``.
    """
    hidden = tuple(int(w) for w in hidden)
    feature_dim = int(feature_dim)

    def init(key, obs, num_actions):
        x = _flatten_obs(obs, obs_ndim)
        x = jnp.reshape(x, (-1, x.shape[-1]))[:1]
        net = _ReturnMLP(num_actions, hidden)
        return net.init(key, jnp.concatenate([x, jnp.zeros((1, feature_dim))], -1))

    def logits(params, obs, z, z_feature, policy_logits):
        num_actions = policy_logits.shape[-1]
        x = _flatten_obs(obs, obs_ndim)
        feature = z_feature[..., None] if z_feature.ndim == z.ndim else z_feature
        chex.assert_shape(feature, z.shape + (feature_dim,))
        x = jnp.concatenate([x, feature.astype(jnp.float32)], -1)
        out = _ReturnMLP(num_actions, hidden).apply(params, x)
        if policy_modulated:
            out = out + jax.lax.stop_gradient(jax.nn.log_softmax(policy_logits))
        return out

    return ReturnHindsightModel(init=init, logits=logits)


def return_tabular(num_states: int, z_grid: Array, policy_modulated: bool = False):
    """A tabular hindsight model: logits table ``[S, len(z_grid), A]``, Z snapped to the grid.

    Observations are integer state indices or one-hot state vectors (:func:`state_of`). Nearest-bin
    snapping follows the official HCA code (hca_classes.py).

    Args:
      num_states: S.
      z_grid: ``[num_bins]`` increasing return values.
      policy_modulated: add log π to the table logits (then a zero table means h = π).
    """
    z_grid = jnp.asarray(z_grid, jnp.float32)

    def init(key, obs, num_actions):
        del key, obs
        return {"table": jnp.zeros((num_states, z_grid.shape[0], num_actions), jnp.float32)}

    def logits(params, obs, z, z_feature, policy_logits):
        del z_feature
        s = state_of(obs)
        b = jnp.argmin(jnp.abs(z[..., None] - z_grid), axis=-1)
        out = params["table"][s, b]
        if policy_modulated:
            out = out + jax.lax.stop_gradient(jax.nn.log_softmax(policy_logits))
        return out

    return ReturnHindsightModel(init=init, logits=logits)


# ----------------------------------------------------------------------------------------------
# State-conditioned hindsight h(a | s_t, s_k)
# ----------------------------------------------------------------------------------------------


def _sum_to(x: Array, shape: tuple) -> Array:
    """Sums ``x`` over the axes that broadcasting added to an operand of ``shape``."""
    lead = x.ndim - len(shape)
    x = x.sum(tuple(range(lead))) if lead else x
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, x.shape)) if n == 1 and m != 1)
    return x.sum(axes, keepdims=True) if axes else x


@jax.custom_vjp
def relu_pair_logits(src: Array, tgt: Array, kernel: Array, bias: Array) -> Array:
    """The pair head W_o relu(u + v) + b_o of the factored MLP (broadcastable ``src`` u and
    ``tgt`` v ``[..., H]``, ``kernel`` ``[H, A]``, ``bias`` ``[A]``), with its gradient written
    out: the kernel's gradient Σ_p z_p ⊗ g_p, a dot over the pairs into only H × A, runs on
    XLA:CPU as a generic batched dot (0.29 ms a chunk of 256 pairs × 8 vmapped seeds, KeyToDoor
    L = 103) and as a multiply-reduce per action in a tenth. The backward pass recomputes the
    hidden layer (one add and a ReLU). Tested against autodiff (tests/test_hca.py)."""
    return jax.nn.relu(src + tgt) @ kernel + bias


def _relu_pair_logits_fwd(src, tgt, kernel, bias):
    return relu_pair_logits(src, tgt, kernel, bias), (src, tgt, kernel)


def _relu_pair_logits_bwd(residuals, g):
    src, tgt, kernel = residuals
    pre = src + tgt
    z = jax.nn.relu(pre).reshape(-1, pre.shape[-1])
    g_rows = g.reshape(-1, g.shape[-1])
    d_kernel = jnp.stack([(z * g_rows[:, a, None]).sum(0) for a in range(g.shape[-1])], -1)
    d_pre = jnp.where(pre > 0, g @ kernel.T, 0.0)
    return _sum_to(d_pre, src.shape), _sum_to(d_pre, tgt.shape), d_kernel, g_rows.sum(0)


relu_pair_logits.defvjp(_relu_pair_logits_fwd, _relu_pair_logits_bwd)


class _PairHead(nn.Module):
    num_actions: int
    hidden: int

    def setup(self):
        self.src = nn.Dense(self.hidden)
        self.tgt = nn.Dense(self.hidden, use_bias=False)
        self.out = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)

    def __call__(self, x_src: Array, x_tgt: Array) -> Array:  # only used by init
        return self.head(self.source(x_src), self.target(x_tgt))

    def source(self, x: Array) -> Array:
        return self.src(x)

    def target(self, x: Array) -> Array:
        return self.tgt(x)

    def head(self, u: Array, v: Array) -> Array:
        # One hidden layer on [s_t, s_k]: the per-pair cost is hidden·(A + 2) flops, the
        # projections W_s s_t and W_k s_k are paid once per step.
        return self.out(nn.relu(u + v))


def state_mlp(obs_ndim: int, hidden: int = 128, policy_modulated: bool = True,
              reward_input: bool = False, target_ndim: Optional[int] = None
              ) -> StateHindsightModel:
    """An MLP h(a | s_t, u_k) whose first layer is factored into source and target projections.

    f(s_t, u_k) = W_o relu(W_s s_t + W_k u_k + b) + b_o, i.e. a one-hidden-layer MLP on the
    concatenation [s_t, u_k], with u_k = s_k for HCA+ (COCOA: a reward value or feature).
    With ``policy_modulated`` the logits are stop_gradient(log π(·|s_t)) + f and W_o starts at
    zero (h = π initially). With ``reward_input`` the target is (u_k, r_k): W_k [u_k, r_k]
    (see ``hca_state``). ``target_ndim``: trailing dims of u_k (default ``obs_ndim``).
    """
    hidden = int(hidden)
    target_ndim = obs_ndim if target_ndim is None else int(target_ndim)

    def target_input(u, reward):
        x = _flatten_obs(u, target_ndim)
        if reward_input:
            x = jnp.concatenate([x, reward[..., None].astype(jnp.float32)], -1)
        return x

    def init(key, obs, num_actions, target=None):
        x = _flatten_obs(obs, obs_ndim)
        x = jnp.reshape(x, (-1, x.shape[-1]))[:1]
        y = x if target is None else _flatten_obs(target, target_ndim)
        y = jnp.reshape(y, (-1, y.shape[-1]))[:1]
        if reward_input:
            y = jnp.concatenate([y, jnp.zeros((1, 1))], -1)
        return _PairHead(num_actions, hidden).init(key, x, y)

    def _module(params):
        num_actions = params["params"]["out"]["kernel"].shape[-1]
        return _PairHead(num_actions, hidden)

    def source(params, obs):
        return _module(params).apply(params, _flatten_obs(obs, obs_ndim), method=_PairHead.source)

    def target(params, obs, reward):
        return _module(params).apply(params, target_input(obs, reward), method=_PairHead.target)

    def pair_logits(params, src, tgt, policy_logits):
        # _PairHead.head, with the gradient of relu_pair_logits.
        out = relu_pair_logits(src, tgt, params["params"]["out"]["kernel"],
                               params["params"]["out"]["bias"])
        if policy_modulated:
            out = out + jax.lax.stop_gradient(jax.nn.log_softmax(policy_logits))
        return out

    return StateHindsightModel(init=init, source=source, target=target, pair_logits=pair_logits)


def state_tabular(num_states: int, policy_modulated: bool = False,
                  num_targets: Optional[int] = None) -> StateHindsightModel:
    """A tabular h(a | s_t, u_k): logits table ``[S, U, A]`` on state indices (:func:`state_of`)
    and object indices u_k (the later state, U = S, by default; a reward-value index for
    COCOA-reward)."""
    num_targets = num_states if num_targets is None else int(num_targets)

    def init(key, obs, num_actions, target=None):
        del key, obs, target
        return {"table": jnp.zeros((num_states, num_targets, num_actions), jnp.float32)}

    def index(params, obs):
        del params
        return state_of(obs)

    def target(params, obs, reward):
        del reward
        return index(params, obs)

    def pair_logits(params, src, tgt, policy_logits):
        out = params["table"][src, tgt]
        if policy_modulated:
            out = out + jax.lax.stop_gradient(jax.nn.log_softmax(policy_logits))
        return out

    return StateHindsightModel(init=init, source=index, target=target, pair_logits=pair_logits)


# ----------------------------------------------------------------------------------------------
# Exact (oracle) models: the hindsight of the current policy computed by dynamic programming
# ----------------------------------------------------------------------------------------------
#
# Their inputs are tabular state indices (``Trajectory.state``) and their parameters are not
# learned: the engine recomputes them from the exact MDP for the current policy every update
# (``jaxcredit.exact.ground_truth``).


def state_oracle() -> StateHindsightModel:
    """The exact h_γ(a | s_t, u_k) on indices; params ``{"log_h": [S, U, A]}``: the state
    hindsight (u = s_k, ``hindsight.state_hindsight``) or COCOA's reward hindsight (u = the index
    of the reward value, ``hindsight.reward_hindsight``)."""

    def index(params, obs):
        del params
        return state_of(obs)

    def target(params, obs, reward):
        del reward
        return index(params, obs)

    def pair_logits(params, src, tgt, policy_logits):
        del policy_logits
        return params["log_h"][src, tgt]

    return StateHindsightModel(init=lambda key, obs, num_actions, target=None: {}, source=index,
                               target=target, pair_logits=pair_logits)


def return_oracle() -> ReturnHindsightModel:
    """The exact h(a | s, Z) of the undiscounted return Z.

    params: ``{"bandit": (mdp, pi)}`` for one-step Gaussian bandits (closed form,
    ``hindsight.bandit_return_hindsight``), or ``{"grid": (p_sa, p_s, pi, support)}``, the law of
    the return on a grid (``jaxcredit.exact.return_law``) interpolated at Z.
    """
    from jaxcredit.exact import hindsight, return_law  # noqa: PLC0415

    def logits(params, obs, z, z_normalised, policy_logits):
        del z_normalised, policy_logits
        s = state_of(obs)
        if "bandit" in params:
            mdp, pi = params["bandit"]
            h = hindsight.bandit_return_hindsight(mdp, pi, z)  # [..., S, A]
            h = jnp.take_along_axis(h, s[..., None, None], axis=-2)[..., 0, :]
        else:
            p_sa, p_s, pi, support = params["grid"]
            h = return_law.return_hindsight_at(p_sa, p_s, pi, support, s, z)
        # NaN stays NaN (the exact model of a discounted return does not exist: the engine
        # poisons its parameters): a vectorised max on XLA:CPU may return 1e-30 for
        # max(NaN, 1e-30), which turned the poison into a finite, wrong model.
        return jnp.where(jnp.isnan(h), jnp.nan, jnp.log(jnp.maximum(h, 1e-30)))

    return ReturnHindsightModel(init=lambda key, obs, num_actions: {}, logits=logits)

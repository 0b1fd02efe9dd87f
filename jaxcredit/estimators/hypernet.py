"""COCOA's policy-modulated hindsight network ("hypernet", Meulemans et al. 2023), with the
two-sided gated outputs that switch a term off, and the variants that keep them from dying.

The network is a :class:`~jaxcredit.estimators.hindsight_models.StateHindsightModel` (source,
target and pair-logit functions), so it serves ``hca_state``, ``cocoa_reward`` and
``cocoa_feature`` alike.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcredit.estimators.hindsight_models import StateHindsightModel, _flatten_obs

Array = jax.Array


def relu_gate(y: Array, leak: float = 0.0, floor: float = 0.0) -> Array:
    """relu(y₁) − relu(y₂) of the two halves of the last axis (COCOA's ``relu_gate``): exactly
    0 on a whole region, so a gate can switch a term off; its gradient is 0 there too, so an
    entry negative in both halves for every input stays off for good (experiments/key_to_door,
    "Which coefficient fails"). ``leak`` = α > 0: leaky halves, never 0, never gradient-free.
    ``floor`` = β > 0: the same values as COCOA's, but a half at y ≤ 0 passes gradient β
    (straight through), so an entry that is off can be switched back on by the loss."""
    first, second = jnp.split(y, 2, axis=-1)
    if leak:
        return nn.leaky_relu(first, leak) - nn.leaky_relu(second, leak)
    out = nn.relu(first) - nn.relu(second)
    if floor:  # + β·(y − sg(y)) where y ≤ 0: zero forward, slope β backward
        ghost = jnp.where(y > 0, 0.0, floor * (y - jax.lax.stop_gradient(y)))
        out = out + jnp.subtract(*jnp.split(ghost, 2, axis=-1))
    return out


class _HypernetHead(nn.Module):
    num_actions: int
    hidden: int
    leak: float = 0.0
    floor: float = 0.0
    at_policy: bool = False  # ℓ = G = 0 at initialisation: h = π

    def setup(self):
        self.src = nn.Dense(self.hidden)
        self.tgt = nn.Dense(self.hidden, use_bias=False)
        kernel = nn.initializers.zeros if self.at_policy else nn.linear.default_kernel_init
        self.out = nn.Dense(2 * self.num_actions, kernel_init=kernel)
        self.gate = nn.Dense(4 * self.num_actions ** 2, kernel_init=kernel)

    def __call__(self, x_src: Array, x_tgt: Array, log_pi: Array) -> Array:  # only for init
        return self.head(self.source(x_src), self.target(x_tgt), log_pi)

    def source(self, x: Array) -> Array:
        return self.src(x)

    def target(self, x: Array) -> Array:
        return self.tgt(x)

    def head(self, u: Array, v: Array, log_pi: Array) -> Array:
        z = nn.relu(u + v)
        num_actions = self.num_actions
        gate = relu_gate(self.gate(z), self.leak, self.floor).reshape(
            z.shape[:-1] + (num_actions, 2 * num_actions))
        # log(1 − π_a) as the log-sum of the other actions' probabilities: 1 − π_a rounds to
        # 0 in float32 once π_a is within 6e-8 of 1 (a logit gap of about 17), where this
        # stays exact; the floor only bites with a single action.
        others = jnp.where(jnp.eye(num_actions, dtype=bool), -jnp.inf, log_pi[..., None, :])
        log_not_pi = jnp.maximum(jax.nn.logsumexp(others, axis=-1), jnp.log(1e-30))
        policy_terms = jnp.concatenate([log_pi, log_not_pi], -1)
        return (log_pi + relu_gate(self.out(z), self.leak, self.floor)
                + jnp.einsum("...ab,...b->...a", gate, policy_terms))


def hypernet_hindsight(obs_ndim: int, hidden: int = 256, target_ndim: int = 1,
                       leak: float = 0.0, floor: float = 0.0,
                       at_policy: bool = False) -> StateHindsightModel:
    """COCOA's policy-modulated hindsight network ("hypernet", ``ccoa/networks/models.py``
    53–67 and ``contribution_coefficient.py`` 182–207 of the official code):

        z = relu(W [s_t, u_k] + b)                         (256 units)
        ℓ = relu_gate(W_ℓ z)                               (A outputs)
        G = relu_gate(W_G z)  reshaped [A, 2A]
        log h(·|s_t, u_k) = log_softmax(log π + ℓ + G [log π, log(1 − π)])

    with π(·|s_t) the behaviour policy (stored log-probs, no gradient): G rescales log π and
    log(1 − π) per action, so the model follows a moving policy instead of relearning it.
    Default flax initialisation (haiku's in the official code), so h ≠ π at the start; the
    first layer factored into source and target projections as :func:`state_mlp`. ``leak``,
    ``floor``: :func:`relu_gate`'s variants (not COCOA's, whose entries can die); ``at_policy``:
    ℓ and G start at 0, so h = π before any fit (a ReLU output at 0 learns only with a floor).
    """
    hidden, leak, floor = int(hidden), float(leak), float(floor)

    def inputs(x, ndim):
        return _flatten_obs(x, ndim)

    def init(key, obs, num_actions, target=None):
        x = jnp.reshape(inputs(obs, obs_ndim), (-1, inputs(obs, obs_ndim).shape[-1]))[:1]
        y = jnp.reshape(inputs(target, target_ndim), (-1, inputs(target, target_ndim)
                                                        .shape[-1]))[:1]
        log_pi = jnp.full((1, num_actions), -jnp.log(num_actions), jnp.float32)
        return _HypernetHead(num_actions, hidden, leak, floor, at_policy).init(key, x, y,
                                                                          log_pi)

    def module(params):
        return _HypernetHead(params["params"]["out"]["kernel"].shape[-1] // 2, hidden, leak,
                             floor)

    def source(params, obs):
        return module(params).apply(params, inputs(obs, obs_ndim), method=_HypernetHead.source)

    def target(params, u, reward):
        del reward
        return module(params).apply(params, inputs(u, target_ndim), method=_HypernetHead.target)

    def pair_logits(params, src, tgt, policy_logits):
        log_pi = jax.lax.stop_gradient(jax.nn.log_softmax(policy_logits))
        return module(params).apply(params, src, tgt, log_pi, method=_HypernetHead.head)

    return StateHindsightModel(init=init, source=source, target=target,
                                  pair_logits=pair_logits)

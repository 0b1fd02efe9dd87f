"""RUDDER's return predictor: the LSTM that reads an episode step by step and predicts its
return after every step (Arjona-Medina et al., NeurIPS 2019), and the input it reads at each
step. The redistribution built on it is ``jaxcredit.redistribute.rudder``."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcredit.networks import orthogonal
from jaxcredit.policies import action_features

Array = jax.Array

CELLS = ("lstm", "rudder")


class RudderCell(nn.Module):
    """The RUDDER LSTM cell without forget and output gates (``jaxcredit.redistribute.rudder``'s
    docstring).

    Carry ``(c, h)`` like flax's cells; ``h = c``.
    """

    features: int
    input_gate_bias: float = 0.0

    @nn.compact
    def __call__(self, carry, x):
        c, h = carry
        z = jnp.tanh(nn.Dense(self.features, kernel_init=nn.initializers.normal(0.1),
                              name="cell_input")(x))
        bias = nn.initializers.constant(self.input_gate_bias)
        gate = jax.nn.sigmoid(nn.Dense(self.features, bias_init=bias, name="input_gate")(h))
        c = c + gate * z
        return (c, c), c


class ReturnModel(nn.Module):
    """One step of the return predictor: ``(carry, x [B, D]) -> (carry, g [B])``."""

    features: int = 16
    cell: str = "lstm"
    input_gate_bias: float = 0.0

    @nn.compact
    def __call__(self, carry, x):
        if self.cell == "rudder":
            carry, h = RudderCell(self.features, self.input_gate_bias,
                                  name="rudder_cell")(carry, x)
        else:
            carry, h = nn.OptimizedLSTMCell(self.features, recurrent_kernel_init=orthogonal(),
                                            name="lstm_cell")(carry, x)
        return carry, nn.Dense(1, name="output")(h)[..., 0]


def step_inputs(obs: Array, action: Array, prev_reward: Array, num_actions: int,
            scale: Array, prev_obs: Optional[Array] = None) -> Array:
    """``[..., D]`` model input of a step: flat observation (or with ``prev_obs`` the change
    Δ_t = o_t − o_{t−1}), the action's features (one-hot for a discrete action, the vector
    itself for a continuous one: ``jaxcredit.policies.action_features``), previous reward."""
    batch = prev_reward.shape
    flat = obs.reshape(batch + (-1,)).astype(jnp.float32)
    if prev_obs is not None:
        flat = flat - prev_obs.reshape(batch + (-1,)).astype(jnp.float32)
    return jnp.concatenate([flat, action_features(action, num_actions),
                            (prev_reward / scale)[..., None]], axis=-1)

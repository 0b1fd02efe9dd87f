"""Counterfactual Credit Assignment: critics conditioned on the future, kept blind to the action.

Mesnard, Weber, Viola, Thakoor, Saade, Harutyunyan, Dabney, Stepleton, Heess, Guez, Moulines,
Hutter, Buesing & Munos, "Counterfactual Credit Assignment in Model-Free Reinforcement Learning",
ICML 2021 (arXiv 2011.09464). No official code was released; every choice below that the paper
does not fix is jaxcredit's and is listed in docs/cca.md.

The agent state X_t (the model's own embedding of the observation, a forward GRU over the
window's observations, or an embedding of the recurrent policy's own state, as in the paper) is
joined by a *hindsight statistic* Φ_t, computed by a backward GRU
over what followed step t in its episode (the next observations and the rewards r_t, r_{t+1}, …,
up to the episode's end or the window's). A future-conditional critic Q(X_t, Φ_t, a) then
explains away the luck that came after the action. Conditioning on the future biases the
gradient unless Φ_t carries no information about A_t given X_t; a *hindsight classifier*
h_ω(a | X_t, Φ_t) measures that information and Φ is trained to remove it.

Credit (π = π(·|X_t), the behaviour policy; G_t the return, bootstrapped at time-outs and at the
window's end; V̄(X_t, Φ_t) = Σ_a π(a) Q(X_t, Φ_t, a))::

    FC-PG   (form="fc")    Â_t       = G_t − V̄(X_t, Φ_t)
    CCA-PG  (form="cca")   Â_t(a)    = Q(X_t, Φ_t, a) − V̄(X_t, Φ_t)
                                        + 1[a = A_t] (G_t − Q(X_t, Φ_t, A_t)) / π(A_t)

The all-action credit of CCA-PG, fed to the all-action policy loss −Σ_a π_θ(a) Â(a), gives
the paper's gradient Σ_a ∇π(a) Q(a) + ∇log π(A_t) (G_t − Q(A_t)) (the V̄ term has zero gradient
since Σ_a ∇π(a) = 0). Both forms are unbiased when A_t ⊥ Φ_t | X_t: then
E[G_t | X_t, Φ_t, A_t = a] is what Q estimates and π(·|X_t) is still the law of A_t given
(X_t, Φ_t); the correction term makes CCA-PG unbiased for any Q independent of A_t.

Losses, fitted together by the engine's fitting machinery (one Adam, ``estimator_lr``)::

    L_Q   = ½ (Q(X_t, Φ_t, A_t) − G_t)²                        → Q, Φ, X    (informativeness)
    L_hc  = −log h_ω(A_t | X_t, Φ_t)                            → ω only     (the classifier)
    L_IM  = KL(h_ω(·|X_t, Φ_t) ‖ π(·|X_t))                      → Φ only     (independence)
    L     = mean_t (L_Q + L_hc + β · L_IM)

L_IM is an estimate of the conditional mutual information I(A_t; Φ_t | X_t) with h_ω in place of
the true posterior P(A_t | X_t, Φ_t); the gradients are stopped so that the classifier learns to
read the action from Φ and Φ learns to hide it (a simultaneous min-max, as the paper trains its
classifier and statistic together). The agent's critic V(s_t) is trained on the λ-return, as
with every estimator.
"""

from __future__ import annotations

from typing import Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.hca_return import conditioning_return, value_target
from jaxcredit.networks import MLP
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

FORMS = ("cca", "fc")
AGENT_STATES = ("mlp", "gru", "agent")
FUTURE_INPUTS = ("observation_reward", "observation")


# ------------------------------------------------------------------------------------------
# The credit, as pure functions
# ------------------------------------------------------------------------------------------


def future_conditional_baseline(q: Array, pi: Array) -> Array:
    """V̄(X_t, Φ_t) = Σ_a π(a|X_t) Q(X_t, Φ_t, a): ``[T, *batch]`` from ``[T, *batch, A]``."""
    chex.assert_equal_shape((q, pi))
    return jnp.sum(pi * q, axis=-1)


def fc_advantage(g: Array, q: Array, pi: Array) -> Array:
    """FC-PG's credit of the action taken: Â_t = G_t − Σ_a π(a|X_t) Q(X_t, Φ_t, a)."""
    chex.assert_equal_shape((g, q[..., 0]))
    return g - future_conditional_baseline(q, pi)


def cca_all_action_advantage(g: Array, q: Array, pi: Array, action: Array) -> Array:
    """CCA-PG's all-action credit ``[T, *batch, A]``:
    Â(a) = Q(a) − Σ_b π(b) Q(b) + 1[a = A_t] (G_t − Q(A_t)) / π(A_t)."""
    chex.assert_equal_shape((g, action))
    chex.assert_equal_shape((q, pi))
    taken = jax.nn.one_hot(action, q.shape[-1], dtype=q.dtype)
    q_a = jnp.sum(taken * q, axis=-1)
    pi_a = jnp.sum(taken * pi, axis=-1)
    correction = (g - q_a) / pi_a
    return q - future_conditional_baseline(q, pi)[..., None] + taken * correction[..., None]


def independence_kl(log_h: Array, log_pi: Array) -> Array:
    """KL(h(·|X_t, Φ_t) ‖ π(·|X_t)) = Σ_a h(a) (log h(a) − log π(a)), ``[T, *batch]``: the
    classifier's estimate of how much Φ_t tells about A_t beyond X_t."""
    chex.assert_equal_shape((log_h, log_pi))
    return jnp.sum(jnp.exp(log_h) * (log_h - log_pi), axis=-1)


# ------------------------------------------------------------------------------------------
# The model: agent state X, hindsight statistic Φ, critic Q and classifier h
# ------------------------------------------------------------------------------------------


class RecurrentSummary(nn.Module):
    """A GRU run over time (axis 0) with its carry zeroed at episode boundaries.

    Forward (``reverse=False``): the state at t summarises steps ≤ t of t's episode; ``reset[t]``
    marks an episode starting at t. Backward (``reverse=True``): the state at t summarises steps
    ≥ t of t's episode; ``reset[t]`` marks an episode ending at t. The window's edges start the
    carry at zero.
    """

    size: int
    reverse: bool = False

    @nn.compact
    def __call__(self, inputs: Array, reset: Array) -> Array:
        cell = nn.GRUCell(self.size, name="cell")
        carry = jnp.zeros(inputs.shape[1:-1] + (self.size,), inputs.dtype)
        scan = nn.scan(lambda module, c, xs: _gru_step(module, c, xs), variable_broadcast="params",
                       split_rngs={"params": False}, reverse=self.reverse)
        _, states = scan(cell, carry, (inputs, reset))
        return states


def _gru_step(cell: nn.GRUCell, carry: Array, xs: tuple[Array, Array]):
    x, reset = xs
    carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
    carry, out = cell(carry, x)
    return carry, out


class CCAModel(nn.Module):
    """X_t, Φ_t and the heads. ``__call__`` returns ``(x, phi)``; ``q`` and ``classifier_logits``
    read them (called with ``method=``)."""

    num_actions: int
    hidden: Sequence[int]
    stat_size: int
    agent_state: str = "mlp"

    def setup(self):
        width = self.hidden[0] if self.hidden else self.stat_size
        self.embed = MLP(tuple(self.hidden[1:]), width, activation="relu", init="lecun")
        self.forward = RecurrentSummary(width) if self.agent_state == "gru" else None
        self.future_embed = MLP((), self.stat_size, activation="relu", init="lecun")
        self.backward = RecurrentSummary(self.stat_size, reverse=True)
        self.q_head = MLP(tuple(self.hidden), self.num_actions, activation="relu", init="lecun")
        self.classifier = MLP(tuple(self.hidden), self.num_actions, activation="relu",
                              init="lecun")

    def __call__(self, obs: Array, future: Array, first: Array, done: Array):
        x = self.embed(obs)
        if self.forward is not None:
            x = self.forward(x, first)
        phi = self.backward(jax.nn.relu(self.future_embed(future)), done)
        return x, phi

    def everything(self, obs: Array, future: Array, first: Array, done: Array):
        """Every part once (what ``init`` traces, so that all parameters are created)."""
        x, phi = self(obs, future, first, done)
        return self.q(x, phi), self.classifier_logits(x, phi)

    def q(self, x: Array, phi: Array) -> Array:
        return self.q_head(jnp.concatenate([x, phi], axis=-1))

    def classifier_logits(self, x: Array, phi: Array) -> Array:
        return self.classifier(jnp.concatenate([x, phi], axis=-1))


def window_inputs(trajectory: Trajectory, future_inputs: str = "observation_reward",
                  agent_state: str = "mlp") -> tuple[Array, Array, Array, Array]:
    """``(obs, future, first, done)`` of a time-major window ``[T, B, ...]``: the flattened
    observation (with ``agent_state="agent"`` the agent's recurrent state instead); what the
    hindsight statistic reads of step t, the next observation and (by default) the reward r_t;
    episode starts (after an end at t − 1; the window's first step starts a carry at zero
    anyway) and ends (terminated or truncated)."""
    T, B = trajectory.action.shape[:2]
    obs = trajectory.obs.reshape((T, B, -1)).astype(jnp.float32)
    if agent_state == "agent":
        if trajectory.agent_state is None:
            raise ValueError("cca with agent_state=agent reads the agent's recurrent state, and "
                             "the trajectory has none")
        obs = trajectory.agent_state.astype(jnp.float32)
    future = trajectory.next_obs.reshape((T, B, -1)).astype(jnp.float32)
    if future_inputs == "observation_reward":
        future = jnp.concatenate([future, trajectory.reward[..., None].astype(jnp.float32)], -1)
    done = trajectory.done
    first = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])
    return obs, future, first, done


# ------------------------------------------------------------------------------------------
# The estimator
# ------------------------------------------------------------------------------------------


def cca(form: str = "cca", hidden: Sequence[int] = (64,), stat_size: int = 32,
        independence_weight: float = 1.0, agent_state: str = "mlp",
        return_kind: str = "mc", future_inputs: str = "observation_reward") -> Estimator:
    """Counterfactual Credit Assignment (Mesnard et al. 2021): a critic Q(X_t, Φ_t, a)
    conditioned on a backward summary Φ_t of the future, with Φ trained to carry no
    information about the action (module docstring).

    Args:
      form: ``"cca"`` (CCA-PG, all-action credit ``[T, *batch, A]``) or ``"fc"`` (FC-PG,
        the credit of the action taken, G_t − V̄(X_t, Φ_t)).
      hidden: widths of the observation embedding (its first entry is the size of X) and of the
        Q and classifier heads.
      stat_size: size of Φ (the backward GRU's state).
      independence_weight: β, the weight of the independence loss.
      agent_state: X_t as an embedding of the observation (``"mlp"``), a forward GRU over the
        window's observations, reset at episode starts (``"gru"``; a policy with memory sees
        more than one observation), or an embedding of the recurrent policy's own state
        (``"agent"``, ``Trajectory.agent_state``: the paper's X_t, the state π reads; needs
        ``--policy gru|lstm|lru``; read under stop_gradient, so L_Q does not train the core).
      return_kind: G_t is the Monte-Carlo return (``"mc"``) or the λ-return (``"lambda"``), both
        bootstrapped from the agent's V at time-outs and the window's end.
      future_inputs: what Φ reads of each later step: the next observation and the reward
        (``"observation_reward"``) or the next observation only (``"observation"``; for tasks
        where the reward is the outcome itself, docs/cca.md).
    """
    if form not in FORMS:
        raise ValueError(f"cca: form must be one of {', '.join(FORMS)}, got {form!r}")
    if agent_state not in AGENT_STATES:
        raise ValueError(f"cca: agent_state must be one of {', '.join(AGENT_STATES)}, got "
                         f"{agent_state!r}")
    if future_inputs not in FUTURE_INPUTS:
        raise ValueError(f"cca: future_inputs must be one of {', '.join(FUTURE_INPUTS)}, got "
                         f"{future_inputs!r}")
    if return_kind not in ("mc", "lambda"):
        raise ValueError(f"cca: return_kind must be mc or lambda, got {return_kind!r}")
    if isinstance(hidden, int):
        hidden = (hidden,)
    if isinstance(hidden, str):
        hidden = tuple(int(w) for w in hidden.split(",") if w.strip())
    hidden, stat_size = tuple(int(w) for w in hidden), int(stat_size)
    if not hidden or min(hidden) < 1 or stat_size < 1:
        raise ValueError(f"cca: hidden and stat_size must be positive, got {hidden}, "
                         f"{stat_size}")
    beta = float(independence_weight)
    if beta < 0:
        raise ValueError(f"cca: independence_weight must be non-negative, got {beta}")

    def model(num_actions: int) -> CCAModel:
        return CCAModel(num_actions, hidden, stat_size, agent_state)

    def init(key: Array, example: Trajectory):
        return model(example.logits.shape[-1]).init(
            key, *window_inputs(example, future_inputs, agent_state), method=CCAModel.everything)

    def parts(params, trajectory: Trajectory, hparams):
        net = model(trajectory.logits.shape[-1])
        x, phi = net.apply(params, *window_inputs(trajectory, future_inputs, agent_state))
        g = conditioning_return(trajectory, hparams, return_kind)
        log_pi = jax.nn.log_softmax(jax.lax.stop_gradient(trajectory.logits))
        return net, x, phi, g, log_pi

    def assign(params, trajectory: Trajectory, hparams, key=None) -> Credit:
        del key
        net, x, phi, g, log_pi = parts(params, trajectory, hparams)
        q = net.apply(params, x, phi, method=CCAModel.q)
        pi = jnp.exp(log_pi)
        if form == "cca":
            advantage = cca_all_action_advantage(g, q, pi, trajectory.action)
        else:
            advantage = fc_advantage(g, q, pi)
        log_h = jax.nn.log_softmax(net.apply(params, x, phi, method=CCAModel.classifier_logits))
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=value_target(trajectory, hparams),
            diagnostics={"independence": independence_kl(log_h, log_pi).mean(),
                         "advantage_std": advantage.std()})

    def loss(params, trajectory: Trajectory, hparams, key=None):
        del key
        net, x, phi, g, log_pi = parts(params, trajectory, hparams)
        q = net.apply(params, x, phi, method=CCAModel.q)
        q_a = jnp.take_along_axis(q, trajectory.action[..., None], axis=-1)[..., 0]
        q_loss = 0.5 * jnp.mean(jnp.square(q_a - g))
        # The classifier learns from fixed inputs; Φ learns against a fixed classifier.
        logits_fit = net.apply(params, jax.lax.stop_gradient(x), jax.lax.stop_gradient(phi),
                               method=CCAModel.classifier_logits)
        log_h_fit = jax.nn.log_softmax(logits_fit)
        classifier_loss = -jnp.mean(jnp.take_along_axis(
            log_h_fit, trajectory.action[..., None], axis=-1))
        logits_hide = net.apply(jax.lax.stop_gradient(params), jax.lax.stop_gradient(x), phi,
                                method=CCAModel.classifier_logits)
        independence = jnp.mean(independence_kl(jax.nn.log_softmax(logits_hide), log_pi))
        total = q_loss + classifier_loss + beta * independence
        return total, {"q_loss": q_loss, "classifier_loss": classifier_loss,
                       "independence": independence}

    return Estimator(name="cca", assign=assign, init=init, loss=loss,
                     all_action=form == "cca", learned=True,
                     reads_agent_state=agent_state == "agent")

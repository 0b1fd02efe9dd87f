"""Outcome and process reward models (Lightman et al., 2023, "Let's Verify Step by Step").

Both models are the same network, a :class:`StepScorer` that reads one step of a solution as the
agent saw it, ``(obs_t, a_t)`` (on ArithmeticChain the observation holds the problem and the
solution so far, so the pair is the whole prefix through step t), and outputs a logit. They
differ only in their labels:

* **ORM** (outcome supervision): every step of a solution is labelled with whether the solution's
  *final answer* is correct (Lightman's ORM is trained at every token on the final label); the
  solution's score is the probability at its last step.
* **PRM** (process supervision): each step is labelled with whether it is correct; labelling
  stops at the first error (later steps carry no label, as in PRM800K). The solution's score
  aggregates the step probabilities p_k::

      score = Π_k p_k    (``product``, Lightman's choice: the probability that every step is right)
      score = min_k p_k  (``min``: the weakest step)

The labels come from a *labeller*, ``ArithmeticChain.step_judgement`` /
:func:`~jaxcredit.envs.arithmetic_chain.step_consistent`, graded by
``ArithmeticChain.graded_solutions``: the exact check, or a miscalibrated one
(``mul_as_add``, ``trust_mul``) that errs in a stated, systematic way. A PRM fitted on a
miscalibrated labeller's labels learns its bias; the outcome labels are always exact.

The loss is the binary cross-entropy on the labelled steps; fitting is plain Adam on random
minibatches of solutions, scanned inside one compiled function (:func:`fit`).
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


Array = jax.Array

KINDS = ("prm", "orm")
AGGREGATIONS = ("product", "min")


class StepScorer(nn.Module):
    """``(obs [..., D], action [...]) -> logit [...]``: an MLP over ``[obs, one_hot(action)]``."""

    num_actions: int
    hidden: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs: Array, action: Array) -> Array:
        x = jnp.concatenate([obs.astype(jnp.float32),
                             jax.nn.one_hot(action, self.num_actions, dtype=jnp.float32)], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(1)(x)[..., 0]




def step_logits(scorer: StepScorer, params, obs: Array, action: Array) -> Array:
    return scorer.apply(params, obs, action)


def aggregate(step_probs: Array, how: str = "product") -> Array:
    """A solution's PRM score from its step probabilities ``[..., K]`` (module docstring)."""
    if how == "product":
        return jnp.prod(step_probs, axis=-1)
    if how == "min":
        return jnp.min(step_probs, axis=-1)
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {how!r}")


def solution_scores(scorer: StepScorer, params, kind: str, obs: Array, action: Array,
                    how: str = "product") -> Array:
    """``[...]`` scores of solutions given as steps ``obs [..., K, D]``, ``action [..., K]``."""
    probs = jax.nn.sigmoid(step_logits(scorer, params, obs, action))
    if kind == "orm":
        return probs[..., -1]
    if kind == "prm":
        return aggregate(probs, how)
    raise ValueError(f"reward model kind must be one of {', '.join(KINDS)}, got {kind!r}")


def targets(kind: str, data: Any) -> tuple[Array, Array]:
    """``(target [N, K], mask [N, K])`` of a kind of model (module docstring)."""
    if kind == "prm":
        return data.consistent.astype(jnp.float32), data.labelled.astype(jnp.float32)
    if kind == "orm":
        target = jnp.broadcast_to(data.correct[:, None], data.action.shape)
        return target.astype(jnp.float32), jnp.ones(data.action.shape, jnp.float32)
    raise ValueError(f"reward model kind must be one of {', '.join(KINDS)}, got {kind!r}")


def masked_bce(logits: Array, target: Array, mask: Array) -> Array:
    """Mean binary cross-entropy over the steps where ``mask`` is 1."""
    losses = optax.sigmoid_binary_cross_entropy(logits, target)
    return jnp.sum(losses * mask) / jnp.maximum(mask.sum(), 1.0)


def fit(key: Array, scorer: StepScorer, kind: str, data: Any, steps: int,
        batch_size: int = 256, learning_rate: float = 1e-3, params=None):
    """Fits a reward model of ``kind`` on ``data`` with Adam; returns ``(params, loss [steps])``.

    Jittable (``scorer``, ``kind``, ``steps`` and ``batch_size`` static). ``params``: start from
    these instead of a fresh initialisation.
    """
    target, mask = targets(kind, data)
    init_key, run_key = jax.random.split(key)
    if params is None:
        params = scorer.init(init_key, data.obs[:1, 0], data.action[:1, 0])
    optimiser = optax.adam(learning_rate)

    def step(carry, k):
        params, opt_state = carry
        rows = jax.random.randint(k, (batch_size,), 0, data.action.shape[0])

        def loss_fn(p):
            return masked_bce(scorer.apply(p, data.obs[rows], data.action[rows]),
                              target[rows], mask[rows])

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    (params, _), losses = jax.lax.scan(step, (params, optimiser.init(params)),
                                       jax.random.split(run_key, steps))
    return params, losses


def step_accuracy(scorer: StepScorer, params, data: Any,
                  reference: Any = None) -> dict[str, Array]:
    """How well a PRM's steps agree with labels: ``labelled_accuracy`` (against ``data``'s own
    labels on labelled steps) and, given the exact ``reference`` labels of the same solutions,
    ``exact_accuracy`` (against the exact judgement on the exactly labelled steps)."""
    predicted = step_logits(scorer, params, data.obs, data.action) > 0
    out = {"labelled_accuracy": jnp.sum((predicted == data.consistent) * data.labelled)
           / jnp.maximum(data.labelled.sum(), 1)}
    if reference is not None:
        out["exact_accuracy"] = (jnp.sum((predicted == reference.consistent) * reference.labelled)
                                 / jnp.maximum(reference.labelled.sum(), 1))
    return out

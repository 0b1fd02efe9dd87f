"""Turn-level belief credit: a Beta–Bernoulli belief over which commands help, revised after every
episode from its pass/fail bit alone.

Model. For task instance i and command a, let p_{i,a} be the probability that an episode of
instance i passes given that it issued a (at least once), and p_i the probability that an episode
of instance i passes, both under the recent policies. Each gets an independent Beta(κ, κ) prior.

Update (Bayes' rule for Bernoulli outcomes, with forgetting). After a window, with outcomes
R_n ∈ [0, 1] of its episodes (instance i_n, commands used U_n)::

    α_{i,a} ← η α_{i,a} + Σ_n [i_n = i][a ∈ U_n] R_n
    β_{i,a} ← η β_{i,a} + Σ_n [i_n = i][a ∈ U_n] (1 − R_n)
    α_i     ← η α_i     + Σ_n [i_n = i] R_n
    β_i     ← η β_i     + Σ_n [i_n = i] (1 − R_n)

η = 1 is the exact posterior over all episodes so far; η < 1 forgets old policies' episodes
(effective memory 1/(1 − η) windows), since p_{i,a} moves as the policy learns.

Credit. The step that issued command a_t in an episode of instance i gets

    c_t = E[p_{i,a_t}] − E[p_i]
        = (α_{i,a_t} + κ)/(α_{i,a_t} + β_{i,a_t} + 2κ) − (α_i + κ)/(α_i + β_i + 2κ),

a tabular Monte-Carlo Q − V shrunk toward the prior: positive for commands whose episodes pass more
often than the instance's average (necessary ones), negative for commands whose episodes fail
(fatal ones), ≈ 0 for irrelevant ones. The belief is about the event "a was issued", and the turn
that made it happen is a's *first* issue in the episode, so only that turn gets c_t; repeats get 0
(``first_use_only=False`` credits every issue: on CommandChain that rewards repeating a necessary
command, which changes nothing, and the policy collapses onto one command: measured in
docs/agent_credit.md). Credit is assigned with the belief held *before* the window's
own outcomes are counted (the engine calls ``update`` after ``assign``), so a step's credit does not
contain its own episode's outcome and a failed episode's correct steps still get positive credit.

It keys on (instance, command), not on the turn index: "which commands of this task help",
which ignores order (on ``ordered`` CommandChain an out-of-order solution command still gets
the solution command's credit). It needs instances that repeat (a pool, CommandChain's
``num_instances``) and the ``instance`` entry of ``Trajectory.extras``. The literature closest to
it scores turns by a belief change (ΔBelief-RL) or a posterior ratio (PBSD); no paper found
specifies this rule, so it is jaxcredit's statement of the idea, documented in docs/agent_credit.md.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.group import episode_outcome, first_episode_mask
from jaxcredit.types import Credit, Trajectory

Array = jax.Array


def commands_used(action: Array, mask: Array, num_actions: int) -> Array:
    """``[N, A]`` True where the column's masked steps issued the command."""
    hits = jax.nn.one_hot(action, num_actions, dtype=jnp.float32) * mask[..., None]
    return hits.sum(axis=0) > 0


def belief_update(counts: dict, instance: Array, used: Array, outcome: Array,
                  decay: float) -> dict:
    """One recursive step of the Beta–Bernoulli belief (module docstring).

    Args:
      counts: ``alpha_qa``/``beta_qa`` ``[P, A]`` and ``alpha_v``/``beta_v`` ``[P]``.
      instance: ``[N]`` int instance of each episode; used: ``[N, A]`` bool; outcome: ``[N]``.
      decay: η in (0, 1].
    """
    outcome = jnp.clip(outcome, 0.0, 1.0)
    P = counts["alpha_v"].shape[0]
    onehot = jax.nn.one_hot(instance, P, dtype=jnp.float32)  # [N, P]
    used = used.astype(jnp.float32)
    return {
        "alpha_qa": decay * counts["alpha_qa"] + jnp.einsum("np,na,n->pa", onehot, used, outcome),
        "beta_qa": decay * counts["beta_qa"] + jnp.einsum("np,na,n->pa", onehot, used,
                                                          1.0 - outcome),
        "alpha_v": decay * counts["alpha_v"] + onehot.T @ outcome,
        "beta_v": decay * counts["beta_v"] + onehot.T @ (1.0 - outcome),
    }


def posterior_means(counts: dict, prior: float) -> tuple[Array, Array]:
    """``(E[p_{i,a}] [P, A], E[p_i] [P])`` under Beta(prior, prior) priors."""
    q = (counts["alpha_qa"] + prior) / (counts["alpha_qa"] + counts["beta_qa"] + 2 * prior)
    v = (counts["alpha_v"] + prior) / (counts["alpha_v"] + counts["beta_v"] + 2 * prior)
    return q, v


def _instance(trajectory: Trajectory) -> Array:
    if trajectory.extras is None or "instance" not in trajectory.extras:
        raise ValueError("the belief estimator needs the environment's per-step 'instance' "
                         "(Trajectory.extras), e.g. CommandChain's")
    return trajectory.extras["instance"][0]


def first_uses(action: Array, num_actions: int) -> Array:
    """``[T, N]`` True where a_t is issued for the first time in its column."""
    hits = jax.nn.one_hot(action, num_actions, dtype=jnp.int32)
    before = jnp.cumsum(hits, axis=0) - hits
    return jnp.take_along_axis(before, action[..., None], axis=-1)[..., 0] == 0


def belief(env: Any = None, prior: float = 1.0, decay: float = 0.95,
           first_use_only: bool = True) -> Estimator:
    """Beta–Bernoulli belief over which commands help: turn credit c_t = E[p_{i,a_t}] − E[p_i]
    (module docstring).

    Args:
      env: the environment (its ``num_instances`` and ``num_actions`` size the tables).
      prior: κ of the Beta(κ, κ) priors, > 0.
      decay: η in (0, 1], the forgetting factor per window.
      first_use_only: credit only the first issue of each command in an episode.
    """
    if env is None or not hasattr(env, "num_instances"):
        raise ValueError("the belief estimator needs an environment with a pool of task "
                         "instances (num_instances), e.g. CommandChain")
    if not prior > 0:
        raise ValueError(f"belief: prior must be positive, got {prior!r}")
    if not 0 < decay <= 1:
        raise ValueError(f"belief: decay must lie in (0, 1], got {decay!r}")
    P, A = int(env.num_instances), int(env.num_actions)

    def init(key: Array, example: Trajectory) -> dict:
        del key, example
        return {"alpha_qa": jnp.zeros((P, A)), "beta_qa": jnp.zeros((P, A)),
                "alpha_v": jnp.zeros((P,)), "beta_v": jnp.zeros((P,))}

    def assign(params: dict, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del hparams, key
        mask = first_episode_mask(trajectory.done)
        instance = _instance(trajectory)
        q, v = posterior_means(params, prior)
        credit = q[instance[None, :], trajectory.action] - v[instance][None, :]
        if first_use_only:
            mask = mask & first_uses(trajectory.action, A)
        advantage = jnp.where(mask, credit, 0.0)
        outcome = episode_outcome(trajectory.reward, trajectory.done)
        return Credit(advantage=advantage, value_target=jnp.where(mask, outcome[None, :], 0.0),
                      diagnostics={"advantage_mean": advantage.mean(),
                                   "advantage_std": advantage.std(),
                                   "belief_episodes": params["alpha_v"].sum()
                                   + params["beta_v"].sum()})

    def update(params: dict, trajectory: Trajectory, hparams: Any) -> dict:
        del hparams
        mask = first_episode_mask(trajectory.done)
        return belief_update(params, _instance(trajectory),
                             commands_used(trajectory.action, mask, A),
                             episode_outcome(trajectory.reward, trajectory.done), decay)

    return Estimator(name="belief", assign=assign, init=init, update=update,
                     episode_windows=True)

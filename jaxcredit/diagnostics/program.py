"""The diagnostic as one compiled call: episodes of one policy, every estimator's credit, metrics.

For a softmax-tabular policy θ ``[S, A]`` on an environment with exact ground truth, the program

1. samples a fitting batch and an evaluation batch of episodes (:func:`sample_episodes`);
2. fits each learned estimator's own model on the fitting batch (:func:`fit_hindsight`), or, with
   ``hindsight="exact"``, replaces the estimator by its exact twin (``estimator.oracle()``);
3. assigns credit on the evaluation batch with every estimator;
4. reduces it to the gradient statistics (:mod:`.gradients`), the credit map (:mod:`.credit_map`)
   and, for a learned model, its KL divergence to the exact one at the conditioning points the
   estimator uses (``kl_to_exact``, as ``estimator/kl_to_exact`` in training).

Exact models come the engine's way: an estimator declares the model it approximates
(``estimator.exact_model``: ``"state_hindsight"``, ``"return_hindsight"`` or
``"reward_hindsight"``), its twin built with
``model="oracle"`` reads the tabular state (``Trajectory.state``), and its parameters are the DP
tables of the current policy from ``jaxcredit.exact.ground_truth.exact_model_params``. An oracle
can also be asked for by name, e.g. ``hca_return:model=oracle``. The exact return hindsight is
that of the undiscounted return (γ = 1) and needs the law of the return on a grid, which
``make_ground_truth`` plans for deterministic, discrete and Gaussian rewards alike; it is refused
where the grid would be too large (GridWorld-v1, say).

The policy's observation is the tabular state as a one-hot vector, also where the environment's
own observation is aliased (DelayedEffect): the diagnostic measures credit, not partial
observability. The critic is the exact V^π (or zero, ``critic="zero"``); ``reinforce`` is the
Monte-Carlo return without a baseline (the ``mc`` estimator with V ≡ 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import envs
from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.agents.config import Hparams
from jaxcredit.diagnostics.credit_map import credit_map
from jaxcredit.diagnostics.gradients import gradient_statistics, per_trajectory_gradients
from jaxcredit.diagnostics.specs import EstimatorSpec, parse_specs
from jaxcredit.exact import tabular
from jaxcredit.estimators.base import Estimator
from jaxcredit.fitting import FitSchedule, fit, init_fit_state
from jaxcredit.types import Trajectory

Array = jax.Array

DEFAULT_ESTIMATORS = ("reinforce", "mc", "gae", "hca_return", "hca_state", "c2a2c")
DEFAULT_POLICY_SCALE = 0.5
# Episode cap of an environment without a time limit of its own.
DEFAULT_MAX_STEPS = 100


@dataclasses.dataclass(frozen=True)
class DiagnoseConfig:
    """What fixes the compiled diagnostic (every field is a ``jaxcredit diagnose`` flag)."""

    env: str = "DelayedEffect"
    """environment with exact ground truth (Shortcut, DelayedEffect, AmbiguousBandit, TreeMDP,
    KeyToDoor, ...; jaxcredit list envs)"""
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    """environment options, e.g. n=10 or sigma=1"""
    estimators: tuple[str, ...] = DEFAULT_ESTIMATORS
    """estimator specs NAME[:KEY=VALUE...], comma- or space-separated, e.g. gae
    hca_return:form=all_action hca_return:model=oracle; reinforce is the Monte-Carlo return
    without a baseline"""
    num_trajectories: int = 4096
    """M episodes behind the gradient statistics"""
    num_fit: int = 1024
    """episodes of the separate batch on which learned models are fitted"""
    fit_steps: int = 300
    """full-batch Adam steps of the fit"""
    fit_lr: float = 3e-3
    """Adam learning rate of the fit"""
    hindsight: Literal["learned", "exact"] = "learned"
    """learned: fit each estimator's own model; exact: use its exact twin (the DP hindsight)"""
    critic: Literal["exact", "zero"] = "exact"
    """the baseline V of the credit: exact V^π by DP, or zero"""
    gamma: float = 1.0
    """discount γ of the objective and of the credit"""
    lambda_: float = 0.95
    """λ of GAE and of λ-returns"""


@dataclasses.dataclass(frozen=True)
class Row:
    """How one estimator spec is run.

    Attributes:
      spec: the spec as given.
      estimator: the estimator that assigns the credit: a learned one (its model is fitted on
        the fitting batch), a parameter-free one, or an exact twin.
      twin: the exact twin of a learned model, for ``kl_to_exact`` (None where unavailable).
    """

    spec: EstimatorSpec
    estimator: Estimator
    twin: Optional[Estimator]


def validate(config: DiagnoseConfig) -> Hparams:
    """The hyper-parameters of ``config``; a one-line ValueError on anything out of range."""
    for name in ("num_trajectories", "num_fit"):
        if getattr(config, name) < 2:
            raise ValueError(f"{name} must be at least 2, got {getattr(config, name)}")
    if config.fit_steps < 0:
        raise ValueError(f"fit_steps must be >= 0, got {config.fit_steps}")
    if not config.fit_lr > 0:
        raise ValueError(f"fit_lr must be positive, got {config.fit_lr}")
    if config.hindsight not in ("learned", "exact"):
        raise ValueError(f"hindsight must be learned or exact, got {config.hindsight!r}")
    if config.critic not in ("exact", "zero"):
        raise ValueError(f"critic must be exact or zero, got {config.critic!r}")
    labels = [spec.label for spec in parse_specs(config.estimators)]
    if not labels:
        raise ValueError("no estimators given")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"estimator(s) given twice: {', '.join(repeated)}")
    return Hparams.create(gamma=config.gamma, lambda_=config.lambda_)


def tabular_env(name: str, env_kwargs=()) -> tuple[Any, Any]:
    """``(env, env_params)`` of an environment with exact ground truth, else a ValueError."""
    env, env_params = envs.make(name, **dict(env_kwargs))
    if not envs.has_ground_truth(env):
        raise ValueError(f"environment {name!r} has no exact tabular MDP; the diagnostics need "
                         "one (e.g. Shortcut, DelayedEffect, AmbiguousBandit, TreeMDP, KeyToDoor)")
    return env, env_params


def plan_rows(specs: tuple[EstimatorSpec, ...], env: Any, env_params: Any, hindsight: str,
              gamma: float) -> tuple[list[Row], gt_lib.GroundTruth]:
    """Builds every estimator and the ground truth it needs (outside the compiled program).

    Raises a one-line ValueError where an estimator's exact model is required (an oracle, or
    ``hindsight="exact"``) but cannot be computed.
    """
    estimators = [spec.build(env, env_params) for spec in specs]
    # A kind exact only for γ = 1 is not planned at another γ (exact_unavailable says why).
    gt = gt_lib.make_ground_truth(env, env_params, [
        e.exact_model for e in estimators if e.exact_model
        and (gamma == 1.0 or not gt_lib.exact_model(e.exact_model).undiscounted_only)])
    rows = []
    for spec, estimator in zip(specs, estimators):
        if hindsight == "exact" and estimator.learned:
            if estimator.oracle is None:
                raise ValueError(f"estimator {spec.label!r} has no exact model to stand in for "
                                 "its learned one; use --hindsight learned")
            estimator = estimator.oracle()
        if estimator.is_oracle:
            why = gt_lib.exact_unavailable(estimator.exact_model, gt, gamma)
            if why:
                raise ValueError(f"estimator {spec.label!r}: {why}")
        twin = None
        if (estimator.learned and estimator.oracle is not None and estimator.hindsight is not None
                and not gt_lib.exact_unavailable(estimator.exact_model, gt, gamma)):
            twin = estimator.oracle()
        rows.append(Row(spec=spec, estimator=estimator, twin=twin))
    return rows, gt


def sample_episodes(mdp: tabular.TabularMDP, pi: Array, key: Array, num_episodes: int,
                    max_steps: int, reward_law=None) -> tabular.EpisodeBatch:
    """Episodes of π in the MDP (``tabular.sample_episodes``), with rewards that follow the
    environment's exact discrete law where it has one (``env.reward_law``).

    The tabular MDP only holds each reward's mean and variance and samples it as a Gaussian;
    a return-conditioned exact model is the law of the environment's own return (KeyToDoor's
    apples pay 0.1 or 0.9, never 0.43), so the diagnostic draws the rewards it was made for.
    """
    batch = tabular.sample_episodes(mdp, pi, key, num_episodes, max_steps)
    if reward_law is None:
        return batch
    values, probs = reward_law
    law = (probs[batch.state, batch.action] if probs.ndim == 3
           else probs[batch.state, batch.action, batch.next_state])  # [T, N, J]
    atom = jax.random.categorical(jax.random.fold_in(key, 1), jnp.log(law))
    return batch.replace(reward=jnp.where(batch.valid, values[atom], 0.0))


def episodes_to_trajectory(
    mdp: tabular.TabularMDP, pi: Array, batch: tabular.EpisodeBatch, values: Array
) -> Trajectory:
    """An :class:`EpisodeBatch` as a time-major :class:`Trajectory`: one-hot state observations,
    the tabular ``state`` (what exact models read) and the critic ``values`` ``[S]``.

    Steps after an episode's end (``valid`` False) repeat its terminal state with zero reward: a
    zero-reward tail that no estimator credits (and that the gradients mask anyway).
    """
    log_pi = jnp.log(jnp.maximum(pi, 1e-30))
    logits = log_pi[batch.state]
    return Trajectory(
        obs=jax.nn.one_hot(batch.state, mdp.num_states, dtype=jnp.float32),
        action=batch.action,
        reward=batch.reward,
        terminated=batch.terminated,
        truncated=batch.truncated,
        value=values[batch.state],
        next_value=values[batch.next_state] * (1.0 - batch.terminated),
        log_prob=jnp.take_along_axis(logits, batch.action[..., None], axis=-1)[..., 0],
        logits=logits,
        next_obs=jax.nn.one_hot(batch.next_state, mdp.num_states, dtype=jnp.float32),
        state=batch.state.astype(jnp.int32),
    )


def fit_hindsight(estimator: Estimator, params: Any, trajectory: Trajectory, hparams: Any,
                  steps: int, learning_rate: float, key: Array) -> tuple[Any, Array]:
    """Fits a learned estimator's model by ``steps`` full-batch Adam steps on its own ``loss``.

    It is the engine's fitting (``jaxcredit.fitting.fit``) with one minibatch (the whole batch)
    and no gradient clipping. Returns the fitted params and the loss after the fit.
    """
    fit_key, loss_key = jax.random.split(key)
    schedule = FitSchedule(steps=steps)
    state = init_fit_state(params, trajectory, schedule)
    state, _ = fit(estimator.loss, state, trajectory, hparams, jnp.float32(learning_rate),
                   jnp.float32(jnp.inf), fit_key, schedule)
    return state.params, estimator.loss(state.params, trajectory, hparams, loss_key)[0]


def random_policy(key: Array, mdp: tabular.TabularMDP, scale: float) -> Array:
    """Policy logits θ ~ N(0, scale²) per (state, action); scale 0 is the uniform policy."""
    return scale * jax.random.normal(key, (mdp.num_states, mdp.num_actions), jnp.float32)


def make_diagnose(config: DiagnoseConfig):
    """Builds ``run(key, theta) -> results``, one jitted program for a policy θ ``[S, A]``.

    Returns ``(run, mdp)``. ``results[label]`` holds the gradient statistics, ``credit_map``,
    ``fit_loss`` (the model's loss after fitting; NaN without a fitted model), ``kl_to_exact``
    (NaN where there is no learned model or no exact one) and the estimator's own
    ``diagnostics``; ``results["_true_gradient_norm"]`` is ‖∇J‖ and
    ``results["_truncated_fraction"]`` the share of evaluation episodes cut by the time limit.
    """
    hparams = validate(config)
    specs = parse_specs(config.estimators)
    env, env_params = tabular_env(config.env, config.env_kwargs)
    gamma, fit_steps = float(config.gamma), int(config.fit_steps)
    rows, gt = plan_rows(specs, env, env_params, config.hindsight, gamma)
    mdp = gt.mdp()
    max_steps = gt.horizon or DEFAULT_MAX_STEPS

    def run(key: Array, theta: Array) -> dict:
        pi = tabular.softmax_policy(theta)
        values = tabular.state_values(mdp, pi, gamma)
        critic = values if config.critic == "exact" else jnp.zeros_like(values)
        fit_key, eval_key, row_key = jax.random.split(key, 3)
        fit_batch = sample_episodes(mdp, pi, fit_key, config.num_fit, max_steps, gt.reward_law)
        eval_batch = sample_episodes(mdp, pi, eval_key, config.num_trajectories, max_steps,
                                     gt.reward_law)
        exact_kinds = {r.estimator.exact_model for r in rows if r.estimator.is_oracle}
        exact_kinds |= {r.twin.exact_model for r in rows if r.twin is not None}
        exact = {kind: gt_lib.exact_model_params(kind, gt, mdp, pi, hparams.gamma)
                 for kind in sorted(exact_kinds)}
        true_gradient = tabular.policy_gradient(mdp, theta, gamma)
        advantage_table = tabular.advantages(mdp, pi, gamma)

        results = {}
        for row, k in zip(rows, jax.random.split(row_key, len(rows))):
            init_key, fit_k, assign_key, kl_key = jax.random.split(k, 4)
            estimator = row.estimator
            baseline = jnp.zeros_like(values) if row.spec.zero_critic else critic
            fit_traj = episodes_to_trajectory(mdp, pi, fit_batch, baseline)
            eval_traj = episodes_to_trajectory(mdp, pi, eval_batch, baseline)
            fit_loss = kl = jnp.float32(jnp.nan)
            if estimator.is_oracle:
                params = exact[estimator.exact_model]
            else:
                params = estimator.init(init_key, fit_traj)
            if estimator.learned:
                params, fit_loss = fit_hindsight(estimator, params, fit_traj, hparams, fit_steps,
                                                 config.fit_lr, fit_k)
            if row.twin is not None:
                log_h, weight = estimator.hindsight(params, eval_traj, hparams, kl_key)
                log_exact, _ = row.twin.hindsight(exact[row.twin.exact_model], eval_traj,
                                                  hparams, kl_key)
                kl = gt_lib.kl_divergence(log_exact, log_h, weight)
            credit = estimator.assign(params, eval_traj, hparams, assign_key)
            grads = per_trajectory_gradients(credit.advantage, eval_batch.state,
                                             eval_batch.action, eval_batch.valid, pi, gamma)
            entry = gradient_statistics(grads, true_gradient)
            entry["credit_map"] = credit_map(credit.advantage, eval_batch.state,
                                             eval_batch.action, eval_batch.valid,
                                             advantage_table, pi)
            entry["fit_loss"] = fit_loss
            entry["kl_to_exact"] = kl
            entry["diagnostics"] = credit.diagnostics
            results[row.spec.label] = entry
        results["_true_gradient_norm"] = jnp.linalg.norm(true_gradient)
        results["_truncated_fraction"] = eval_batch.truncated.any(0).mean()
        return results

    return jax.jit(run), mdp


def diagnose(config: DiagnoseConfig, seed: int = 0,
             policy_scale: float = DEFAULT_POLICY_SCALE) -> dict:
    """Runs :func:`make_diagnose` once, for θ ~ N(0, policy_scale²), and returns numpy results
    in the order the estimators were given (see :func:`make_diagnose`)."""
    run, mdp = make_diagnose(config)
    policy_key, run_key = jax.random.split(jax.random.key(seed))
    theta = random_policy(policy_key, mdp, policy_scale)
    out = jax.tree_util.tree_map(np.asarray, jax.device_get(run(run_key, theta)))
    # jit returns dicts with sorted keys; restore the order the estimators were given in.
    ordered = {spec.label: out[spec.label] for spec in parse_specs(config.estimators)}
    ordered.update({k: v for k, v in out.items() if k.startswith("_")})
    return ordered

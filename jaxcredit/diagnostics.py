"""How good is the credit? Estimator quality against exact ground truth on tabular environments.

On a small environment with an exact tabular MDP (``env.tabular_mdp(params)``) and a softmax-tabular
policy π_θ = softmax(θ[s, :]), every credit estimator turns each sampled episode i into a gradient
estimate of J(θ) = E[Σ_t γ^t r_t]:

    g_i = Σ_t γ^t ∇_θ log π(a_t|s_t) Â_t                 (per-step credit)
    g_i = Σ_t γ^t Σ_a ∇_θ π(a|s_t) A_t[a]                (all-action credit)

which for the tabular softmax is a scatter of γ^t (1[a = a_t] − π(a|s_t)) Â_t, resp.
γ^t π(a|s_t)(A_t[a] − Σ_b π(b|s_t) A_t[b]), into row s_t of θ. The exact gradient ∇J comes from
dynamic programming (``tabular.policy_gradient``). The metrics are COCOA's (Meulemans et al. 2023,
callback.py; hca_family.md §4.3), with the expected estimator gradient ḡ taken as the sample mean
of thousands of episodes (COCOA computes it by DP; the sample mean adds a noise floor, reported):

    bias dB = 10 log10(‖ḡ − ∇J‖² / ‖∇J‖²)
    var dB  = 10 log10(mean_i ‖g_i − ḡ‖² / ‖∇J‖²)
    SNR dB  = 10 log10(‖∇J‖² / mean_i ‖g_i − ∇J‖²)
    cosine  = cos(ḡ, ∇J)
    floor dB = 10 log10(mean_i ‖g_i − ḡ‖² / (M ‖∇J‖²))   (bias dB below this is sampling noise)

Credit maps compare, step by step, the credit each estimator gives with the exact advantage A^π
(:func:`credit_map`: per-step credit conditionally on the action taken, all-action credit for
every action).

Everything for one policy — sampling the fitting and evaluation episodes, fitting the learned
hindsight models (Adam, ``lax.scan``), assigning credit with every estimator and reducing the
metrics — is one compiled call. The policy's observation is the tabular state (a one-hot vector),
also for environments whose own observation is aliased (DelayedEffect): the diagnostics measure
credit, not partial observability. The critic is exact (V^π by DP) unless ``critic="zero"``.
``reinforce`` is the Monte-Carlo return without a baseline (the ``mc`` estimator with V ≡ 0).

Command line (see :func:`main`)::

    jaxcredit diagnose --env DelayedEffect --estimators mc,gae,hca_return,hca_state,c2a2c
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxcredit.envs import tabular
from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators.base import Estimator
from jaxcredit.types import Trajectory

Array = jax.Array

DEFAULT_ESTIMATORS = ("reinforce", "mc", "gae", "hca_return", "hca_state", "c2a2c")
HINDSIGHT_MODES = ("learned", "exact")
CRITICS = ("exact", "zero")


@struct.dataclass
class Hparams:
    """The hyper-parameters estimators read (``gamma``, ``lambda_``)."""

    gamma: Array
    lambda_: Array


# ----------------------------------------------------------------------------------------------
# Episodes as trajectories, gradients, statistics
# ----------------------------------------------------------------------------------------------


def episodes_to_trajectory(
    mdp: tabular.TabularMDP, pi: Array, batch: tabular.EpisodeBatch, values: Array
) -> Trajectory:
    """An :class:`EpisodeBatch` as a time-major :class:`Trajectory` with one-hot state observations.

    Steps after an episode's end (``valid`` False) repeat its terminal state with zero reward; they
    form a zero-reward tail that no estimator credits, and :func:`per_trajectory_gradients` masks
    them anyway. ``values`` ``[S]`` is the critic (exact V^π or zeros).
    """
    num_states = mdp.num_states
    log_pi = jnp.log(jnp.maximum(pi, 1e-30))
    logits = log_pi[batch.state]
    return Trajectory(
        obs=jax.nn.one_hot(batch.state, num_states, dtype=jnp.float32),
        action=batch.action,
        reward=batch.reward,
        terminated=batch.terminated,
        truncated=batch.truncated,
        value=values[batch.state],
        next_value=values[batch.next_state] * (1.0 - batch.terminated),
        log_prob=jnp.take_along_axis(logits, batch.action[..., None], axis=-1)[..., 0],
        logits=logits,
    )


def per_trajectory_gradients(
    advantage: Array, state: Array, action: Array, valid: Array, pi: Array, gamma: Array
) -> Array:
    """``[N, S, A]`` gradient estimate of each episode for a softmax-tabular policy (module doc).

    Args:
      advantage: ``[T, N]`` per-step or ``[T, N, A]`` all-action credit.
      state, action, valid: ``[T, N]``.
      pi: ``[S, A]``.
      gamma: discount of the state weighting γ^t.
    """
    num_steps = state.shape[0]
    num_states, num_actions = pi.shape
    pi_t = pi[state]  # [T, N, A]
    weight = (gamma ** jnp.arange(num_steps, dtype=jnp.float32))[:, None] * valid
    if advantage.ndim == state.ndim:
        score = jax.nn.one_hot(action, num_actions) - pi_t
        contrib = score * advantage[..., None]
    else:
        baseline = jnp.sum(pi_t * advantage, axis=-1, keepdims=True)
        contrib = pi_t * (advantage - baseline)
    contrib = contrib * weight[..., None]
    return jnp.einsum("tns,tna->nsa", jax.nn.one_hot(state, num_states), contrib)


def gradient_statistics(samples: Array, true_gradient: Array) -> dict:
    """COCOA's bias / variance / SNR in dB and the cosine from ``[M, ...]`` samples (module doc)."""
    m = samples.shape[0]
    g = samples.reshape(m, -1)
    g_true = true_gradient.reshape(-1)
    g_mean = g.mean(0)
    norm2 = jnp.sum(g_true**2)
    bias2 = jnp.sum((g_mean - g_true) ** 2)
    var = jnp.mean(jnp.sum((g - g_mean) ** 2, -1))
    mse = jnp.mean(jnp.sum((g - g_true) ** 2, -1))
    db = lambda x: 10.0 * jnp.log10(jnp.maximum(x, 1e-30))
    cos = jnp.dot(g_mean, g_true) / jnp.maximum(jnp.linalg.norm(g_mean) * jnp.sqrt(norm2), 1e-30)
    per_cos = (g @ g_true) / jnp.maximum(jnp.linalg.norm(g, axis=-1) * jnp.sqrt(norm2), 1e-30)
    return {
        "bias_db": db(bias2 / norm2),
        "var_db": db(var / norm2),
        "snr_db": db(norm2 / mse),
        "cosine": cos,
        "sample_cosine": per_cos.mean(),
        "floor_db": db(var / (m * norm2)),
        "relative_bias": jnp.sqrt(bias2 / norm2),
    }


def credit_map(advantage: Array, state: Array, action: Array, valid: Array,
               advantage_table: Array, pi: Array) -> dict:
    """Per-step credit against the exact advantage A^π.

    Per-step credit Â_t estimates A^π(s_t, a_t) for the action taken, so it is compared
    conditionally on the action: ``mean[t, a]`` = E[Â_t | a_t = a] and ``exact[t, a]`` =
    E[A^π(s_t, a_t) | a_t = a]; ``rmse[t]`` = sqrt(E[(Â_t − A^π(s_t, a_t))²]).

    All-action credit A_t[a] estimates A^π(s_t, a) for every a *without* conditioning on a_t (its
    sampled-action terms are unbiased only on average over a_t), so ``mean[t, a]`` = E[A_t[a]],
    ``exact[t, a]`` = E[A^π(s_t, a)] and ``rmse[t]`` = sqrt(E[Σ_a π(a|s_t)(A_t[a] − A^π(s_t, a))²]).

    Args:
      advantage: ``[T, N]`` or ``[T, N, A]``.
      state, action, valid: ``[T, N]``.
      advantage_table: ``[S, A]`` exact A^π.
      pi: ``[S, A]``.

    Returns:
      ``{"mean": [T, A], "exact": [T, A], "rmse": [T], "count": [T, A]}``.
    """
    num_actions = pi.shape[-1]
    exact_all = advantage_table[state]  # [T, N, A]
    if advantage.ndim == state.ndim:
        mask = jax.nn.one_hot(action, num_actions) * valid[..., None]  # [T, N, A]
        exact_taken = jnp.take_along_axis(exact_all, action[..., None], -1)[..., 0]
        mean = jnp.einsum("tna,tn->ta", mask, advantage)
        exact = jnp.einsum("tna,tn->ta", mask, exact_taken)
        err2 = (advantage - exact_taken) ** 2
    else:
        mask = jnp.broadcast_to(valid[..., None], exact_all.shape).astype(jnp.float32)
        mean = jnp.einsum("tna,tna->ta", mask, advantage)
        exact = jnp.einsum("tna,tna->ta", mask, exact_all)
        err2 = jnp.sum(pi[state] * (advantage - exact_all) ** 2, -1)
    count = mask.sum(1)
    safe = jnp.maximum(count, 1.0)
    rmse = jnp.sqrt(jnp.sum(valid * err2, 1) / jnp.maximum(valid.sum(1), 1.0))
    return {"mean": mean / safe, "exact": exact / safe, "rmse": rmse, "count": count}


# ----------------------------------------------------------------------------------------------
# Estimator specs and exact hindsight models
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """An estimator to diagnose: ``label`` in the table, registry ``name`` and its options."""

    label: str
    name: str
    options: tuple = ()


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "none":
        return None
    return text


def parse_spec(text: str) -> Spec:
    """Parses ``"name"`` or ``"name:key=value:..."``, e.g. ``"hca_return:form=all_action:mix=0.5"``."""
    from jaxcredit.estimators import registered

    parts = [p for p in text.strip().split(":")]
    name = parts[0]
    known = set(registered()) | {"reinforce"}
    if name not in known:
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(sorted(known))}")
    options = []
    for part in parts[1:]:
        if "=" not in part:
            raise ValueError(f"bad estimator option {part!r} in {text!r}: expected key=value")
        key, value = part.split("=", 1)
        options.append((key, _parse_value(value)))
    return Spec(label=text.strip(), name=name, options=tuple(options))


def _is_bandit(mdp: tabular.TabularMDP) -> bool:
    """Every action from every start state ends the episode."""
    start = np.asarray(mdp.initial) > 0
    reach_terminal = np.asarray(
        jnp.sum(mdp.transition * mdp.terminal[None, None, :], axis=-1))  # [S, A]
    return bool(np.all(reach_terminal[start] > 1 - 1e-6))


def plan_exact_return(mdp: tabular.TabularMDP, gamma: float, horizon: int):
    """How to compute the exact h(a|s,Z): ``("bandit", None, H)`` or ``("grid", support, H)``.

    One-step Gaussian bandits have a closed form; otherwise rewards must be deterministic and
    γ = 1 (``tabular.return_distribution`` is undiscounted, on a grid). Anything else is a
    ValueError. Runs on the concrete MDP, outside the compiled program.
    """
    if _is_bandit(mdp):
        return "bandit", None, horizon
    if float(np.max(np.asarray(mdp.transition_reward_std))) > 0 or gamma != 1.0:
        raise ValueError(
            "exact return hindsight needs deterministic rewards and gamma=1 (or a one-step "
            "bandit); use --hindsight learned, or --env-arg sigma=0 --gamma 1")
    rewards = np.abs(np.asarray(mdp.transition_reward))
    nonzero = rewards[rewards > 1e-6]
    step = float(nonzero.min()) if nonzero.size else 1.0
    reach = horizon * float(rewards.max() if rewards.size else 1.0) + step
    return "grid", np.arange(-reach, reach + step / 2, step, dtype=np.float32), horizon


def exact_return_model(mdp: tabular.TabularMDP, pi: Array, plan) -> hm.ReturnHindsightModel:
    """The exact h(a | s, Z) under π as a ReturnHindsightModel (see :func:`plan_exact_return`)."""
    kind, support, horizon = plan
    log_floor = 1e-30
    if kind == "bandit":
        def logits(params, obs, z, z_normalised, policy_logits):
            del params, z_normalised, policy_logits
            h = tabular.bandit_return_hindsight(mdp, pi, z)  # [..., S, A]
            s = jnp.argmax(obs, axis=-1)
            h_s = jnp.take_along_axis(h, s[..., None, None], axis=-2)[..., 0, :]
            return jnp.log(jnp.maximum(h_s, log_floor))

        return hm.ReturnHindsightModel(init=lambda key, obs, num_actions: {}, logits=logits)
    support = jnp.asarray(support)
    h = tabular.return_hindsight(mdp, pi, support, horizon)  # [S, Z, A]
    table = jnp.log(jnp.maximum(h, log_floor))
    model = hm.return_tabular(mdp.num_states, support)
    return dataclasses.replace(model, init=lambda key, obs, num_actions: {"table": table})


def exact_state_model(mdp: tabular.TabularMDP, pi: Array, gamma: float):
    """The exact h_γ(a | s, s') (``tabular.state_hindsight``) as a StateHindsightModel."""
    table = jnp.log(jnp.maximum(tabular.state_hindsight(mdp, pi, gamma), 1e-30))
    model = hm.state_tabular(mdp.num_states)
    return dataclasses.replace(model, init=lambda key, obs, num_actions: {"table": table})


def build_estimator(spec: Spec, exact_models: Optional[dict] = None) -> Estimator:
    """The registry estimator of ``spec``; with ``exact_models`` the hindsight model is exact."""
    from jaxcredit.estimators import make_estimator

    options = dict(spec.options)
    name = "mc" if spec.name == "reinforce" else spec.name
    estimator = make_estimator(name, **options)
    if exact_models is not None and estimator.exact_model is not None:
        exact = exact_models.get(estimator.exact_model)
        if exact is None:
            raise ValueError(f"no exact {estimator.exact_model} for estimator {spec.label!r} here")
        estimator = make_estimator(name, **{**options, "model": exact})
    return estimator


# ----------------------------------------------------------------------------------------------
# The compiled diagnostic
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DiagnoseConfig:
    """What fixes the compiled diagnostic program.

    Attributes:
      env: environment name (must have ``tabular_mdp``).
      env_kwargs: ``(key, value)`` pairs for ``jaxcredit.envs.make``.
      estimators: estimator specs (``parse_spec`` strings).
      num_trajectories: M episodes for the gradient statistics.
      num_fit: episodes on which the learned hindsight models are fitted (a separate batch).
      fit_steps: Adam steps of the fit; learning rate ``fit_lr``.
      hindsight: "learned" (fit the estimators' own models) or "exact" (DP hindsight).
      critic: "exact" (V^π) or "zero".
      gamma, lambda_: discount and λ.
      max_steps: episode cap (default: the environment's ``max_steps_in_episode``).
    """

    env: str = "DelayedEffect"
    env_kwargs: tuple = ()
    estimators: tuple = DEFAULT_ESTIMATORS
    num_trajectories: int = 4096
    num_fit: int = 1024
    fit_steps: int = 300
    fit_lr: float = 3e-3
    hindsight: str = "learned"
    critic: str = "exact"
    gamma: float = 1.0
    lambda_: float = 0.95
    max_steps: Optional[int] = None


def _validate(config: DiagnoseConfig) -> None:
    if config.hindsight not in HINDSIGHT_MODES:
        raise ValueError(f"hindsight must be one of {HINDSIGHT_MODES}, got {config.hindsight!r}")
    if config.critic not in CRITICS:
        raise ValueError(f"critic must be one of {CRITICS}, got {config.critic!r}")
    if not 0.0 <= config.gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {config.gamma}")
    if not 0.0 <= config.lambda_ <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {config.lambda_}")
    for name in ("num_trajectories", "num_fit"):
        if getattr(config, name) < 2:
            raise ValueError(f"{name} must be at least 2, got {getattr(config, name)}")
    if config.fit_steps < 0:
        raise ValueError(f"fit_steps must be >= 0, got {config.fit_steps}")
    if not config.estimators:
        raise ValueError("no estimators given")


def load_tabular_env(name: str, env_kwargs: Sequence = ()) -> tuple[Any, tabular.TabularMDP, int]:
    """``(env, mdp, max_steps)`` or a one-line ValueError if the env has no exact tabular MDP."""
    from jaxcredit import envs

    env, params = envs.make(name, **dict(env_kwargs))
    if not hasattr(env, "tabular_mdp"):
        raise ValueError(f"environment {name!r} has no exact tabular MDP; the diagnostics need one "
                         "(e.g. Shortcut, DelayedEffect, AmbiguousBandit, TreeMDP)")
    mdp = env.tabular_mdp(params)
    max_steps = int(getattr(params, "max_steps_in_episode", 100))
    return env, mdp, max_steps


def make_diagnose(config: DiagnoseConfig):
    """Builds ``run(key, theta) -> results``: one compiled program for one policy θ ``[S, A]``.

    ``results[label]`` holds the gradient statistics, the credit map, the final hindsight-model
    loss (``fit_loss``, NaN for estimators without a model) and ``true_gradient_norm``.
    """
    _validate(config)
    specs = tuple(parse_spec(s) if isinstance(s, str) else s for s in config.estimators)
    _, mdp, env_steps = load_tabular_env(config.env, config.env_kwargs)
    max_steps = config.max_steps or env_steps
    gamma, lam = float(config.gamma), float(config.lambda_)
    hparams = Hparams(gamma=jnp.float32(gamma), lambda_=jnp.float32(lam))
    num_actions = mdp.num_actions
    return_plan = None
    if config.hindsight == "exact" and any(
            build_estimator(s).exact_model == "return_hindsight" for s in specs):
        return_plan = plan_exact_return(mdp, gamma, max_steps)

    def run(key: Array, theta: Array) -> dict:
        pi = tabular.softmax_policy(theta)
        values = tabular.state_values(mdp, pi, gamma)
        advantage_table = tabular.advantages(mdp, pi, gamma)
        true_gradient = tabular.policy_gradient(mdp, theta, gamma)
        critic = values if config.critic == "exact" else jnp.zeros_like(values)
        fit_key, eval_key, init_key = jax.random.split(key, 3)
        fit_batch = tabular.sample_episodes(mdp, pi, fit_key, config.num_fit, max_steps)
        eval_batch = tabular.sample_episodes(mdp, pi, eval_key, config.num_trajectories, max_steps)
        exact_models = None
        if config.hindsight == "exact":
            exact_models = {"state_hindsight": exact_state_model(mdp, pi, gamma)}
            if return_plan is not None:
                exact_models["return_hindsight"] = exact_return_model(mdp, pi, return_plan)
        results = {}
        for spec, k in zip(specs, jax.random.split(init_key, len(specs))):
            k, fit_k, assign_k = jax.random.split(k, 3)
            estimator = build_estimator(spec, exact_models)
            use_critic = jnp.zeros_like(values) if spec.name == "reinforce" else critic
            fit_traj = episodes_to_trajectory(mdp, pi, fit_batch, use_critic)
            eval_traj = episodes_to_trajectory(mdp, pi, eval_batch, use_critic)
            params = estimator.init(k, fit_traj)
            fit_loss = jnp.float32(jnp.nan)
            if estimator.learned and config.hindsight == "learned":
                params, fit_loss = fit_hindsight(estimator, params, fit_traj, hparams,
                                                 config.fit_steps, config.fit_lr, fit_k)
            credit = estimator.assign(params, eval_traj, hparams, assign_k)
            adv = credit.advantage
            grads = per_trajectory_gradients(adv, eval_batch.state, eval_batch.action,
                                             eval_batch.valid, pi, gamma)
            entry = gradient_statistics(grads, true_gradient)
            entry["credit_map"] = credit_map(adv, eval_batch.state, eval_batch.action,
                                             eval_batch.valid, advantage_table, pi)
            entry["fit_loss"] = fit_loss
            entry["diagnostics"] = credit.diagnostics
            results[spec.label] = entry
        results["_true_gradient_norm"] = jnp.linalg.norm(true_gradient)
        results["_truncated_fraction"] = eval_batch.truncated.any(0).mean()
        return results

    return jax.jit(run), mdp


def fit_hindsight(estimator: Estimator, params: Any, trajectory: Trajectory, hparams: Any,
                  steps: int, learning_rate: float, key: Array) -> tuple[Any, Array]:
    """Fits a learned estimator's model by full-batch Adam on its own ``loss`` (``lax.scan``)."""
    optimiser = optax.adam(learning_rate)

    def step(carry, step_key):
        p, opt_state = carry
        loss, grads = jax.value_and_grad(
            lambda q: estimator.loss(q, trajectory, hparams, step_key)[0])(p)
        updates, opt_state = optimiser.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), loss

    step_keys = jax.random.split(key, steps + 1)
    (params, _), losses = jax.lax.scan(step, (params, optimiser.init(params)), step_keys[:-1])
    final = estimator.loss(params, trajectory, hparams, step_keys[-1])[0]
    return params, final


def random_policy(key: Array, mdp: tabular.TabularMDP, scale: float) -> Array:
    """θ ~ N(0, scale²) per (s, a); scale 0 is the uniform policy."""
    return scale * jax.random.normal(key, (mdp.num_states, mdp.num_actions), jnp.float32)


def diagnose(config: DiagnoseConfig, seed: int = 0, policy_scale: float = 0.5) -> dict:
    """Runs :func:`make_diagnose` once and returns numpy results (see there)."""
    run, mdp = make_diagnose(config)
    key = jax.random.key(seed)
    policy_key, run_key = jax.random.split(key)
    theta = random_policy(policy_key, mdp, policy_scale)
    out = jax.tree_util.tree_map(np.asarray, jax.device_get(run(run_key, theta)))
    # jax returns dicts with sorted keys; restore the order the estimators were given in.
    labels = [parse_spec(s).label if isinstance(s, str) else s.label for s in config.estimators]
    ordered = {label: out[label] for label in labels}
    ordered.update({k: v for k, v in out.items() if k.startswith("_")})
    return ordered


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------

_COLUMNS = (("bias_db", "bias dB"), ("var_db", "var dB"), ("snr_db", "SNR dB"),
            ("cosine", "cos(ḡ,∇J)"), ("sample_cosine", "E cos(g,∇J)"), ("floor_db", "floor dB"))


def format_table(results: dict) -> str:
    """A plain-text table, one row per estimator."""
    labels = [k for k in results if not k.startswith("_")]
    width = max(10, *(len(label) for label in labels))
    head = f"{'estimator':<{width}} " + " ".join(f"{title:>11}" for _, title in _COLUMNS)
    head += f" {'credit RMSE':>11} {'fit loss':>9}"
    lines = [head, "-" * len(head)]
    for label in labels:
        entry = results[label]
        row = f"{label:<{width}} " + " ".join(f"{float(entry[k]):>11.2f}" for k, _ in _COLUMNS)
        rmse = float(np.mean(entry["credit_map"]["rmse"]))
        fit = float(entry["fit_loss"])
        row += f" {rmse:>11.3f} {'-' if math.isnan(fit) else f'{fit:.3f}':>9}"
        lines.append(row)
    lines.append(f"‖∇J‖ = {float(results['_true_gradient_norm']):.4g}; bias dB below 'floor dB' "
                 "is Monte-Carlo noise of the sample mean.")
    return "\n".join(lines)


def plot(results: dict, path: str, title: str = "") -> None:
    """Bar chart of the dB metrics and the per-step credit maps, saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [k for k in results if not k.startswith("_")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    x = np.arange(len(labels))
    for i, (key, name) in enumerate((("bias_db", "bias"), ("var_db", "variance"),
                                     ("snr_db", "SNR"))):
        axes[0].bar(x + (i - 1) * 0.27, [float(results[l][key]) for l in labels], 0.27,
                    label=f"{name} (dB)")
    axes[0].set_xticks(x, labels, rotation=30, ha="right")
    axes[0].axhline(0.0, color="k", lw=0.5)
    axes[0].legend()
    axes[0].set_title("gradient quality vs exact ∇J")
    first = results[labels[0]]["credit_map"]
    steps = np.arange(first["mean"].shape[0])
    axes[1].plot(steps, first["exact"][:, 0], "k-", lw=3, alpha=0.4, label="exact A^π (a_t=0)")
    for label in labels:
        cm = results[label]["credit_map"]
        axes[1].plot(steps, cm["mean"][:, 0], marker="o", ms=3, label=label)
    axes[1].set_xlabel("step t")
    axes[1].set_ylabel("mean credit of action 0")
    axes[1].set_title("credit map")
    axes[1].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    arr = np.asarray(x)
    return arr.tolist() if arr.ndim else float(arr)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxcredit diagnose",
        description="Bias / variance / SNR of credit estimators against the exact policy gradient "
                    "on a tabular environment, and per-step credit maps vs the exact advantage.")
    p.add_argument("--env", default="DelayedEffect")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="environment keyword (repeatable), e.g. --env-arg n=10 --env-arg sigma=1")
    p.add_argument("--estimators", default=",".join(DEFAULT_ESTIMATORS),
                   help="comma-separated; options as name:key=value, e.g. hca_return:mix=0.5")
    p.add_argument("--num-trajectories", type=int, default=4096)
    p.add_argument("--num-fit", type=int, default=1024)
    p.add_argument("--fit-steps", type=int, default=300)
    p.add_argument("--fit-lr", type=float, default=3e-3)
    p.add_argument("--hindsight", choices=HINDSIGHT_MODES, default="learned")
    p.add_argument("--critic", choices=CRITICS, default="exact")
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--lambda", dest="lambda_", type=float, default=0.95)
    p.add_argument("--policy-scale", type=float, default=0.5,
                   help="policy logits θ ~ N(0, scale²); 0 = uniform")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/diagnose", help="folder for results.json and the plot")
    p.add_argument("--no-plot", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``jaxcredit diagnose ...``: prints the table, writes results.json and diagnose.png."""
    args = _parser().parse_args(argv)
    try:
        env_kwargs = []
        for item in args.env_arg:
            if "=" not in item:
                raise ValueError(f"--env-arg expects KEY=VALUE, got {item!r}")
            key, value = item.split("=", 1)
            env_kwargs.append((key, _parse_value(value)))
        config = DiagnoseConfig(
            env=args.env, env_kwargs=tuple(env_kwargs),
            estimators=tuple(s for s in args.estimators.split(",") if s.strip()),
            num_trajectories=args.num_trajectories, num_fit=args.num_fit,
            fit_steps=args.fit_steps, fit_lr=args.fit_lr, hindsight=args.hindsight,
            critic=args.critic, gamma=args.gamma, lambda_=args.lambda_)
        results = diagnose(config, seed=args.seed, policy_scale=args.policy_scale)
    except ValueError as err:
        print(f"jaxcredit diagnose: error: {err}", file=sys.stderr)
        return 2
    title = f"{args.env} {dict(env_kwargs) or ''} γ={args.gamma} λ={args.lambda_} " \
            f"hindsight={args.hindsight} M={args.num_trajectories}"
    print(title)
    print(format_table(results))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"config": dataclasses.asdict(config), "policy_scale": args.policy_scale,
                   "seed": args.seed, "results": _jsonable(results)}, f, indent=1)
    if not args.no_plot:
        path = os.path.join(args.out, "diagnose.png")
        plot(results, path, title)
        print(f"wrote {os.path.join(args.out, 'results.json')} and {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The on-policy training engine: ``make_train(config) -> train(key, hparams) -> (state, metrics)``.

One update (``Engine.update_step``) is one compiled function that runs the credit pipeline
(docs/design.md) between acting and optimising::

    ACT          lax.scan over T steps of vmapped envs, policy tower only     (agents.rollout)
    RELABEL      relabel(trajectory, key)                                      (optional stage)
    EVALUATE     V(s_t) and V(s'_{t+1}) on the whole window in two batched calls
    REDISTRIBUTE fit the redistributor's model, then new rewards               (optional stage)
    ESTIMATE     fit the estimator's model (or load the exact one: oracle), then
                 credit = estimator.assign(params, trajectory, hparams, key) under stop_gradient
    OPTIMISE     epochs × minibatches of Adam steps on the objective's loss

A run is ``lax.scan`` of ``update_step`` over updates, in blocks of ``eval_every`` updates each
followed by an evaluation (``Engine.evaluate``), so ``jax.jit(jax.vmap(train))`` over keys and
stacked ``Hparams`` is a seed × hyper-parameter sweep in one compile. The host loop runs the same
blocks in chunks (``Engine.run``) and gets bit-identical numbers.

Fitted models. A learned estimator or redistributor is fitted with its own Adam state, learning
rate and clip (``Hparams``) and its own schedule (``config.estimator.fit``,
``config.redistribute.fit``; ``jaxcredit.fitting``) *before* it is used on the fresh window.
Its gradient never reaches the agent and the agent's never reaches it.

Policies. ``config.policy`` is a memoryless MLP or a recurrent GRU / LSTM
(``jaxcredit.agents.agent_network``); the recurrent memory lives in the runner, is zeroed at
episode starts, and every window keeps its starting memory so that the critic's values and the
objective's minibatches (whole sequences, ``jaxcredit.agents.optimise``) re-run the agent as it
acted. Exact credit models and exact returns need a policy table π[s, a], which only a
memoryless policy has: a recurrent run refuses the oracles and skips those metrics.

Metrics are per-update scalars reduced inside the program (no host callbacks, no per-step arrays):
``episode_return`` / ``episode_length`` are means over the training episodes that ended during
the update's rollout (NaN if none ended), ``episodes`` their count; the objective's metrics are
means over epochs × minibatches; ``credit/*`` are the estimator's diagnostics; ``estimator/*`` and
``redistribute/*`` the fitting metrics; ``eval/*`` and ``estimator/kl_to_exact`` are set at the
updates that end an evaluation block and NaN elsewhere.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from jaxcredit.agents import credit_error
from jaxcredit.agents import meta_gradient as meta_lib
from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.agents.agent_network import AgentNetwork, first_steps, make_agent_network
from jaxcredit.agents.config import OFF_POLICY_ALGOS, Hparams, TrainConfig
from jaxcredit.agents.evaluation import play_episodes
from jaxcredit.agents.optimise import flatten_steps, minibatch_loss, objective_batch, optimise
from jaxcredit.agents.rollout import example_window, reset_groups, reset_runner, rollout
from jaxcredit.agents.runs import (DEFAULT_EVAL_MAX_STEPS, EngineRuns, action_distribution,
                                   episode_horizon, make_environment, strong)
from jaxcredit.agents.normalize import make_normalizer
from jaxcredit.agents.stages import exact_twin, make_stages, reads_agent_state
from jaxcredit.agents.state import AgentState, TrainState, Window
from jaxcredit.exact import tabular
from jaxcredit.envs.goals import success_fn
from jaxcredit.estimators.base import Estimator
from jaxcredit.fitting import FitState, adam_step, fit, init_fit_state, pretrain
from jaxcredit.networks import ActorCritic
from jaxcredit.objectives import Objective, losses
from jaxcredit.redistribute import Redistributor
from jaxcredit.relabel import Relabeller
from jaxcredit.agents.credit_scores import step_label_scores
from jaxcredit.agents.dqn import make_dqn_engine
from jaxcredit.agents.pqn import make_pqn_engine
from jaxcredit.types import Credit, Trajectory

Array = jax.Array
Metrics = dict[str, Array]

@dataclasses.dataclass(frozen=True, eq=False)
class Engine(EngineRuns):
    """The pure functions of one training configuration.

    Attributes:
      config: the resolved ``TrainConfig``.
      env, env_params: the gymnax environment.
      network: the agent's flax module (``ActorCritic``, or ``RecurrentActorCritic``).
      agent_network: how the engine runs it (``jaxcredit.agents.agent_network``).
      objective, estimator: the objective and estimate stages.
      relabeller, redistributor: the optional stages (None when not set).
      ground_truth: exact quantities of the environment (None without a tabular MDP).
      init: ``key -> TrainState``.
      collect: ``(TrainState, Hparams, key) -> Window``: act, relabel, evaluate the critic.
      assign_credit: ``(TrainState, Trajectory, Hparams, key) -> (Trajectory, Credit, TrainState,
        metrics)``: fit and apply the redistribute and estimate stages.
      update_step: ``(TrainState, Hparams) -> (TrainState, metrics)``, one update.
      evaluate: ``(TrainState, Hparams) -> metrics``, the evaluation at the current policy.
    """

    config: TrainConfig
    env: Any
    env_params: Any
    network: Any
    agent_network: AgentNetwork
    objective: Objective
    estimator: Estimator
    relabeller: Optional[Relabeller]
    redistributor: Optional[Redistributor]
    ground_truth: Optional[gt_lib.GroundTruth]
    init: Callable[[Array], TrainState]
    collect: Callable[[TrainState, Hparams, Array], Window]
    assign_credit: Callable[..., tuple[Trajectory, Credit, TrainState, Metrics]]
    update_step: Callable[[TrainState, Hparams], tuple[TrainState, Metrics]]
    evaluate: Callable[[TrainState, Hparams], Metrics]

def make_train(config: TrainConfig, env: Any = None, env_params: Any = None):
    """``train(key, hparams) -> (final_state, metrics)`` for ``config`` (see module docstring).

    Args:
      config: the frozen config (validated here).
      env, env_params: an environment instance to use instead of ``config.env`` (tests, notebooks).
    """
    return make_engine(config, env, env_params).train


def make_engine(config: TrainConfig, env: Any = None, env_params: Any = None):
    """Builds the engine of ``config.algo``: the on-policy ``Engine`` (init, collect,
    assign_credit, update step, evaluate, run, train), or for ``dqn`` the off-policy one
    (``jaxcredit.agents.dqn``), which has the same shape."""
    config = config.resolved()
    if config.algo == "pqn":
        return make_pqn_engine(config, env, env_params)
    if config.algo in OFF_POLICY_ALGOS:
        return make_dqn_engine(config, env, env_params)
    env, env_params = make_environment(config, env, env_params)
    law = action_distribution(env, env_params, config)
    # Running normalisation: by default for continuous actions only (PureJaxRL's continuous PPO).
    normalize_env = law.continuous if config.normalize_env is None else config.normalize_env
    stages = make_stages(config, env, env_params, law)
    objective, estimator = stages.objective, stages.estimator
    relabeller, redistributor = stages.relabeller, stages.redistributor
    episodic = estimator.episode_windows or config.group_size > 1
    exact_redistributor = redistributor.exact_model if redistributor is not None else None
    ground_truth = gt_lib.make_ground_truth(env, env_params,
                                            (estimator.exact_model, exact_redistributor))
    # What evaluation and the redistribution diagnostics may read: the ground truth, or under
    # DelayedReward the inner environment's (same J(π), same Q of the undelayed reward), which
    # the credit stages may not read (the oracles need the delayed process's own MDP).
    reference, reference_index = ground_truth, (env.state_index if ground_truth else None)
    if ground_truth is None and gt_lib.has_undelayed_truth(env):
        reference = gt_lib.make_ground_truth(env.undelayed, env_params, (exact_redistributor,))
        reference_index = lambda s: env.undelayed.state_index(s.env_state)  # noqa: E731
    obs_shape = tuple(env.observation_space(env_params).shape)
    agent_net = make_agent_network(config.policy, law, config.hidden_sizes, config.activation,
                                   max(len(obs_shape), 1), config.policy_epsilon, obs_shape,
                                   episode_horizon(env_params))
    network = agent_net.module
    # A policy table π[s, a] (the oracles, exact returns, credit errors) needs a memoryless policy.
    exact_policy = not agent_net.recurrent
    if not exact_policy and (estimator.is_oracle or exact_redistributor):
        raise ValueError(f"--policy {config.policy} has no policy table π[s, a] for the exact "
                         "models (model=oracle); use --policy mlp or a fitted model")
    twin = exact_twin(estimator, ground_truth, config) if exact_policy else None
    record_agent_state = reads_agent_state(stages)  # make_stages checked there is one
    burn_in, pretrain_steps = config.burn_in_updates, config.estimator.pretrain_steps
    if exact_redistributor and reference is None:
        raise ValueError(f"redistribute stage {config.redistribute.name!r} with model=oracle "
                         f"needs an environment with exact ground truth; {config.env!r} has none")
    T, N = config.num_steps, config.num_envs
    M, E = config.num_minibatches, config.update_epochs
    state_index = reference_index
    success = success_fn(env)
    eval_steps = config.evaluation.max_steps or int(
        getattr(env_params, "max_steps_in_episode", 0) or DEFAULT_EVAL_MAX_STEPS)

    def example_trajectory(obs_dtype) -> Trajectory:
        return example_window(
            env, env_params, law, jnp.zeros((T, N) + obs_shape, obs_dtype),
            with_state=reference is not None,
            agent_state_size=agent_net.state_size if record_agent_state else None,
            read_shape=agent_net.read_shape if record_agent_state else None)

    def init(key: Array) -> TrainState:
        net_key, est_key, rd_key, env_key, run_key, eval_key = jax.random.split(key, 6)
        runner = reset_runner(env, env_params, env_key, N, agent_net.initial_memory(N)).replace(
            normalizer=make_normalizer(obs_shape, N, normalize_env, normalize_env))
        agent_params = agent_net.init(net_key, runner.obs)
        example = example_trajectory(jnp.float32 if normalize_env else runner.obs.dtype)
        est_params = {} if estimator.is_oracle else estimator.init(est_key, example)
        rd_params = redistributor.init(rd_key, example) if redistributor else {}
        rd_memory = (redistributor.init_memory(example)
                     if redistributor is not None and redistributor.init_memory else None)
        est_state = (init_fit_state(est_params, example, config.estimator.fit)
                     if estimator.learned else FitState(est_params, {}))
        if pretrain_steps:
            est_state = est_state.replace(pretrain_buffer=jax.tree.map(
                lambda x: jnp.zeros((burn_in,) + x.shape, x.dtype), example))
        state = TrainState(
            agent=AgentState(agent_params,
                             optax.scale_by_adam(eps=config.adam_eps).init(agent_params)),
            estimator=est_state,
            redistributor=(init_fit_state(rd_params, example, config.redistribute.fit)
                           if redistributor is not None and redistributor.learned
                           else FitState(rd_params, {})).replace(memory=rd_memory),
            runner=runner, key=run_key, eval_key=eval_key, update=jnp.zeros((), jnp.int32),
            meta=meta_lib.init_meta_state(config.meta_gradient))
        # Strong dtypes everywhere (gymnax states hold weakly typed Python scalars): a restored
        # checkpoint has strong dtypes, and the same types mean the same compiled program.
        return jax.tree.map(strong, state)

    def with_values(agent_params, traj: Trajectory, memory, first) -> Trajectory:
        if not config.critic and not record_agent_state:
            zeros = jnp.zeros_like(traj.reward)
            return traj.replace(value=zeros, next_value=zeros)
        value, next_value, agent_state, reads = agent_net.window(
            agent_params, memory, traj.obs, first, traj.next_obs, critic=config.critic)
        if record_agent_state:
            traj = traj.replace(agent_state=jax.lax.stop_gradient(agent_state),
                                memory_reads=jax.lax.stop_gradient(reads))
        return traj.replace(value=value, next_value=next_value)

    def collect(state: TrainState, hparams: Hparams, key: Array) -> Window:
        act_key, relabel_key = jax.random.split(key)

        def policy(memory, obs, first):
            return agent_net.act(state.agent.params, memory, obs, first)

        runner = state.runner
        if episodic:
            # Every window is one whole episode per environment, groups sharing an instance.
            act_key, reset_key = jax.random.split(act_key)
            fresh = agent_net.initial_memory(N)
            runner = (reset_groups(env, env_params, reset_key, N, config.group_size, fresh)
                      if hasattr(env, "reset_to_instance")
                      else reset_runner(env, env_params, reset_key, N, fresh)
                      ).replace(normalizer=state.runner.normalizer)
        start = runner
        runner, traj, episodes = rollout(env, env_params, policy, runner, act_key, T,
                                         state_index, success, law, hparams.gamma)
        if relabeller is not None:
            traj = relabeller.relabel(traj, relabel_key)
        first = first_steps(start.first, traj.done)
        traj = with_values(state.agent.params, traj, start.memory, first)
        return Window(trajectory=traj, runner=runner, episodes=episodes, memory=start.memory,
                      first=first)

    def lr_scale(state: TrainState, anneal: bool):
        return 1.0 - state.update.astype(jnp.float32) / config.num_updates if anneal else 1.0

    def behaviour_table(state: TrainState) -> Array:
        """π[s, a] of the acting policy on the reference MDP. Built once per update (or
        evaluation) and handed to every stage that reads it: with ground truth for the credit
        stages, ``reference`` is ``ground_truth`` (under DelayedReward the credit stages get
        none), so the oracle estimator and an exact redistributor share one table."""
        return gt_lib.policy_table(network, state.agent.params, reference.mdp())

    def exact_params(pi: Array, hparams: Hparams, kind: str):
        return gt_lib.exact_model_params(kind, ground_truth, ground_truth.mdp(), pi,
                                         hparams.gamma)

    def fit_estimator(state: TrainState, est_state: FitState, traj: Trajectory,
                      hparams: Hparams, key: Array) -> tuple[FitState, Metrics]:
        """The estimator's fit of this update; with a burn-in, none before it ends, and with
        pretraining, the burn-in windows kept and the pretrained part fitted once when it
        ends, then frozen."""
        pretrain_key, fit_key = jax.random.split(key)
        frozen = None
        if pretrain_steps:
            # One window written per burn-in update (after it, the same window rewritten).
            index = jnp.minimum(state.update, burn_in - 1)
            kept = jax.tree.map(
                lambda b, x: b.at[index].set(jnp.where(state.update < burn_in, x, b[index])),
                est_state.pretrain_buffer, traj)
            est_state = est_state.replace(pretrain_buffer=kept)
            est_state = pretrain(estimator.pretrain_loss, est_state, hparams,
                                 hparams.estimator_lr, hparams.estimator_max_grad_norm,
                                 pretrain_key, pretrain_steps,
                                 estimator.pretrained(est_state.params),
                                 when=state.update == burn_in, prepare=estimator.pretrain_data)
            frozen = estimator.pretrained(est_state.params)
        fitted, fit_metrics = fit(
            estimator.loss, est_state, traj, hparams,
            hparams.estimator_lr * lr_scale(state, config.estimator.anneal_lr),
            hparams.estimator_max_grad_norm, fit_key, config.estimator.fit,
            weight_decay=hparams.estimator_weight_decay, frozen=frozen)
        if not burn_in:
            return fitted, fit_metrics
        active = state.update >= burn_in
        fitted = jax.tree.map(lambda new, old: jnp.where(active, new, old), fitted, est_state)
        return fitted, {k: jnp.where(active, v, jnp.nan) for k, v in fit_metrics.items()}

    def redistribute(rd_state: FitState, traj: Trajectory, key: Array, pi: Optional[Array]):
        """The redistribute stage on ``traj`` with the current model (the exact one reads
        ``pi``, the behaviour table): ``(new trajectory, stage state with its memory, metrics)``."""
        rd_params = rd_state.params
        if exact_redistributor:
            rd_params = gt_lib.exact_model_params(exact_redistributor, reference,
                                                  reference.mdp(), pi, 1.0)
        traj, memory, rd_metrics = redistributor.redistribute(rd_params, traj, key,
                                                              rd_state.memory)
        return traj, rd_state.replace(memory=memory), rd_metrics

    def assign_credit(state: TrainState, traj: Trajectory, hparams: Hparams, key: Array):
        traj, credit, state, metrics, _ = credit_step(state, traj, hparams, key)
        return traj, credit, state, metrics

    def credit_step(state: TrainState, traj: Trajectory, hparams: Hparams, key: Array):
        """:func:`assign_credit`, also returning the estimator parameters the credit used."""
        rd_fit_key, rd_key, est_fit_key, est_key = jax.random.split(key, 4)
        metrics = {}
        rd_state, est_state = state.redistributor, state.estimator
        pi = (behaviour_table(state) if estimator.is_oracle or exact_redistributor else None)
        if redistributor is not None:
            if redistributor.learned:
                sample = (None if redistributor.sample is None
                          else lambda k: redistributor.sample(rd_state.memory, k))
                fitted, fit_metrics = fit(
                    redistributor.loss, rd_state, traj, hparams,
                    hparams.redistributor_lr * lr_scale(state, config.redistribute.anneal_lr),
                    hparams.redistributor_max_grad_norm, rd_fit_key, config.redistribute.fit,
                    sample, hparams.redistributor_weight_decay)
                rd_state = fitted if not burn_in else jax.tree.map(
                    lambda new, old: jnp.where(state.update >= burn_in, new, old), fitted,
                    rd_state)
                metrics.update({f"redistribute/{k}": v for k, v in fit_metrics.items()})
            traj, rd_state, rd_metrics = redistribute(rd_state, traj, rd_key, pi)
            metrics.update({f"redistribute/{k}": v for k, v in rd_metrics.items()})
        if estimator.is_oracle:
            params = exact_params(pi, hparams, estimator.exact_model)
        else:
            params = est_state.params
            if estimator.learned:
                est_state, fit_metrics = fit_estimator(state, est_state, traj, hparams,
                                                       est_fit_key)
                metrics.update({f"estimator/{k}": v for k, v in fit_metrics.items()})
            if not config.estimator.assign_before_fit:
                params = est_state.params
        credit = jax.lax.stop_gradient(estimator.assign(params, traj, hparams, est_key))
        if estimator.update is not None:
            est_state = est_state.replace(params=estimator.update(params, traj, hparams))
        state = state.replace(estimator=est_state, redistributor=rd_state)
        return traj, credit, state, metrics, params

    def agent_loss(agent_params, traj: Trajectory, credit: Credit, hparams: Hparams):
        """The objective's loss on a window's transitions (memoryless agents: the meta-step)."""
        batch, credit = flatten_steps(objective_batch(traj, credit))
        return minibatch_loss(agent_net, objective, agent_params, batch, credit, hparams)[0]

    def meta_step(state: TrainState, traj: Trajectory, est_params, hparams: Hparams,
                  key: Array):
        """The meta-gradient's step on γ and λ (``jaxcredit.agents.meta_gradient``)."""
        lr = hparams.lr * lr_scale(state, config.anneal_lr)
        meta, value = meta_lib.one_step(
            state.meta, state.agent.params, *meta_lib.split_columns(traj, N), hparams,
            assign=lambda window, hp: estimator.assign(est_params, window, hp, key),
            loss=agent_loss,
            step=lambda params, grads: adam_step(
                params, state.agent.opt_state, grads, lr, hparams.max_grad_norm,
                config.adam_eps, hparams.weight_decay, eps_root=meta_lib.EPS_ROOT)[0])
        return meta, {"meta/loss": value}

    def update_step(state: TrainState, hparams: Hparams) -> tuple[TrainState, Metrics]:
        key, act_key, credit_key, opt_key = jax.random.split(state.key, 4)
        window = collect(state, hparams, act_key)
        meta_hparams = hparams
        if config.meta_gradient:  # γ and λ as the meta-gradient has adapted them so far
            meta_hparams = meta_lib.adapted(hparams, state.meta.offsets)
        traj, credit, state, credit_metrics, est_params = credit_step(
            state, window.trajectory, meta_hparams, credit_key)
        agent, metrics = optimise(
            agent_net, objective, state.agent, traj, credit, window.memory, window.first,
            opt_key, meta_hparams, meta_hparams.lr * lr_scale(state, config.anneal_lr), E, M,
            config.adam_eps)
        meta = state.meta
        if config.meta_gradient:
            meta, meta_metrics = meta_step(state, traj, est_params, hparams,
                                           jax.random.fold_in(credit_key, 1))
            metrics.update(meta_metrics, **{
                f"meta/{name}": getattr(meta_hparams, field)
                for name, field in meta_lib.META_PARAMETERS.items()
                if name in config.meta_gradient})
        frozen = burn_in + config.model_warmup_updates
        if frozen:  # burn-in updates only act; warm-up updates also fit the models
            agent, meta = jax.tree.map(
                lambda new, old: jnp.where(state.update >= frozen, new, old), (agent, meta),
                (state.agent, state.meta))
        count = window.episodes.count
        metrics.update({
            "episode_return": jnp.where(count > 0, window.episodes.return_sum / count, jnp.nan),
            "episode_length": jnp.where(count > 0, window.episodes.length_sum / count, jnp.nan),
            "episodes": count,
            **credit_metrics,
        })
        if success is not None:
            metrics["success_rate"] = jnp.where(
                count > 0, window.episodes.success_count / count, jnp.nan)
        if config.critic:
            metrics["explained_variance"] = losses.explained_variance(
                traj.value, credit.value_target)
        metrics.update({f"credit/{k}": v for k, v in credit.diagnostics.items()})
        if traj.extras is not None and "label" in traj.extras:
            metrics.update({f"credit/{k}": v for k, v in step_label_scores(
                traj, credit.advantage, episodic).items()})
        state = state.replace(agent=agent, runner=window.runner, key=key,
                              update=state.update + 1, meta=meta)
        return state, metrics

    def credit_error_metrics(state: TrainState, traj: Trajectory, hparams: Hparams, exact,
                             pi: Array, key: Array) -> Metrics:
        """The fitted model's credit on ``traj`` against its exact twin's, same window and key
        (``jaxcredit.agents.credit_error``); ``pi`` is the behaviour table."""
        params = state.agent.params
        fitted = estimator.assign(state.estimator.params, traj, hparams, key).advantage
        oracle = twin.assign(exact, traj, hparams, key).advantage
        mdp = ground_truth.mdp()
        decisive = credit_error.decisive_states(tabular.advantages(mdp, pi, hparams.gamma),
                                                mdp.reward)
        metrics = credit_error.credit_error(fitted, oracle, traj.action, decisive[traj.state])
        if (gt_lib.exact_model(estimator.exact_model).linear_in_reward
                and ground_truth.reward_values is not None):
            metrics.update(credit_error.reward_value_errors(
                lambda w: estimator.assign(state.estimator.params, w, hparams, key).advantage,
                lambda w: twin.assign(exact, w, hparams, key).advantage, traj,
                ground_truth.reward_values[0], decisive[traj.state]))

        def estimated_gradient(advantage):
            return jax.grad(lambda p: credit_error.policy_surrogate(
                network.apply(p, traj.obs, method=ActorCritic.policy), traj.action,
                advantage))(params)

        exact_gradient = jax.grad(lambda p: gt_lib.exact_return(
            ground_truth, mdp, gt_lib.policy_table(network, p, mdp)))(params)
        g_fitted, g_oracle = estimated_gradient(fitted), estimated_gradient(oracle)
        metrics["grad_cos_fitted"] = credit_error.tree_cosine(g_fitted, exact_gradient)
        metrics["grad_cos_oracle"] = credit_error.tree_cosine(g_oracle, exact_gradient)
        metrics["grad_cos_to_oracle"] = credit_error.tree_cosine(g_fitted, g_oracle)
        metrics["grad_norm_ratio"] = optax.global_norm(g_fitted) / optax.global_norm(g_oracle)
        unit = optax.global_norm(exact_gradient)
        metrics["grad_ascent_fitted"] = credit_error.tree_dot(g_fitted, exact_gradient) / unit
        metrics["grad_ascent_oracle"] = credit_error.tree_dot(g_oracle, exact_gradient) / unit
        if estimator.credit_ratio is not None and twin.credit_ratio is not None:
            # ρ = π/h at the actions taken: divided (hca_return) or learned (hca_dice).
            error = (estimator.credit_ratio(state.estimator.params, traj, hparams)
                     - twin.credit_ratio(exact, traj, hparams))
            metrics["ratio_rmse_to_exact"] = jnp.sqrt(jnp.mean(error ** 2))
        return metrics

    def evaluate(state: TrainState, hparams: Hparams) -> Metrics:
        key = jax.random.fold_in(state.eval_key, state.update)
        play_key, window_key, pair_key, credit_key, rd_key = jax.random.split(key, 5)

        def policy(memory, obs, first):  # the target policy: no exploration mixture
            if state.runner.normalizer is not None:  # the training statistics, frozen
                obs = state.runner.normalizer.observation(obs)
            return agent_net.act(state.agent.params, memory, obs, first, target=True)

        episodes = config.evaluation.episodes
        played = play_episodes(env, env_params, policy, play_key, episodes, eval_steps, success,
                               agent_net.initial_memory(2 * episodes), law)
        metrics = {f"eval/{k}": v for k, v in played.items()}
        if reference is not None and exact_policy:
            mdp = reference.mdp()
            pi = gt_lib.policy_table(network, state.agent.params, mdp, behaviour=False)
            metrics["eval/exact_return"] = gt_lib.exact_return(reference, mdp, pi)
            metrics.update({f"eval/{k}": v for k, v in reference.task_metrics(pi).items()})
        # The diagnostics against exact models run here, at evaluation points only, on a
        # held-out window of the current policy (not used for training): the stages as they
        # will treat the next update's window.
        traj = None
        if estimator.diagnose is not None:  # an exact law without tabular ground truth
            traj = collect(state, hparams, window_key).trajectory
            metrics.update({f"credit/{k}": v for k, v in estimator.diagnose(
                state.estimator.params, traj, hparams).items()})
        if reference is None or not exact_policy or (twin is None and redistributor is None):
            return {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
        if traj is None:
            traj = collect(state, hparams, window_key).trajectory
        behaviour = behaviour_table(state)
        if redistributor is not None:
            new, _, _ = redistribute(state.redistributor, traj, rd_key, behaviour)
            metrics.update({f"redistribute/{k}": v for k, v in gt_lib.redistribution_quality(
                reference.mdp(), behaviour, hparams.gamma, traj.state, traj.action,
                new.reward).items()})
        if twin is not None:
            exact = exact_params(behaviour, hparams, estimator.exact_model)
            if estimator.hindsight is not None:
                log_h, weight = estimator.hindsight(state.estimator.params, traj, hparams,
                                                    pair_key)
                log_exact, _ = twin.hindsight(exact, traj, hparams, pair_key)
                metrics["estimator/kl_to_exact"] = gt_lib.kl_divergence(log_exact, log_h, weight)
            metrics.update({f"credit/{k}": v for k, v in credit_error_metrics(
                state, traj, hparams, exact, behaviour, credit_key).items()})
        return {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}

    return Engine(config=config, env=env, env_params=env_params, network=network,
                  agent_network=agent_net,
                  objective=objective, estimator=estimator, relabeller=relabeller,
                  redistributor=redistributor, ground_truth=ground_truth, init=init,
                  collect=collect, assign_credit=assign_credit, update_step=update_step,
                  evaluate=evaluate)

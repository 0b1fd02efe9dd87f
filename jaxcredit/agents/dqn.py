"""The off-policy engine: DQN and Double DQN with replay inside the compiled step.

``make_dqn_engine(config)`` returns a :class:`DQNEngine` with the on-policy engine's shape
(``init``, ``update_step``, ``evaluate``, ``run``, ``train``), so the host loop, chunks,
checkpoints and exact resume, sharded seed × hyper-parameter sweeps, evaluation, run directories,
plots and the command line (``jaxcredit train --algo dqn``) work unchanged. One update is::

    ACT      T steps of N vmapped environments, ε-greedy on Q_online        (agents.rollout)
    STORE    the [T, N] transitions into the flashbax replay (agents.replay), held in the state
    LEARN    gradient_steps times, once learning_starts env steps are stored:
               sample B windows of S steps, RELABEL them (optional stage, e.g. HER),
               y = the episode-aware n-step Q-learning / Double-Q target (estimators.q_learning)
                   from Q_target at the final observations,
               one Adam step on mean (Q_online(s, a) − y)² (or Huber)
    TARGET   every target_update_every updates: θ⁻ ← τ θ + (1 − τ) θ⁻ (a copy for τ = 1)

ε decays linearly from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_fraction`` of the
updates (``Hparams``; sweepable like every float). The config's ``estimator`` names the target:
``double_q`` (van Hasselt et al. 2016, the default), ``q_learning`` (Mnih et al. 2015), or
``q_lambda``: Peng's Q(λ) over stored sequences of ``n_step`` steps, bootstrapped from the
target network at every step and mixed by λ (``Hparams.lambda_``).

Training transition. Each sampled window of S steps trains on one row, ``anchor``: the row after
the relabeller's ``past`` context. S = anchor + max(n_step, 1 + relabeller.future): enough for
the n-step target and for the goals a relabeller draws from the rest of the episode. Only the
rows the target reads (anchor ... anchor + n − 1) go through the networks.

Evaluation plays ``eval_episodes`` episodes ε-greedy with ε = ``EVAL_EPSILON`` (``eval/return``)
and as many greedy (``eval/return_greedy``); on goal-conditioned environments also
``eval/success_rate`` and ``eval/success_rate_greedy``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.evaluation import play_episodes
from jaxcredit.agents.replay import Replay, Step, as_trajectory, make_replay
from jaxcredit.agents.rollout import EnvRunner, memoryless, reset_runner, rollout
from jaxcredit.agents.state import AgentState
from jaxcredit.agents.runs import (DEFAULT_EVAL_MAX_STEPS, EngineRuns, discrete_actions,
                                   episode_horizon, make_environment, strong)
from jaxcredit.envs.goals import goal_env, success_fn
from jaxcredit.estimators import q_targets
from jaxcredit.fitting import adam_step
from jaxcredit.networks import QNetwork
from jaxcredit.relabel import Relabeller, make_relabeller

Array = jax.Array
Metrics = dict[str, Array]

# ε of the sampled evaluation episodes (the greedy ones use ε = 0), as in Mnih et al. (2015).
EVAL_EPSILON = 0.05


@struct.dataclass
class DQNState:
    """State of one off-policy run: everything a resumed run needs, the replay included.

    Attributes:
      agent: the online Q-network's parameters and Adam state.
      target_params: the target network θ⁻.
      replay: the flashbax buffer state.
      runner: the environments.
      key, eval_key: PRNG keys of training and of the evaluations (kept apart).
      update: int32 number of updates done.
    """

    agent: AgentState
    target_params: Any
    replay: Any
    runner: EnvRunner
    key: jax.Array
    eval_key: jax.Array
    update: jax.Array


def epsilon_greedy_logits(q_values: Array, epsilon) -> Array:
    """Logits whose categorical distribution is ε-greedy on ``q_values``: ε/A on every action
    plus 1 − ε on the greedy one (the first of tied maxima)."""
    num_actions = q_values.shape[-1]
    greedy = jax.nn.one_hot(jnp.argmax(q_values, -1), num_actions, dtype=jnp.float32)
    probs = epsilon / num_actions + (1.0 - epsilon) * greedy
    return jnp.log(probs)


def epsilon_at(update: Array, hparams: Hparams, num_updates: int) -> Array:
    """Linear decay from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_fraction · U``
    updates, constant after."""
    progress = update.astype(jnp.float32) / jnp.maximum(hparams.epsilon_fraction * num_updates,
                                                        1.0)
    return hparams.epsilon_end + (hparams.epsilon_start - hparams.epsilon_end) * jnp.maximum(
        0.0, 1.0 - progress)


def episode_metrics(episodes: Any, with_success: bool) -> Metrics:
    """Means over the training episodes that ended in the window (NaN if none ended): return,
    length and, on tasks with a goal, the success rate; and their count."""
    count = episodes.count

    def mean(total):
        return jnp.where(count > 0, total / count, jnp.nan)

    metrics = {"episode_return": mean(episodes.return_sum),
               "episode_length": mean(episodes.length_sum), "episodes": count}
    if with_success:
        metrics["success_rate"] = mean(episodes.success_count)
    return metrics


def act_epsilon_greedy(env: Any, env_params: Any, network: QNetwork, state: Any,
                       hparams: Hparams, num_updates: int, key: Array, num_steps: int,
                       success: Optional[Callable]):
    """``num_steps`` steps of the state's environments ε-greedy on Q of ``state.agent.params``,
    ε from the schedule at ``state.update``: ``(runner, trajectory, episodes, ε)``."""
    epsilon = epsilon_at(state.update, hparams, num_updates)

    def policy(obs):
        return epsilon_greedy_logits(network.apply(state.agent.params, obs), epsilon)

    runner, traj, episodes = rollout(env, env_params, memoryless(policy), state.runner, key,
                                     num_steps, None, success)
    return runner, traj, episodes, epsilon


def q_evaluation(env: Any, env_params: Any, network: QNetwork, episodes: int, max_steps: int,
                 success: Optional[Callable]) -> Callable:
    """``evaluate(state, hparams)`` of a Q-learning engine (DQN, PQN): ``episodes`` episodes
    ε-greedy with ε = ``EVAL_EPSILON`` (``eval/return``) and as many greedy, from the state's
    ``agent.params``, ``eval_key`` and ``update``."""

    def evaluate(state: Any, hparams: Hparams) -> Metrics:
        del hparams
        key = jax.random.fold_in(state.eval_key, state.update)

        def policy(obs):
            return epsilon_greedy_logits(network.apply(state.agent.params, obs), EVAL_EPSILON)

        played = play_episodes(env, env_params, memoryless(policy), key, episodes, max_steps,
                               success)
        return {f"eval/{k}": jnp.asarray(v, jnp.float32) for k, v in played.items()}

    return evaluate


@dataclasses.dataclass(frozen=True, eq=False)
class DQNEngine(EngineRuns):
    """The pure functions of one off-policy configuration (module docstring).

    Attributes:
      config, env, env_params, network: as for the on-policy ``Engine`` (``QNetwork`` here).
      relabeller: the relabel stage or None.
      replay: the buffer's static description (``agents.replay.Replay``).
      anchor: the row of a sampled window that is trained on.
      init, update_step, evaluate: the engine shape.
      learn: ``(DQNState, Hparams, key) -> (AgentState, metrics)``, one gradient step.
    """

    config: TrainConfig
    env: Any
    env_params: Any
    network: QNetwork
    relabeller: Optional[Relabeller]
    replay: Replay
    anchor: int
    init: Callable[[Array], DQNState]
    update_step: Callable[[DQNState, Hparams], tuple[DQNState, Metrics]]
    evaluate: Callable[[DQNState, Hparams], Metrics]
    learn: Callable[..., tuple[AgentState, Metrics]]
    estimator: Any = None  # no credit estimator: the Q target is the config's `estimator` name


def make_dqn_engine(config: TrainConfig, env: Any = None, env_params: Any = None) -> DQNEngine:
    """Builds the off-policy engine of a resolved ``config`` (``algo="dqn"``)."""
    env, env_params = make_environment(config, env, env_params)
    num_actions = discrete_actions(env, env_params, config.env)
    horizon = episode_horizon(env_params)
    relabeller = None
    if config.relabel.name:
        relabeller = make_relabeller(config.relabel.name, context={"env": env, "horizon": horizon},
                                     **dict(config.relabel.options))
    past = relabeller.past if relabeller else 0
    future = relabeller.future if relabeller else 0
    off = config.off_policy
    n = off.n_step
    anchor = past
    window = anchor + max(n, 1 + future)
    T, N = config.num_steps, config.num_envs
    replay = make_replay(off.buffer_size, N, window, off.batch_size)
    if replay.steps_per_env < T:
        raise ValueError(f"buffer_size={off.buffer_size} holds {replay.steps_per_env} steps "
                         f"per environment, fewer than one update's {T} (num_steps)")
    obs_shape = tuple(env.observation_space(env_params).shape)
    network = QNetwork(num_actions, config.hidden_sizes, config.activation,
                       obs_ndim=max(len(obs_shape), 1), dueling=off.dueling)
    success = success_fn(env)
    goals = goal_env(env)
    double = config.estimator.name == "double_q"
    peng = config.estimator.name == "q_lambda"
    U = config.num_updates
    # The first update after which learning_starts env steps are stored (in Python: no int32
    # step count to overflow in long runs).
    first_learning_update = -(-off.learning_starts // (T * N))
    eval_steps = config.evaluation.max_steps or int(horizon or DEFAULT_EVAL_MAX_STEPS)

    def init(key: Array) -> DQNState:
        net_key, env_key, run_key, eval_key = jax.random.split(key, 4)
        runner = reset_runner(env, env_params, env_key, N)
        params = network.init(net_key, runner.obs)
        obs = jnp.zeros(obs_shape, runner.obs.dtype)
        example = Step(obs=obs, action=jnp.zeros((), jnp.int32), reward=jnp.zeros(()),
                       terminated=jnp.zeros((), bool), truncated=jnp.zeros((), bool),
                       next_obs=obs, achieved_goal=None if goals is None
                       else goals.achieved_goal(obs))
        state = DQNState(
            agent=AgentState(params, optax.scale_by_adam(eps=config.adam_eps).init(params)),
            target_params=jax.tree.map(jnp.copy, params), replay=replay.init(example),
            runner=runner, key=run_key, eval_key=eval_key, update=jnp.zeros((), jnp.int32))
        return jax.tree.map(strong, state)

    def q_loss(params, obs, action, target, hparams):
        q = network.apply(params, obs)
        chosen = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        error = chosen - target
        per_step = optax.huber_loss(error) if off.huber else jnp.square(error)
        loss = jnp.mean(per_step)
        return loss, {"loss": loss, "q_mean": jnp.mean(chosen),
                      "td_abs": jnp.mean(jnp.abs(error))}

    def replayed_rows(state: DQNState, key: Array) -> tuple[Any, Metrics]:
        """The rows anchor ... anchor + n − 1 of B sampled windows, relabelled, ``[n, B]``."""
        sample_key, relabel_key = jax.random.split(key)
        stream, times = replay.sample_indices(state.replay, sample_key)
        if relabeller is None:
            return as_trajectory(replay.gather(state.replay, stream, times[:, :n])), {}
        if relabeller.relabel_rows is None or goals is None:
            window_steps = as_trajectory(replay.gather(state.replay, stream, times))
            relabelled = relabeller.relabel(window_steps, relabel_key)
            return jax.tree.map(lambda x: x[anchor:anchor + n], relabelled), {}
        context = replay.gather_fields(state.replay, stream, times,
                                       ("terminated", "truncated", "achieved_goal"))
        rows = as_trajectory(replay.gather(state.replay, stream, times[:, anchor:anchor + n]))
        rows, relabelled = relabeller.relabel_rows(
            rows, context["terminated"] | context["truncated"], context["achieved_goal"],
            relabel_key)
        return rows, {"relabel/fraction": jnp.mean(relabelled.astype(jnp.float32))}

    def learn(state: DQNState, hparams: Hparams, key: Array, lr) -> tuple[AgentState, Metrics]:
        rows, metrics = replayed_rows(state, key)  # what the target reads
        q_next_target = network.apply(state.target_params, rows.next_obs)
        if peng:  # Peng's Q(λ) over the n sampled steps, from the target network
            target = q_targets.peng_q_lambda_targets(rows.reward, rows.terminated,
                                                      rows.truncated, q_next_target,
                                                      hparams.gamma, hparams.lambda_)[0]
        else:
            if double:
                q_next_online = network.apply(state.agent.params, rows.next_obs)
                bootstrap = q_targets.double_q_learning_bootstrap(q_next_target, q_next_online)
            else:
                bootstrap = q_targets.q_learning_bootstrap(q_next_target)
            target = q_targets.n_step_q_targets(rows.reward, rows.terminated, rows.truncated,
                                                 bootstrap, hparams.gamma, n)[0]
        grads, loss_metrics = jax.grad(q_loss, has_aux=True)(
            state.agent.params, rows.obs[0], rows.action[0], target, hparams)
        params, opt_state, grad_norm = adam_step(state.agent.params, state.agent.opt_state,
                                                 grads, lr, hparams.max_grad_norm, config.adam_eps,
                                                 hparams.weight_decay)
        metrics.update(loss_metrics, grad_norm=grad_norm,
                       reward_mean=jnp.mean(rows.reward[0]))
        return AgentState(params, opt_state), metrics

    def update_step(state: DQNState, hparams: Hparams) -> tuple[DQNState, Metrics]:
        key, act_key, learn_key = jax.random.split(state.key, 3)
        runner, tr, episodes, epsilon = act_epsilon_greedy(
            env, env_params, network, state, hparams, U, act_key, T, success)
        stored = replay.add(state.replay, Step(
            obs=tr.obs, action=tr.action.astype(jnp.int32), reward=tr.reward,
            terminated=tr.terminated, truncated=tr.truncated, next_obs=tr.next_obs,
            achieved_goal=None if goals is None else goals.achieved_goal(tr.next_obs)))
        state = state.replace(replay=stored, runner=runner)
        lr = hparams.lr * (1.0 - state.update.astype(jnp.float32) / U
                           if config.anneal_lr else 1.0)
        ready = replay.can_sample(stored) & (state.update + 1 >= first_learning_update)

        def gradient_steps(agent):
            def one(agent, step_key):
                return learn(state.replace(agent=agent), hparams, step_key, lr)
            if off.gradient_steps == 1:  # no loop of one iteration (faster on XLA:CPU)
                return one(agent, jax.random.split(learn_key, 1)[0])
            agent, metrics = jax.lax.scan(one, agent,
                                          jax.random.split(learn_key, off.gradient_steps))
            return agent, jax.tree.map(jnp.mean, metrics)

        shapes = jax.eval_shape(gradient_steps, state.agent)[1]
        skipped = lambda agent: (agent, jax.tree.map(  # noqa: E731
            lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes))
        agent, metrics = jax.lax.cond(ready, gradient_steps, skipped, state.agent)
        update = state.update + 1
        refresh = (update % off.target_update_every) == 0
        target = jax.lax.cond(
            refresh, lambda: optax.incremental_update(agent.params, state.target_params,
                                                      hparams.tau),
            lambda: state.target_params)
        metrics.update(episode_metrics(episodes, success is not None), epsilon=epsilon, lr=lr,
                       learning=ready.astype(jnp.float32))
        state = state.replace(agent=agent, target_params=target, key=key, update=update)
        return state, metrics

    evaluate = q_evaluation(env, env_params, network, config.evaluation.episodes, eval_steps,
                            success)

    return DQNEngine(config=config, env=env, env_params=env_params, network=network,
                     relabeller=relabeller, replay=replay, anchor=anchor, init=init,
                     update_step=update_step, evaluate=evaluate, learn=learn)

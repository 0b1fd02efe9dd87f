"""PQN: Q-learning over vmapped environments without replay or target network.

Gallici, Fellows, Ellis, Pou, Masmitja, Foerster & Martin, "Simplifying Deep Temporal Difference
Learning", ICLR 2025 (arXiv 2407.04811); the authors' code is ``purejaxql``
(``purejaxql/pqn_gymnax.py``, ``config/alg/pqn_cartpole.yaml``). ``make_pqn_engine(config)``
returns an engine of the on-policy engine's shape (``init``, ``update_step``, ``evaluate``,
``run``, ``train``), so the host loop, checkpoints and exact resume, sweeps, evaluation and the
command line (``jaxcredit train --algo pqn``) work unchanged. One update is::

    ACT      T steps of N vmapped environments, ε-greedy on Q                (agents.rollout)
    TARGET   Peng's Q(λ) return over the window (:func:`peng_q_lambda_targets`), from
             max_a Q(s'_{t+1}, a) under the parameters that acted
    LEARN    epochs × minibatches of shuffled transitions: a RAdam step on
             ½ mean (Q(s_t, a_t) − G_t^λ)², gradients clipped by global norm

The Q-network normalises every hidden layer (LayerNorm, ``--layer-norm``, the preset's default):
what lets PQN drop the target network and the replay buffer. Rewards are scaled by
``--reward-scale`` for learning (the reported returns are the environment's). ε decays linearly
from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_fraction`` of the updates and the
learning rate linearly to 0 (``--anneal-lr``), as the reference's.

Where jaxcredit departs from the reference: a time-out bootstraps from the final observation
and cuts the λ-chain (the reference treats every episode end as terminal); the returns
bootstrap from max_a Q(s'_{t+1}, a) of the final observations (the reference reads the next
step's acting-time Q, which after a reset belongs to the next episode, and zeroes it at ends).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.dqn import act_epsilon_greedy, episode_metrics, q_evaluation
from jaxcredit.agents.rollout import EnvRunner, reset_runner
from jaxcredit.agents.runs import (DEFAULT_EVAL_MAX_STEPS, EngineRuns, discrete_actions,
                                   episode_horizon, make_environment, strong)
from jaxcredit.agents.state import AgentState
from jaxcredit.envs.goals import success_fn
from jaxcredit.estimators.q_targets import peng_q_lambda_targets
from jaxcredit.networks import QNetwork

Array = jax.Array
Metrics = dict[str, Array]


@struct.dataclass
class PQNState:
    """State of one PQN run: the Q-network and its RAdam state, the environments, the keys of
    training and of evaluation, and the number of updates done."""

    agent: AgentState
    runner: EnvRunner
    key: jax.Array
    eval_key: jax.Array
    update: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class PQNEngine(EngineRuns):
    """The pure functions of one PQN configuration (module docstring)."""

    config: TrainConfig
    env: Any
    env_params: Any
    network: QNetwork
    init: Callable[[Array], PQNState]
    update_step: Callable[[PQNState, Hparams], tuple[PQNState, Metrics]]
    evaluate: Callable[[PQNState, Hparams], Metrics]
    estimator: Any = None  # the target is Peng's Q(λ), named by the config's estimator
    relabeller: Any = None


def make_pqn_engine(config: TrainConfig, env: Any = None, env_params: Any = None) -> PQNEngine:
    """Builds the PQN engine of a resolved ``config`` (``algo="pqn"``)."""
    env, env_params = make_environment(config, env, env_params)
    num_actions = discrete_actions(env, env_params, config.env)
    off = config.off_policy
    obs_shape = tuple(env.observation_space(env_params).shape)
    network = QNetwork(num_actions, config.hidden_sizes, config.activation,
                       obs_ndim=max(len(obs_shape), 1), layer_norm=off.layer_norm)
    success = success_fn(env)
    T, N, U = config.num_steps, config.num_envs, config.num_updates
    M, E = config.num_minibatches, config.update_epochs
    horizon = episode_horizon(env_params)
    eval_steps = config.evaluation.max_steps or int(horizon or DEFAULT_EVAL_MAX_STEPS)
    # RAdam (Liu et al. 2020), as the reference; the learning rate is applied outside so that it
    # can be annealed and swept.
    optimiser = optax.scale_by_radam(eps=config.adam_eps)

    def init(key: Array) -> PQNState:
        net_key, env_key, run_key, eval_key = jax.random.split(key, 4)
        runner = reset_runner(env, env_params, env_key, N)
        params = network.init(net_key, runner.obs)
        state = PQNState(agent=AgentState(params, optimiser.init(params)), runner=runner,
                         key=run_key, eval_key=eval_key, update=jnp.zeros((), jnp.int32))
        return jax.tree.map(strong, state)

    def loss(params, obs, action, target):
        q = network.apply(params, obs)
        chosen = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        value = 0.5 * jnp.mean(jnp.square(chosen - target))
        return value, {"loss": value, "q_mean": jnp.mean(chosen)}

    def step(agent: AgentState, batch, lr, max_grad_norm):
        obs, action, target = batch
        grads, metrics = jax.grad(loss, has_aux=True)(agent.params, obs, action, target)
        grad_norm = optax.global_norm(grads)  # clipped as optax.clip_by_global_norm
        grads = jax.tree.map(
            lambda g: g * max_grad_norm / jnp.maximum(grad_norm, max_grad_norm), grads)
        updates, opt_state = optimiser.update(grads, agent.opt_state, agent.params)
        params = jax.tree.map(lambda p, u: p - lr * u, agent.params, updates)
        return AgentState(params, opt_state), {**metrics, "grad_norm": grad_norm}

    def update_step(state: PQNState, hparams: Hparams) -> tuple[PQNState, Metrics]:
        key, act_key, learn_key = jax.random.split(state.key, 3)
        runner, tr, episodes, epsilon = act_epsilon_greedy(
            env, env_params, network, state, hparams, U, act_key, T, success)
        reward = tr.reward * off.reward_scale
        q_next = network.apply(state.agent.params, tr.next_obs)
        target = peng_q_lambda_targets(reward, tr.terminated, tr.truncated, q_next,
                                       hparams.gamma, hparams.lambda_)
        lr = hparams.lr * (1.0 - state.update.astype(jnp.float32) / U
                           if config.anneal_lr else 1.0)
        flat = jax.tree.map(lambda x: x.reshape((T * N,) + x.shape[2:]),
                            (tr.obs, tr.action.astype(jnp.int32), target))

        def epoch(agent, epoch_key):
            order = jax.random.permutation(epoch_key, T * N)
            batches = jax.tree.map(lambda x: x[order].reshape((M, -1) + x.shape[1:]), flat)
            return jax.lax.scan(lambda a, b: step(a, b, lr, hparams.max_grad_norm), agent,
                                batches)

        agent, metrics = jax.lax.scan(epoch, state.agent, jax.random.split(learn_key, E))
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics.update(episode_metrics(episodes, success is not None), epsilon=epsilon, lr=lr,
                       target_mean=jnp.mean(target))
        return state.replace(agent=agent, runner=runner, key=key,
                             update=state.update + 1), metrics

    evaluate = q_evaluation(env, env_params, network, config.evaluation.episodes, eval_steps,
                            success)

    return PQNEngine(config=config, env=env, env_params=env_params, network=network, init=init,
                     update_step=update_step, evaluate=evaluate)

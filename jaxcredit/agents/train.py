"""The training engine: ``make_train(config) -> train(key, hparams) -> (final_state, metrics)``.

One update (``Engine.update_step``) is, in one compiled function::

    ACT       lax.scan over T steps of vmapped envs, policy tower only     (agents.rollout)
    EVALUATE  V(s_t) and V(s'_{t+1}) on the whole window in two batched calls
    CREDIT    estimator.assign(params, trajectory, hparams) under stop_gradient
    OPTIMISE  epochs × minibatches of Adam steps on
                policy loss + vf_coef · value loss − ent_coef · entropy + est_coef · estimator loss

A run is ``lax.scan`` of ``update_step`` over updates, so ``jax.jit(jax.vmap(train))`` over keys
and stacked ``Hparams`` is a seed × hyper-parameter sweep in one compile. The host loop runs the
same ``update_step`` in chunks (``Engine.run``) and gets bit-identical numbers.

Minibatches. Policy and value losses use minibatches of transitions shuffled over the whole
``T × N`` window (as PureJaxRL and CleanRL do). A learned estimator's loss needs whole sequences, so
each minibatch also carries a disjoint slice of N / M environments (shuffled per epoch) with their
full T-step trajectories; its loss is computed on that slice in the same gradient step. Hence
``num_envs`` must be divisible by ``num_minibatches``.

Learned estimators share the agent's Adam optimiser and learning-rate schedule; ``est_coef``
weights their loss. Their gradient reaches only their own parameters, because ``assign`` is
evaluated under ``stop_gradient`` and the agent's losses do not read the estimator's parameters.

Metrics are per-update scalars reduced inside the program (no host callbacks, no per-step
arrays): ``episode_return`` / ``episode_length`` are means over the episodes that ended during the
update's rollout (NaN if none ended), ``episodes`` their count; optimisation metrics are means over
all epochs × minibatches; ``credit/*`` are the estimator's diagnostics.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from jaxcredit.agents import losses
from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.envs import make as make_env
from jaxcredit.agents.rollout import Transitions, reset_runner, rollout
from jaxcredit.agents.state import Batch, TrainState
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.base import Estimator
from jaxcredit.networks import ActorCritic
from jaxcredit.types import Credit, Trajectory

Array = jax.Array
Metrics = dict[str, Array]

# Adam's ε as in PureJaxRL / CleanRL PPO (1e-5 rather than optax's 1e-8).
ADAM_EPS = 1e-5


@dataclasses.dataclass(frozen=True, eq=False)
class Engine:
    """The pure functions of one training configuration.

    Attributes:
      config: the resolved ``TrainConfig``.
      env, env_params: the gymnax environment.
      network: the ``ActorCritic`` module.
      estimator: the credit ``Estimator``.
      init: ``key -> TrainState``.
      collect: ``(TrainState, Hparams, key) -> Batch``: act, evaluate the critic, assign credit.
      update_step: ``(TrainState, Hparams) -> (TrainState, metrics)``, one update.
    """

    config: TrainConfig
    env: Any
    env_params: Any
    network: ActorCritic
    estimator: Estimator
    init: Callable[[Array], TrainState]
    collect: Callable[[TrainState, Hparams, Array], Batch]
    update_step: Callable[[TrainState, Hparams], tuple[TrainState, Metrics]]

    def run(self, state: TrainState, hparams: Hparams, num_updates: int):
        """``num_updates`` updates from ``state``: ``(state, metrics [num_updates])``."""
        return jax.lax.scan(lambda s, _: self.update_step(s, hparams), state, None, num_updates)

    def train(self, key: Array, hparams: Hparams) -> tuple[TrainState, Metrics]:
        """A whole run from a key: ``(final_state, metrics [num_updates])``."""
        return self.run(self.init(key), hparams, self.config.num_updates)


def _strong(x: Array) -> Array:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return x
    return jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x


def make_train(config: TrainConfig, env: Any = None, env_params: Any = None):
    """``train(key, hparams) -> (final_state, metrics)`` for ``config`` (see module docstring).

    Args:
      config: the frozen config (validated here).
      env, env_params: an environment instance to use instead of ``config.env`` (tests, notebooks).
    """
    return make_engine(config, env, env_params).train


def make_engine(config: TrainConfig, env: Any = None, env_params: Any = None) -> Engine:
    """Builds the ``Engine`` (init, update step, run, train) for ``config``."""
    config = config.resolved()
    if env is None:
        env, default_params = make_env(config.env, **config.env_kwargs)
        env_params = default_params if env_params is None else env_params
    elif env_params is None:
        env_params = env.default_params
    estimator = make_estimator(config.estimator, **config.estimator_kwargs)
    obs_shape = tuple(env.observation_space(env_params).shape)
    num_actions = int(env.action_space(env_params).n)
    network = ActorCritic(num_actions, config.hidden_sizes, config.activation,
                          obs_ndim=max(len(obs_shape), 1))
    T, N = config.num_steps, config.num_envs
    M, E = config.num_minibatches, config.update_epochs
    clip_policy = config.algo == "ppo"

    def example_trajectory(obs_dtype) -> Trajectory:
        zeros = jnp.zeros((T, N), jnp.float32)
        return Trajectory(
            obs=jnp.zeros((T, N) + obs_shape, obs_dtype), action=jnp.zeros((T, N), jnp.int32),
            reward=zeros, terminated=zeros.astype(bool), truncated=zeros.astype(bool),
            value=zeros, next_value=zeros, log_prob=zeros,
            logits=jnp.zeros((T, N, num_actions), jnp.float32))

    def init(key: Array) -> TrainState:
        net_key, est_key, env_key, run_key = jax.random.split(key, 4)
        runner = reset_runner(env, env_params, env_key, N)
        params = {
            "agent": network.init(net_key, runner.obs),
            "estimator": estimator.init(est_key, example_trajectory(runner.obs.dtype)),
        }
        opt_state = optax.scale_by_adam(eps=ADAM_EPS).init(params)
        state = TrainState(params=params, opt_state=opt_state, runner=runner, key=run_key,
                           update=jnp.zeros((), jnp.int32))
        # Strong dtypes everywhere (gymnax states hold weakly typed Python scalars): a restored
        # checkpoint has strong dtypes, and the same types mean the same compiled program.
        return jax.tree.map(_strong, state)

    def evaluate(agent_params, transitions: Transitions) -> Trajectory:
        if config.critic:
            value = network.apply(agent_params, transitions.obs, method=ActorCritic.value)
            next_value = network.apply(agent_params, transitions.final_obs,
                                       method=ActorCritic.value)
        else:
            value = next_value = jnp.zeros_like(transitions.reward)
        return Trajectory(
            obs=transitions.obs, action=transitions.action, reward=transitions.reward,
            terminated=transitions.terminated, truncated=transitions.truncated, value=value,
            next_value=next_value, log_prob=transitions.log_prob, logits=transitions.logits)

    def minibatch_loss(params, batch: Trajectory, credit: Credit, est_batch, hparams: Hparams):
        logits, value = network.apply(params["agent"], batch.obs)
        advantage = credit.advantage
        if config.normalize_advantage:
            advantage = losses.normalize_advantage(advantage)
        pg_loss, pg_metrics = losses.policy_loss(
            logits, batch.action, advantage, batch.log_prob, batch.logits, hparams.clip_eps,
            clip_policy)
        ent = losses.entropy(logits)
        total = pg_loss - hparams.ent_coef * ent
        metrics = {"policy_loss": pg_loss, "entropy": ent, **pg_metrics}
        if config.critic:
            v_loss = losses.value_loss(value, batch.value, credit.value_target, hparams.clip_eps,
                                       config.clip_value_loss)
            total = total + hparams.vf_coef * v_loss
            metrics["value_loss"] = v_loss
        if estimator.learned:
            est_loss, est_metrics = estimator.loss(params["estimator"], est_batch, hparams)
            total = total + hparams.est_coef * est_loss
            metrics["estimator_loss"] = est_loss
            metrics.update({f"estimator/{k}": v for k, v in est_metrics.items()})
        metrics["loss"] = total
        return total, metrics

    def adam_step(params, opt_state, grads, lr, max_grad_norm):
        grad_norm = optax.global_norm(grads)
        scale = jnp.minimum(1.0, max_grad_norm / jnp.maximum(grad_norm, 1e-12))
        grads = jax.tree.map(lambda g: g * scale, grads)
        direction, opt_state = optax.scale_by_adam(eps=ADAM_EPS).update(grads, opt_state)
        params = jax.tree.map(lambda p, d: p - lr * d, params, direction)
        return params, opt_state, grad_norm

    def optimise(state: TrainState, traj: Trajectory, credit: Credit, key: Array, hparams):
        frac = 1.0 - state.update.astype(jnp.float32) / config.num_updates
        lr = hparams.lr * frac if config.anneal_lr else hparams.lr
        # Flatten [T, N, ...] -> [T·N, ...]; the per-transition fields of the losses.
        per_step = (traj, Credit(advantage=credit.advantage, value_target=credit.value_target))
        flat = jax.tree.map(lambda x: x.reshape((T * N,) + x.shape[2:]), per_step)

        def epoch(carry, epoch_key):
            perm_key, env_key = jax.random.split(epoch_key)
            perm = jax.random.permutation(perm_key, T * N)
            batches = jax.tree.map(
                lambda x: jnp.take(x, perm, axis=0).reshape((M, -1) + x.shape[1:]), flat)
            if estimator.learned:
                env_perm = jax.random.permutation(env_key, N)
                est_batches = jax.tree.map(
                    lambda x: jnp.moveaxis(
                        jnp.take(x, env_perm, axis=1).reshape((T, M, N // M) + x.shape[2:]),
                        1, 0), traj)
            else:
                est_batches = jnp.zeros((M,))

            def minibatch(carry, batch):
                params, opt_state = carry
                (mb, mb_credit), est_batch = batch
                grads, metrics = jax.grad(minibatch_loss, has_aux=True)(
                    params, mb, mb_credit, est_batch, hparams)
                params, opt_state, grad_norm = adam_step(
                    params, opt_state, grads, lr, hparams.max_grad_norm)
                return (params, opt_state), {**metrics, "grad_norm": grad_norm}

            return jax.lax.scan(minibatch, carry, (batches, est_batches))

        (params, opt_state), metrics = jax.lax.scan(
            epoch, (state.params, state.opt_state), jax.random.split(key, E))
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["lr"] = lr
        return params, opt_state, metrics

    def collect(state: TrainState, hparams: Hparams, key: Array) -> Batch:
        def policy(obs):
            return network.apply(state.params["agent"], obs, method=ActorCritic.policy)

        runner, transitions, episodes = rollout(env, env_params, policy, state.runner, key, T)
        traj = evaluate(state.params["agent"], transitions)
        credit = jax.lax.stop_gradient(
            estimator.assign(state.params["estimator"], traj, hparams))
        return Batch(trajectory=traj, credit=credit, runner=runner, episodes=episodes)

    def update_step(state: TrainState, hparams: Hparams) -> tuple[TrainState, Metrics]:
        key, act_key, opt_key = jax.random.split(state.key, 3)
        batch = collect(state, hparams, act_key)
        traj, credit, episodes = batch.trajectory, batch.credit, batch.episodes
        params, opt_state, metrics = optimise(state, traj, credit, opt_key, hparams)
        count = episodes.count
        metrics.update({
            "episode_return": jnp.where(count > 0, episodes.return_sum / count, jnp.nan),
            "episode_length": jnp.where(count > 0, episodes.length_sum / count, jnp.nan),
            "episodes": count,
        })
        if config.critic:
            metrics["explained_variance"] = losses.explained_variance(
                traj.value, credit.value_target)
        metrics.update({f"credit/{k}": v for k, v in credit.diagnostics.items()})
        state = TrainState(params=params, opt_state=opt_state, runner=batch.runner, key=key,
                           update=state.update + 1)
        return state, metrics

    return Engine(config=config, env=env, env_params=env_params, network=network,
                  estimator=estimator, init=init, collect=collect, update_step=update_step)

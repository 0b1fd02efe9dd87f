"""OPTIMISE against optax: after the engine's epochs of minibatch Adam steps
(``jaxcredit.agents.optimise``, ``jaxcredit.fitting.adam_step``), the parameters and the
optimiser state must be what optax's clip-then-Adam chain gives on the same minibatches."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcredit.agents import Hparams
from jaxcredit.agents.agent_network import AgentNetwork
from jaxcredit.agents.optimise import _minibatches, minibatch_loss, objective_batch, optimise
from jaxcredit.agents.state import AgentState
from jaxcredit.networks import ActorCritic
from jaxcredit.objectives import make_objective
from jaxcredit.types import Credit, Trajectory

T, N, A, OBS = 8, 4, 3, 5
EPOCHS, MINIBATCHES, LR, EPS = 3, 4, 3e-3, 1e-5


def _window(network, params, key):
    k_obs, k_act, k_adv, k_target = jax.random.split(key, 4)
    obs = jax.random.normal(k_obs, (T, N, OBS))
    logits, value = network.module.apply(params, obs)
    action = jax.random.categorical(k_act, logits)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], -1)[..., 0]
    zeros = jnp.zeros((T, N))
    traj = Trajectory(obs=obs, action=action, reward=zeros, terminated=zeros.astype(bool),
                      truncated=zeros.astype(bool), value=value, next_value=zeros,
                      log_prob=log_prob, logits=logits, next_obs=obs)
    credit = Credit(advantage=jax.random.normal(k_adv, (T, N)),
                    value_target=jax.random.normal(k_target, (T, N)))
    return traj, credit


def _optax_reference(network, objective, params, traj, credit, key, hparams):
    chain = optax.chain(optax.clip_by_global_norm(hparams.max_grad_norm),
                        optax.scale_by_adam(eps=EPS), optax.scale(-LR))
    state = chain.init(params)
    data = (objective_batch(traj, credit), (), None)

    @jax.jit  # one compile for the 12 steps of the plain loop below (eager, it took 30 s)
    def step(params, state, mb, mb_credit):
        grads = jax.grad(lambda p: minibatch_loss(network, objective, p, mb, mb_credit,
                                                  hparams)[0])(params)
        updates, state = chain.update(grads, state)
        return optax.apply_updates(params, updates), state

    for epoch_key in jax.random.split(key, EPOCHS):
        batches, _, _ = _minibatches(network, epoch_key, data, MINIBATCHES)
        for m in range(MINIBATCHES):
            mb, mb_credit = jax.tree.map(lambda x, m=m: x[m], batches)
            params, state = step(params, state, mb, mb_credit)
    return params, state[1]


def test_flat_adam_steps_equal_optax_leaf_by_leaf():
    network = AgentNetwork(ActorCritic(A, (16, 16)))
    params = network.init(jax.random.key(0), jnp.zeros((1, OBS)))
    traj, credit = _window(network, params, jax.random.key(1))
    objective = make_objective("ppo")
    hparams = Hparams.create(max_grad_norm=0.05)  # small: the clipping acts
    agent = AgentState(params, optax.scale_by_adam(eps=EPS).init(params))
    key = jax.random.key(2)
    new, metrics = jax.jit(lambda agent: optimise(
        network, objective, agent, traj, credit, (), None, key, hparams, jnp.float32(LR), EPOCHS,
        MINIBATCHES, EPS))(agent)
    want_params, want_adam = _optax_reference(network, objective, params, traj, credit, key,
                                              hparams)
    assert jax.tree.structure(new.params) == jax.tree.structure(params)
    for got, want in ((new.params, want_params), (new.opt_state.mu, want_adam.mu),
                      (new.opt_state.nu, want_adam.nu)):
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-7)
    assert int(new.opt_state.count) == EPOCHS * MINIBATCHES == int(want_adam.count)
    assert float(metrics["grad_norm"]) > hparams.max_grad_norm  # clipped steps were taken

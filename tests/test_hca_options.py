"""hca_return's options: the V(s) baseline keeps the sampled form unbiased and cuts its variance;
the centred model input; the oracle model reads tabular states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams
from jaxcredit.envs import make as make_env
from jaxcredit.exact import tabular
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.hca_return import model_feature
from jaxcredit.types import Trajectory

HP = Hparams.create(gamma=1.0, lambda_=1.0)
KEY = jax.random.key(0)


def _bandit_episodes(num=200_000):
    """Uniform-policy AmbiguousBandit episodes with the exact critic V(s0) = 1.5."""
    env, params = make_env("AmbiguousBandit")
    mdp = env.tabular_mdp(params)
    pi = tabular.uniform_policy(mdp)
    batch = tabular.sample_episodes(mdp, pi, jax.random.key(1), num, 1)
    values = tabular.state_values(mdp, pi, 1.0)
    logits = jnp.log(pi)[batch.state]
    traj = Trajectory(
        obs=jax.nn.one_hot(batch.state, mdp.num_states), action=batch.action,
        reward=batch.reward, terminated=batch.terminated, truncated=batch.truncated,
        value=values[batch.state], next_value=jnp.zeros_like(batch.reward),
        log_prob=jnp.take_along_axis(logits, batch.action[..., None], -1)[..., 0],
        logits=logits, state=batch.state)
    return mdp, pi, traj


def test_baseline_keeps_the_sampled_form_unbiased_and_lowers_its_variance():
    """A = ±0.4 at the uniform policy; E_{Z|s,a}[π/h] = 1 makes any b(s) unbiased.

    The variance falls overall (0.58 → 0.41 pooled over both arms), though not for every action:
    for the HI arm (1 − π/h) and Z change sign together, so (1 − π/h)·Z is the tamer one there
    (0.33 against 0.41); for the LO arm the baseline halves it (0.84 → 0.41).
    """
    mdp, pi, traj = _bandit_episodes()
    exact = {"bandit": (mdp, pi)}
    plain = make_estimator("hca_return", model="oracle").assign(exact, traj, HP, KEY)
    based = make_estimator("hca_return", model="oracle", baseline=True).assign(exact, traj,
                                                                               HP, KEY)
    action = np.asarray(traj.action[0])
    for a, expected in ((0, 0.4), (1, -0.4)):
        for credit in (plain, based):
            x = np.asarray(credit.advantage[0])[action == a]
            assert abs(x.mean() - expected) < 4 * x.std() / np.sqrt(x.size)
    pooled = [float(jnp.mean(jnp.stack([c.advantage[0][action == a].var() for a in (0, 1)])))
              for c in (plain, based)]
    assert pooled[1] < 0.8 * pooled[0], pooled


def test_centred_model_input_is_the_return_minus_the_value():
    _, _, traj = _bandit_episodes(64)
    z = traj.reward
    np.testing.assert_allclose(model_feature(z, traj, "centred"), z - traj.value)
    standardised = model_feature(z, traj, "standardised")
    np.testing.assert_allclose([standardised.mean(), standardised.std()], [0.0, 1.0], atol=1e-3)
    est = make_estimator("hca_return", model_input="centred", hidden=(8,))
    params = est.init(KEY, traj)
    loss, _ = est.loss(params, traj, HP, KEY)
    assert np.isfinite(float(loss))


def test_the_agent_state_input_replaces_the_observation():
    """``state_input="agent_state"``: h(a | x_t, Z) reads the recurrent agent's state x_t in
    place of the observation: the credit moves when the state moves and not when the
    observation does; without a recorded state, a one-line error; the record says it reads the
    agent's state (the engine then records it, and refuses a memoryless policy)."""
    _, _, traj = _bandit_episodes(64)
    rng = np.random.default_rng(0)
    core = jnp.asarray(rng.normal(size=traj.reward.shape + (5,)), jnp.float32)
    traj = traj.replace(agent_state=core)
    for name in ("hca_return", "c2a2c"):
        est = make_estimator(name, state_input="agent_state", hidden=(8,),
                             policy_modulated=False)
        assert est.reads_agent_state
        params = est.init(KEY, traj)  # its output layer starts at 0 (h = π): move every leaf
        leaves, tree = jax.tree.flatten(params)
        params = jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(jax.random.key(i), x.shape)
                                           for i, x in enumerate(leaves)])
        credit = est.assign(params, traj, HP, KEY).advantage
        other_obs = traj.replace(obs=traj.obs + 1.0)
        np.testing.assert_array_equal(est.assign(params, other_obs, HP, KEY).advantage, credit)
        if name == "hca_return":  # c2a2c's credit is gated GAE; its ratio moves instead
            moved = traj.replace(agent_state=core + 1.0)
            assert not np.allclose(est.assign(params, moved, HP, KEY).advantage, credit)
        with pytest.raises(ValueError, match="trajectory has none"):
            est.assign(params, traj.replace(agent_state=None), HP, KEY)
    assert not make_estimator("hca_return").reads_agent_state
    with pytest.raises(ValueError, match="state_input must be one of"):
        make_estimator("hca_return", state_input="memory")
    with pytest.raises(ValueError, match="is for the mlp model"):
        make_estimator("hca_return", state_input="agent_state", model="oracle")

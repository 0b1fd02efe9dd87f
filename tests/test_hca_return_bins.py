"""hca_return's fixed-grid return input (``model_input="grid"``): the two-hot encoding by hand, its
independence from the batch, the grid read from the environment, and one-line errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams
from jaxcredit.envs import make as make_env
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.hca_return import model_feature, resolve_grid
from jaxcredit.estimators.hindsight_models import two_hot
from jaxcredit.types import Trajectory

HP = Hparams.create(gamma=1.0, lambda_=1.0)
KEY = jax.random.key(0)
GRID = (0.0, 1.0, 2.0, 4.0)


def _one_step_batch(returns):
    """``[1, N]`` one-step episodes from the start state of a 3-state one-hot MDP, Z = r."""
    r = jnp.asarray(returns, jnp.float32)[None]
    zeros = jnp.zeros_like(r)
    logits = jnp.broadcast_to(jnp.log(jnp.array([0.7, 0.3])), r.shape + (2,))
    action = jnp.zeros(r.shape, jnp.int32)
    return Trajectory(
        obs=jax.nn.one_hot(jnp.zeros(r.shape, jnp.int32), 3), action=action, reward=r,
        terminated=jnp.ones(r.shape, bool), truncated=jnp.zeros(r.shape, bool), value=zeros,
        next_value=zeros, log_prob=jnp.log(0.7) + zeros, logits=logits,
        state=jnp.zeros(r.shape, jnp.int32))


def test_two_hot_by_hand():
    # 0.25 lies a quarter of the way from 0 to 1; 3 halfway from 2 to 4; a grid point is one-hot;
    # returns beyond the ends are clipped to the end points.
    z = jnp.array([0.25, 3.0, 2.0, 4.0, -1.0, 5.0])
    expected = [[0.75, 0.25, 0.0, 0.0],
                [0.0, 0.0, 0.5, 0.5],
                [0.0, 0.0, 1.0, 0.0],
                [0.0, 0.0, 0.0, 1.0],
                [1.0, 0.0, 0.0, 0.0],
                [0.0, 0.0, 0.0, 1.0]]
    x = two_hot(z, jnp.array(GRID))
    np.testing.assert_allclose(x, expected, atol=1e-6)
    # Inside the grid the encoding keeps Z exactly: Σ_k x_k g_k = Z.
    np.testing.assert_allclose(x[:4] @ jnp.array(GRID), z[:4], atol=1e-6)
    assert two_hot(jnp.zeros((3, 5)), jnp.array(GRID)).shape == (3, 5, 4)


def test_grid_input_is_the_same_for_the_same_return_in_any_batch():
    """Z = 1.5 in a batch of small returns and in one of large, spread returns: the grid feature
    and the fitted model's h(a | s, Z) are the same; the standardised feature is not. (A grid
    encoding that standardised Z over the batch first would fail both checks.)"""
    small = _one_step_batch([1.5, 0.5, 1.0, 2.0])
    large = _one_step_batch([1.5, 30.0, -12.0, 7.0, 100.0])
    feats = [model_feature(b.reward, b, "grid", GRID)[0, 0] for b in (small, large)]
    np.testing.assert_allclose(feats[0], [0.0, 0.5, 0.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(feats[1], feats[0], atol=1e-6)
    standardised = [model_feature(b.reward, b, "standardised")[0, 0] for b in (small, large)]
    assert abs(float(standardised[0] - standardised[1])) > 0.5

    est = make_estimator("hca_return", model_input="grid", z_grid=GRID, hidden=(8,))
    params = est.init(KEY, small)
    # Random weights everywhere: the zero last layer would make h = π whatever the input.
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(KEY, len(leaves))
    params = jax.tree.unflatten(tree, [3.0 * jax.random.normal(k, x.shape) for k, x in
                                       zip(keys, leaves)])
    log_h = [est.hindsight(params, b, HP)[0][0] for b in (small, large)]
    np.testing.assert_allclose(log_h[1][0], log_h[0][0], atol=1e-5)
    # ... and the model does read Z: Z = 1.5 and Z = 0.5 give different h.
    assert float(jnp.abs(log_h[0][0] - log_h[0][1]).max()) > 1e-2


def test_grid_from_the_environment_and_from_a_range():
    # DelayedEffect without noise: the returns are −1, 0, 1 and the engine's return grid is
    # −2..2 in steps of 1 (one spare point each side); 5 <= 16 points, so it is used as it is.
    env, params = make_env("DelayedEffect", n=10, sigma=0.0)
    np.testing.assert_allclose(resolve_grid(env=env, env_params=params), [-2, -1, 0, 1, 2])
    # AmbiguousBandit: rewards N(1 or 2, 1.5²) give the grid [−9 − 1/3, 11 + 1/3] (6 σ of noise
    # around 0..2, one spare step of σ/4.5 each side), 63 points: coarsened to 16 uniform bins.
    env, params = make_env("AmbiguousBandit")
    grid = resolve_grid(env=env, env_params=params)
    np.testing.assert_allclose(grid, np.linspace(-28 / 3, 34 / 3, 16), atol=1e-5)
    assert len(resolve_grid(env=env, env_params=params, z_bins=8)) == 8
    np.testing.assert_allclose(resolve_grid(z_range="-1,2", z_bins=4), [-1, 0, 1, 2])
    np.testing.assert_allclose(resolve_grid(z_grid="0,1,2,4"), GRID)
    # The registry passes the environment to the factory; the oracle twin keeps the grid.
    est = make_estimator("hca_return", env=env, env_params=params, model_input="grid")
    traj = _one_step_batch([1.5, -3.0])
    model_params = est.init(KEY, traj)
    assert model_params["params"]["Dense_0"]["kernel"].shape[0] == 3 + 16
    assert est.oracle().name == "hca_return"
    c2 = make_estimator("c2a2c", env=env, env_params=params, model_input="grid", hidden=(8,))
    loss, _ = c2.loss(c2.init(KEY, traj), traj, HP, KEY)
    np.testing.assert_allclose(loss, -np.log(0.7), rtol=1e-5)  # h = π at initialisation
    # Without a tabular MDP there is no range to read.
    env, params = make_env("CartPole-v1")
    assert resolve_grid(env=env, env_params=params) is None


@pytest.mark.parametrize("options", [
    dict(model_input="bins"),
    dict(model_input="grid"),  # no grid known
    dict(model_input="grid", z_grid=[1.0, 0.0]),
    dict(model_input="grid", z_grid=[1.0]),
    dict(model_input="grid", z_grid="a,b"),
    dict(model_input="grid", z_grid=[0.0, float("nan")]),
    dict(model_input="grid", z_range=(2.0, 1.0)),
    dict(model_input="grid", z_range="1,2,3"),
    dict(model_input="grid", z_range=(0.0, 1.0), z_bins=1),
    dict(model_input="grid", z_range=(0.0, 1.0), z_bins=2.5),
    dict(model_input="grid", z_grid=GRID, z_range=(0.0, 1.0)),
])
@pytest.mark.parametrize("name", ["hca_return", "c2a2c"])
def test_bad_grid_options_are_one_line_value_errors(name, options):
    with pytest.raises(ValueError) as err:
        make_estimator(name, **options)
    assert "\n" not in str(err.value)


def test_grid_model_fits_the_bandit():
    """The grid-input model's cross-entropy falls on a fixed AmbiguousBandit batch."""
    env, params = make_env("AmbiguousBandit")
    rewards = jax.random.normal(KEY, (256,)) * 1.5 + 1.5
    traj = _one_step_batch(rewards)
    # Action 0 where the reward is high, 1 where low (as the bandit's outcomes lean).
    traj = traj.replace(action=(traj.reward < 1.5).astype(jnp.int32))
    est = make_estimator("hca_return", env=env, env_params=params, model_input="grid")
    p = est.init(KEY, traj)
    loss = jax.jit(lambda q: est.loss(q, traj, HP, KEY)[0])
    grad = jax.jit(jax.grad(lambda q: est.loss(q, traj, HP, KEY)[0]))
    first = float(loss(p))
    for _ in range(50):
        p = jax.tree.map(lambda x, g: x - 0.1 * g, p, grad(p))
    assert float(loss(p)) < first - 0.05

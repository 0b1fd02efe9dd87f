"""``jaxcredit.credit``: the credit pipeline as a transform any loop calls (init / update, state
carried by the caller), checked without the engine: hand cases, the state's count, an oracle fed
by a policy that is not flax, and the foreign loop of docs/credit.md."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcredit.credit as jc
from jaxcredit.envs import make as make_env
from jaxcredit.estimators import make_estimator
from jaxcredit.fitting import FitSchedule

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
NOTEBOOK = DOCS.parent / "notebooks" / "credit_in_your_loop.ipynb"


def _window(reward, terminated, truncated=None, value=None, next_value=None, actions=2):
    """A ``[T, 1]`` window from lists, with uniform logits and action 0 everywhere."""
    reward = jnp.asarray(reward, jnp.float32)[:, None]
    col = (lambda x: None if x is None else jnp.asarray(x, jnp.float32)[:, None])
    return jc.trajectory(
        jnp.zeros(reward.shape + (3,)), jnp.zeros(reward.shape, jnp.int32), reward,
        jnp.asarray(terminated, bool)[:, None], logits=jnp.zeros(reward.shape + (actions,)),
        truncated=None if truncated is None else jnp.asarray(truncated, bool)[:, None],
        value=col(value), next_value=col(next_value))


def test_monte_carlo_credit_by_hand():
    # r = 0, 0, 1; the episode terminates at t = 2; no critic: G_t = 1 at every step (γ = 1),
    # 0.81, 0.9, 1 at γ = 0.9.
    transform = jc.make("mc")
    traj = _window([0, 0, 1], [False, False, True])
    state = transform.init(jax.random.key(0), traj)
    for gamma, expected in ((1.0, [1.0, 1.0, 1.0]), (0.9, [0.81, 0.9, 1.0])):
        credit, _, new, _ = transform.update(state, traj, jax.random.key(1),
                                             jc.CreditHparams.create(gamma=gamma))
        np.testing.assert_allclose(credit.advantage[:, 0], expected, rtol=1e-6)
        assert int(new.count) == 1


def test_gae_by_hand_with_a_timeout():
    # V = 0.5 everywhere; r = 1, 0; the episode times out at t = 1 with V(s'_2) = 2.
    # δ_1 = 0 + 0.9·2 − 0.5 = 1.3; δ_0 = 1 + 0.9·0.5 − 0.5 = 0.95; A_0 = 0.95 + 0.9·0.5·1.3.
    transform = jc.make("gae")
    traj = _window([1, 0], [False, False], truncated=[False, True], value=[0.5, 0.5],
                   next_value=[0.5, 2.0])
    credit, _, _, _ = transform.update(transform.init(jax.random.key(0), traj), traj,
                                       jax.random.key(1),
                                       jc.CreditHparams.create(gamma=0.9, lambda_=0.5))
    np.testing.assert_allclose(credit.advantage[:, 0], [0.95 + 0.45 * 1.3, 1.3], rtol=1e-6)


def _delayed_effect_window(transform, env, env_params, logits_fn, params, key):
    """A window of 2 whole DelayedEffect episodes under ``logits_fn``, as a loop would have it."""
    T, N = env_params.max_steps_in_episode, 2
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, N), env_params)

    def one_step(carry, k):
        state, obs = carry
        a_key, e_key = jax.random.split(k)
        logits = logits_fn(params, obs)
        action = jax.random.categorical(a_key, logits)
        nobs, nstate, reward, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(e_key, N), state, action, env_params)
        return (nstate, nobs), dict(obs=obs, action=action, reward=reward, term=term,
                                    trunc=trunc, logits=logits, state=state)

    _, w = jax.lax.scan(one_step, (state, obs), jax.random.split(key, T))
    return jc.trajectory(w["obs"], w["action"], w["reward"], w["term"], truncated=w["trunc"],
                         logits=w["logits"], state=transform.exact.index(w["state"]))


def test_the_oracle_reads_a_policy_that_is_not_flax():
    env, env_params = make_env("DelayedEffect", n=3, sigma=0.0)
    oracle = jc.make("hca_return", env, env_params, model="oracle")
    weights = jnp.array([[0.4, -0.4], [0.3, -0.3], [0.0, 0.0], [0.0, 0.0]])

    def logits(w, obs):  # a linear softmax: a plain function of a plain array
        return obs @ w

    traj = _delayed_effect_window(oracle, env, env_params, logits, weights, jax.random.key(3))
    hp = jc.CreditHparams.create(gamma=1.0)
    state = oracle.init(jax.random.key(0), traj)
    credit, _, _, _ = oracle.update(state, traj, jax.random.key(1), hp,
                                    jc.Context(weights, policy_logits=logits))
    # σ = 0: the return is +1 after the optimal first action 0, −1 after action 1; the exact
    # return hindsight at the first step knows which action gave Z, so A = (1 − π/h)·Z
    # = (1 − π(a))·Z there: 1 − σ(0.8) = 0.310 for a = 0 (Z = 1), −(1 − 0.690) for a = 1.
    first = np.asarray(credit.advantage[0])
    p0 = float(jax.nn.sigmoid(0.8))
    expected = np.where(np.asarray(traj.action[0]) == 0, 1 - p0, -(1 - (1 - p0)))
    np.testing.assert_allclose(first, expected, rtol=1e-4)
    # On the aliased chain the action changes nothing, so the exact hindsight equals π there
    # (π(a|s) = σ(±0.6), the policy the context gives) and the credit is 0.
    np.testing.assert_allclose(credit.advantage[1:-1], 0.0, atol=1e-5)
    with pytest.raises(ValueError, match="policy_logits"):
        oracle.update(state, traj, jax.random.key(1), hp)


def test_a_fitted_transform_is_jittable_and_vmaps_over_seeds():
    """Three seeds in one program: each member's fitted model and credit are the ones a run of
    that seed alone computes (its own init, its own fit keys)."""
    env, env_params = make_env("DelayedEffect", n=3, sigma=1.0)
    transform = jc.make("hca_return", env, env_params, fit=FitSchedule(steps=2))
    traj = _delayed_effect_window(transform, env, env_params, lambda w, o: o @ w,
                                  jnp.zeros((4, 2)), jax.random.key(0))
    hp = jc.CreditHparams.create(gamma=1.0)
    keys = jax.random.split(jax.random.key(1), 3)
    states = jax.vmap(transform.init, in_axes=(0, None))(keys, traj)
    credit, _, states, _ = jax.jit(jax.vmap(transform.update, in_axes=(0, None, 0, None)))(
        states, traj, keys, hp)
    alone, _, state, _ = jax.jit(transform.update)(transform.init(keys[1], traj), traj, keys[1],
                                                   hp)
    np.testing.assert_allclose(credit.advantage[1], alone.advantage, rtol=1e-5, atol=1e-6)
    for batched, single in zip(jax.tree.leaves(states.estimator.params),
                               jax.tree.leaves(state.estimator.params)):
        np.testing.assert_allclose(batched[1], single, rtol=1e-5, atol=1e-6)
    # The seeds differ: their models start from different keys.
    assert not np.allclose(credit.advantage[0], credit.advantage[1])
    np.testing.assert_array_equal(states.count, [1, 1, 1])


def test_a_relabelled_window_gets_the_critics_values_anew():
    """The relabel stage runs first and ``Context.values`` re-evaluates the critic on what it
    wrote, so the credit reads values of the relabelled observations."""
    from jaxcredit.relabel import Relabeller

    ones = Relabeller(name="ones", relabel=lambda t, key: t.replace(obs=jnp.ones_like(t.obs)))
    transform = jc.pipeline(make_estimator("gae"), relabel=ones)
    traj = _window([0.0, 0.0], [False, True])  # obs zeros [2, 1, 3]

    def values(t):  # a critic V(o) = Σ o: 3 on the relabelled observations, 0 before
        v = t.obs.sum(-1)
        return t.replace(value=v, next_value=v)

    hp = jc.CreditHparams.create(gamma=1.0, lambda_=1.0)
    credit, relabelled, _, _ = transform.update(transform.init(jax.random.key(0), traj), traj,
                                                jax.random.key(1), hp, jc.Context(values=values))
    np.testing.assert_allclose(relabelled.value, 3.0)
    # A_0 = r_0 + V(s_1) − V(s_0) + ... with the episode ending at t = 1: G = 0, A = −3.
    np.testing.assert_allclose(credit.advantage[:, 0], [-3.0, -3.0])
    stale, _, _, _ = transform.update(transform.init(jax.random.key(0), traj), traj,
                                      jax.random.key(1), hp)
    np.testing.assert_allclose(stale.advantage, 0.0)  # no critic given: the values kept


def test_burn_in_is_counted_in_the_credit_state():
    env, env_params = make_env("DelayedEffect", n=3, sigma=1.0)
    context = {"env": env, "env_params": env_params, "horizon": 4, "group_size": 1,
               "action_distribution": None}
    transform = jc.pipeline(make_estimator("hca_return", context), env=env,
                            env_params=env_params, fit=FitSchedule(steps=2), burn_in=2)
    weights = jnp.zeros((4, 2))
    traj = _delayed_effect_window(transform, env, env_params, lambda w, o: o @ w, weights,
                                  jax.random.key(0))
    state = transform.init(jax.random.key(0), traj)
    update = jax.jit(transform.update)
    hp = jc.CreditHparams.create(gamma=1.0)
    params = [state.estimator.params]
    losses = []
    for i in range(3):
        _, _, state, metrics = update(state, traj, jax.random.key(i), hp)
        params.append(state.estimator.params)
        losses.append(float(metrics["estimator/loss"]))
    moved = [max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(p),
                                                               jax.tree.leaves(q)))
             for p, q in zip(params, params[1:])]
    assert moved[0] == moved[1] == 0.0 and moved[2] > 0  # fitted from the third update on
    assert np.isnan(losses[0]) and np.isnan(losses[1]) and np.isfinite(losses[2])
    assert int(state.count) == 3


def test_the_notebook_runs_the_documented_loop_and_it_learns():
    """notebooks/credit_in_your_loop.ipynb, every code cell in order, in this process: its loop
    cell is docs/credit.md's block as written (GAE, a fitted ``hca_return`` and its exact model
    from one loop, 4 seeds), and its plot cell draws the curves. (tests/test_notebooks.py runs
    the other notebooks in a kernel; this one runs here, once, so that its numbers are checked.)"""
    import matplotlib
    import nbformat

    matplotlib.use("Agg")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    cells = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    block = next(b for b in re.findall(r"```python\n(.*?)```", (DOCS / "credit.md").read_text(),
                                       re.S) if "def make_train" in b)
    assert block.rstrip() in cells
    scope = {"__name__": "credit_loop"}
    for index, source in enumerate(cells):
        exec(compile(source, f"{NOTEBOOK.name} cell {index}", "exec"), scope)
    curves = scope["curves"]
    assert set(curves) == {"A2C+GAE", "hca_return, fitted", "hca_return, exact model"}
    for p in curves.values():
        assert p.shape == (4, 150) and np.all((p >= 0) & (p <= 1))
    # From 0.5 (zero weights) the exact model's credit learns the first action (seed 0 keys:
    # final mean 0.97 at 16 seeds); a loop whose credit ignored the delayed reward stays at 0.5.
    assert float(curves["hca_return, exact model"][:, -1].mean()) > 0.8
    assert len(scope["ax"].lines) == 4  # three curves and the chance line

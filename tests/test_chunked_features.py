"""Chunked-TD's feature model and vector λ (jaxcredit.estimators.chunked_features) and the
paper's Accumulated-Charge and key-to-door-with-distractors tasks (jaxcredit.envs.chunktd_tasks):
hand cases, the tasks' rules, a float64 loop, the fitted model against the exact per-feature
probabilities, and the command line."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcredit import cli, envs, runlog
from jaxcredit.estimators import chunked_features as cf
from jaxcredit.estimators import make_estimator
from jaxcredit.types import Trajectory

KEY = jax.random.key(0)


# -- hand cases ---------------------------------------------------------------------------------


def test_step_probability_by_hand():
    # Two actions, two features; p_all[a, k] = p̂_k(c_k | s, a); π = (0.6, 0.4); a_t = 1.
    p_all = jnp.asarray([[[0.5, 0.8], [0.25, 0.4]]])
    pi, action = jnp.asarray([[0.6, 0.4]]), jnp.asarray([1])
    # expected: per feature Σ_a π(a) p̂_k = (0.3 + 0.1, 0.48 + 0.16); the scalar their product.
    np.testing.assert_allclose(cf.feature_step_probability(p_all, pi, action, "expected",
                                                           "vector"), [[0.4, 0.64]], rtol=1e-6)
    np.testing.assert_allclose(cf.feature_step_probability(p_all, pi, action, "expected",
                                                           "scalar"), [0.256], rtol=1e-6)
    # sampled: π(a_t) times the taken action's probabilities (0.25, 0.4).
    np.testing.assert_allclose(cf.feature_step_probability(p_all, pi, action, "sampled",
                                                           "vector"), [[0.1, 0.16]], rtol=1e-6)
    np.testing.assert_allclose(cf.feature_step_probability(p_all, pi, action, "sampled",
                                                           "scalar"), [0.04], rtol=1e-6)


def test_shift_lambda_by_hand():
    # λ'_i = ℓ_{i+1}(1 − done_i); the window's last step has λ' = 0.
    ell = jnp.asarray([[0.1, 1.0], [0.2, 1.0], [0.3, 1.0], [0.4, 1.0]])[:, None, :]  # [T, 1, 2]
    done = jnp.asarray([[False], [True], [False], [False]])
    np.testing.assert_allclose(cf.shift_lambda(ell, done)[:, 0, 0], [0.2, 0.0, 0.4, 0.0])
    np.testing.assert_allclose(cf.shift_lambda(ell[..., 0], done)[:, 0], [0.2, 0.0, 0.4, 0.0])


# -- the tasks ----------------------------------------------------------------------------------


def _play(env, params, key, actions):
    """Steps ``actions`` from a reset; returns obs, final observations, rewards, ends."""
    obs, state = env.reset(key, params)
    step = jax.jit(env.step)  # one wrapper: a new one per step would compile the step again
    rows = []
    for a in actions:
        key, k = jax.random.split(key)
        nobs, state, r, term, trunc, info = step(k, state, a, params)
        rows.append((obs, info["final_observation"], float(r), bool(term), bool(trunc)))
        obs = nobs
    return rows


def test_accumulated_charge_follows_the_official_rules():
    env, params = envs.make("AccumulatedCharge", horizon=20, points=4, p_charged=0.5,
                            points_seed=3)
    # The official environment draws its times once from its seed: the same numpy rule.
    times = np.sort(np.random.RandomState(3).choice(np.arange(1, 20), size=4, replace=False))
    np.testing.assert_array_equal(env.point_times, times)
    key = jax.random.key(7)
    plus = _play(env, params, key, [1] + [0] * 20)
    minus = _play(env, params, key, [0] + [1] * 20)  # same key: the same charges
    assert len(plus) == 21 and plus[-1][3] and not any(row[3] for row in plus[:-1])
    charge = round(float(plus[-1][1][1]) * 20)
    # bonus·plus + ½c₀(charge − horizon·p): c₀ = +1, then −1 with no bonus; they sum to 0.1.
    assert plus[-1][2] == pytest.approx(0.1 + 0.5 * (charge - 10.0), abs=1e-5)
    assert minus[-1][2] == pytest.approx(-0.5 * (charge - 10.0), abs=1e-5)
    assert sum(row[2] for row in plus[:-1]) == 0.0
    codes = np.stack([np.asarray(env.transition_code(o, n)) for o, n, *_ in plus])
    assert codes[0, 0] == 1 and (codes[1:, 0] == 0).all()  # plus set at step 0 only
    assert (codes[:, 2] == 1).all()  # time moves by one
    changed = np.flatnonzero(codes[:, 1])
    assert set(changed) <= set(times) and codes[:, 1].sum() == charge
    assert (codes[:, 1] <= 5).all() and env.transition_categories == (2, 6, 2)
    assert bool(env.episode_success(plus[0][0], plus[0][1], 0.0))
    assert not bool(env.episode_success(minus[0][0], minus[0][1], 0.0))


def test_key_to_door_with_distractors_follows_the_official_rules():
    env, params = envs.make("KeyToDoorDistractors", num_steps=4, num_distractors=2)
    key = jax.random.key(1)
    outcomes = {}
    for first in (0, 1):
        for last in (0, 1):
            rows = _play(env, params, key, [first, 0, 0, last])
            assert [row[3] for row in rows] == [False, False, False, True]
            for obs, nobs, r, *_ in rows:  # the reward is the sum of its feature parts
                parts = np.asarray(env.reward_components(obs, nobs))
                assert r == pytest.approx(parts.sum(), abs=1e-7)
                coins = np.asarray(env.features(nobs))[2:4]
                np.testing.assert_allclose(parts[2:4], coins / 8.0)  # 1/(D·n) per coin
            final = np.asarray(env.features(rows[-1][1]))
            assert (final[2:4] == 0).all() and final[4] == 4  # no coins at the end; step n
            assert np.asarray(env.features(rows[-2][1]))[1] == 1  # the door shows before it
            outcomes[first, last] = final[-1]
            assert bool(env.episode_success(rows[-1][0], rows[-1][1], 0.0)) == (final[-1] == 1)
    # The treasure (worth 1/n = 0.25) only with the key taken first and the door opened last.
    assert outcomes == {(0, 1): 1, (0, 0): 0, (1, 1): 0, (1, 0): 0}


@pytest.mark.parametrize("name,options", [
    ("AccumulatedCharge", dict(horizon=20, points=4, p_charged=0.3, points_seed=3)),
    ("KeyToDoorDistractors", dict(num_steps=5, num_distractors=2)),
])
def test_exact_feature_law_agrees_with_the_dynamics(name, options):
    """Every transition the environment makes has positive probability under its
    ``transition_law``, probability 1 where the feature is deterministic; each law sums to 1;
    the charge's law at an accumulation time is the Binomial pmf."""
    env, params = envs.make(name, **options)
    for first in (0, 1):
        length = 21 if name == "AccumulatedCharge" else 5  # one whole episode
        actions = ([first, 1, 0, 1, 0] * 5)[:length]
        rows = _play(env, params, jax.random.key(first), actions)
        assert rows[-1][3] and not any(row[3] for row in rows[:-1])
        random_entries = 0
        for (obs, nobs, *_), a in zip(rows, actions):
            law = np.asarray(env.transition_law(obs, jnp.asarray(a)))
            random_entries += int((law.max(-1) < 1.0).sum())
            np.testing.assert_allclose(law.sum(-1), 1.0, rtol=1e-5)
            code = np.asarray(env.transition_code(obs, nobs))
            p = law[np.arange(len(code)), code]
            assert (p > 0).all()
            deterministic = law.max(-1) == 1.0
            np.testing.assert_allclose(p[deterministic], 1.0)
        # By hand: the only random features are the charge at its 4 times (Accumulated-Charge)
        # and the 2 coins on the steps before the last, 4 × 2 (key-to-door).
        assert random_entries == (4 if name == "AccumulatedCharge" else 8)
    if name == "AccumulatedCharge":
        from scipy.stats import binom  # noqa: PLC0415
        t = int(env.point_times[0])
        law = np.asarray(env.transition_law(jnp.asarray([1.0, 0.0, t / 21.0]), jnp.asarray(0)))
        np.testing.assert_allclose(law[1, :6], binom.pmf(np.arange(6), 5, 0.3), rtol=1e-5)
        between = next(u for u in range(1, 20) if u not in env.point_times)
        law = np.asarray(env.transition_law(jnp.asarray([1.0, 0.0, between / 21.0]),
                                            jnp.asarray(0)))
        np.testing.assert_allclose(law[1], np.eye(6)[0])


# -- the credit against a float64 loop ----------------------------------------------------------


def _window(env, rng, T, B):
    """A window of valid observations of ``env`` (KeyToDoorDistractors) with episode ends of
    both kinds, random rewards, values and a random behaviour policy."""
    n, D = env.num_steps, env.num_distractors

    def obs_of(step):
        coins = rng.integers(2, size=(T, B, D))
        return np.concatenate([rng.integers(2, size=(T, B, 2)), coins, step[..., None] / n,
                               rng.integers(2, size=(T, B, 1))], -1).astype(np.float32)

    step = rng.integers(n, size=(T, B))
    obs, next_obs = obs_of(step), obs_of(step + 1)
    ends = rng.random((T, B)) < 0.25
    kind = rng.random((T, B)) < 0.5
    term, trunc = ends & kind, ends & ~kind
    term[2, 0], trunc[5, 0] = True, True
    trunc[2, 0], term[5, 0] = False, False
    # One critic: inside an episode s'_{t+1} is s_{t+1}, so V(s'_{t+1}) is V(s_{t+1}).
    next_obs[:-1] = np.where((term | trunc)[:-1, :, None], next_obs[:-1], obs[1:])
    value, next_value = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    next_value[:-1] = np.where((term | trunc)[:-1], next_value[:-1], value[1:])
    logits = rng.normal(size=(T, B, 2)).astype(np.float32)
    action = rng.integers(2, size=(T, B))
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return Trajectory(
        obs=jnp.asarray(obs), action=jnp.asarray(action, jnp.int32),
        reward=jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
        terminated=jnp.asarray(term), truncated=jnp.asarray(trunc),
        value=jnp.asarray(value, jnp.float32), next_value=jnp.asarray(next_value, jnp.float32),
        log_prob=jnp.asarray(np.take_along_axis(log_pi, action[..., None], -1)[..., 0]),
        logits=jnp.asarray(logits), next_obs=jnp.asarray(next_obs))


def _lambda_returns_loop(r, v, nv, lam, term, trunc, gamma):
    """G_i = r_i + γ(1 − term_i)[(1 − λ'_i) V(s'_{i+1}) + λ'_i G_{i+1}], λ'_i already cut at
    episode ends and at the window's last step; float64, one column at a time."""
    T, B = r.shape
    g = np.zeros((T, B))
    for b in range(B):
        for i in reversed(range(T)):
            boot = gamma * (1.0 - term[i, b]) * nv[i, b]
            if term[i, b] or trunc[i, b] or i == T - 1:
                g[i, b] = r[i, b] + boot
            else:
                g[i, b] = r[i, b] + gamma * ((1 - lam[i, b]) * nv[i, b] + lam[i, b] * g[i + 1, b])
    return g, g - v


@pytest.mark.parametrize("lambdas", cf.LAMBDAS)
@pytest.mark.parametrize("form", ("expected", "sampled"))
def test_feature_credit_matches_a_float64_loop(lambdas, form):
    env, _ = envs.make("KeyToDoorDistractors", num_steps=6, num_distractors=2)
    rng = np.random.default_rng(3)
    T, B, gamma = 10, 3, 0.9
    traj = _window(env, rng, T, B)
    components = len(env.transition_categories) + 1 if lambdas == "vector" else 0
    model = cf.FeatureModel(env.transition_categories, 2, 16, components)
    params = model.init(KEY, traj.obs[0], traj.action[0], method=cf.FeatureModel.initialise)
    pi = jax.nn.softmax(traj.logits)
    advantage, targets, _ = cf.feature_credit(model, params, env, traj, pi, gamma, form, lambdas)

    # The reference: the model's probabilities, then everything else in float64 loops.
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    code = f64(env.transition_code(traj.obs, traj.next_obs)).astype(int)
    p = [f64(jax.nn.softmax(model.apply(params, traj.obs, jnp.full((T, B), a))))
         for a in range(2)]
    pi_, a_, done = f64(pi), f64(traj.action).astype(int), f64(traj.done)
    F = code.shape[-1]
    ell = np.zeros((T, B, F))
    for t in range(T):
        for b in range(B):
            for k in range(F):
                if form == "expected":
                    ell[t, b, k] = sum(pi_[t, b, a] * p[a][t, b, k, code[t, b, k]]
                                       for a in range(2))
                else:
                    ell[t, b, k] = p[a_[t, b]][t, b, k, code[t, b, k]]
    if form == "expected":
        scalar_ell = ell.prod(-1)
    else:
        picked = np.take_along_axis(pi_, a_[..., None], -1)[..., 0]
        scalar_ell, ell = picked * ell.prod(-1), picked[..., None] * ell
    shift = lambda x: np.where(  # noqa: E731
        (np.arange(T)[:, None] < T - 1) & (done == 0),
        np.concatenate([x[1:], np.zeros_like(x[:1])]), 0.0)
    term, trunc = f64(traj.terminated), f64(traj.truncated)
    if lambdas == "scalar":
        ref_g, ref_a = _lambda_returns_loop(f64(traj.reward), f64(traj.value),
                                            f64(traj.next_value), shift(scalar_ell), term, trunc,
                                            gamma)
    else:
        parts = f64(env.reward_components(traj.obs, traj.next_obs))
        rewards = np.concatenate([parts, (f64(traj.reward) - parts.sum(-1))[..., None]], -1)
        values = f64(model.apply(params, traj.obs, method=cf.FeatureModel.values))
        next_values = f64(model.apply(params, traj.next_obs, method=cf.FeatureModel.values))
        ref_g = ref_a = 0.0
        for k in range(F + 1):
            lam = shift(ell[..., k] if k < F else scalar_ell)
            g, a = _lambda_returns_loop(rewards[..., k], values[..., k], next_values[..., k],
                                        lam, term, trunc, gamma)
            ref_g, ref_a = ref_g + g, ref_a + a
    np.testing.assert_allclose(targets, ref_g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantage, ref_a, rtol=1e-5, atol=1e-5)


def test_reward_components_and_the_rest_sum_to_the_reward():
    env, _ = envs.make("KeyToDoorDistractors", num_steps=6, num_distractors=2)
    traj = _window(env, np.random.default_rng(0), 8, 2)
    parts = cf.split_rewards(env, traj)
    assert parts.shape == (8, 2, 7)
    np.testing.assert_allclose(parts.sum(-1), traj.reward, rtol=1e-6, atol=1e-6)


# -- the fitted model against the exact per-feature probabilities --------------------------------


def test_fitted_feature_model_learns_the_exact_feature_probabilities():
    """On the key-to-door with distractors the per-feature law is known: each coin is fair
    (p = ½ for whatever it shows), the step counter and the key move deterministically (p = 1).
    Fitted by the official cross-entropy on random play, the model's λ per feature approaches
    them, and the scalar λ (their product) approaches ½^D."""
    env, params = envs.make("KeyToDoorDistractors", num_steps=5, num_distractors=2)
    N, T = 1024, 5
    keys = jax.random.split(jax.random.key(2), N)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    rows = []
    for t in range(T):
        keys = jax.vmap(jax.random.split)(keys)[:, 0]
        action = jax.random.randint(jax.random.fold_in(KEY, t), (N,), 0, 2)
        nobs, state, r, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params)
        rows.append((obs, action, info["final_observation"], r, term, trunc))
        obs = nobs
    stack = lambda i: jnp.stack([row[i] for row in rows])  # noqa: E731
    traj = Trajectory(obs=stack(0), action=stack(1), reward=stack(3), terminated=stack(4),
                      truncated=stack(5), value=jnp.zeros((T, N)), next_value=jnp.zeros((T, N)),
                      log_prob=jnp.full((T, N), jnp.log(0.5)), logits=jnp.zeros((T, N, 2)),
                      next_obs=stack(2))
    model = cf.FeatureModel(env.transition_categories, 2, 64)
    theta = model.init(KEY, traj.obs[0], traj.action[0], method=cf.FeatureModel.initialise)
    opt = optax.adam(3e-3)
    pi = jax.nn.softmax(traj.logits)

    @jax.jit
    def fit(theta, opt_state):
        def step(carry, _):
            theta, opt_state = carry
            grads = jax.grad(lambda p: cf.feature_loss(model, p, env, traj, pi, 1.0, "expected",
                                                       "scalar")[0])(theta)
            updates, opt_state = opt.update(grads, opt_state)
            return (optax.apply_updates(theta, updates), opt_state), None
        return jax.lax.scan(step, (theta, opt_state), None, length=300)[0]

    theta, _ = fit(theta, opt.init(theta))
    code = env.transition_code(traj.obs, traj.next_obs)
    p_all = cf.feature_probabilities(model, theta, traj.obs, code, 2)
    ell = cf.feature_step_probability(p_all, pi, traj.action, "expected", "vector")
    coins = np.asarray(ell[:-1, :, 2:4])  # the last step shows no coins: deterministic
    assert abs(coins.mean() - 0.5) < 0.05 and coins.std() < 0.1
    step_and_key = np.asarray(ell[1:, :, [0, 4]])  # after step 0 the key no longer moves
    assert step_and_key.min() > 0.9
    scalar = cf.feature_step_probability(p_all, pi, traj.action, "expected", "scalar")
    assert abs(float(scalar[1:-1].mean()) - 0.25) < 0.05


# -- the estimator and the command line ----------------------------------------------------------


def test_refusals_name_what_is_missing():
    env, params = envs.make("KeyToDoorDistractors", num_steps=4)
    with pytest.raises(ValueError, match="lambdas=vector needs model=features"):
        make_estimator("chunked", env=env, env_params=params, lambdas="vector")
    charge, charge_params = envs.make("AccumulatedCharge", horizon=10, points=2)
    with pytest.raises(ValueError, match="reward_components"):
        make_estimator("chunked", env=charge, env_params=charge_params, model="features",
                       lambdas="vector")
    cartpole, cartpole_params = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="transition_code"):
        make_estimator("chunked", env=cartpole, env_params=cartpole_params, model="features")


@pytest.mark.parametrize("env,options,model", [
    ("AccumulatedCharge", ["horizon=12", "points=3"], "features"),
    ("KeyToDoorDistractors", ["num_steps=6"], "features"),
    ("KeyToDoorDistractors", ["num_steps=6"], "feature_oracle"),
])
def test_feature_model_trains_from_the_command_line(tmp_path, env, options, model):
    lambdas = "vector" if env == "KeyToDoorDistractors" else "scalar"
    argv = ["train", "--algo", "a2c", "--env", env, "--env-option", *options,
            "--estimator", "chunked", "--estimator-option", "form=expected", f"model={model}",
            f"lambdas={lambdas}", "--num-envs", "4", "--num-steps", "13", "--total-timesteps",
            str(4 * 13 * 6), "--hidden-sizes", "8", "8", "--eval-every", "3",
            "--eval-episodes", "4", "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv) == 0
    metrics = runlog.read_metrics(tmp_path)
    if model == "features":
        nll = np.asarray(metrics["estimator/model_nll"]).ravel()
        assert np.isfinite(nll).all() and nll[-1] < nll[0]  # the model is being fitted
        # ... and scored against the environment's exact per-feature law at the evaluation
        # points (updates 3 and 6), not in the training updates between them
        error = np.asarray(metrics["credit/lambda_error_to_exact"]).ravel()
        scored = np.isfinite(error)
        assert scored.sum() == 2 and (error[scored] > 0).all(), error
        rmse = np.asarray(metrics["credit/advantage_rmse_to_exact"]).ravel()
        assert (np.isfinite(rmse) == scored).all()
    else:
        assert "estimator/model_nll" not in metrics
        assert "credit/lambda_error_to_exact" not in metrics
    lam = np.asarray(metrics["credit/lambda_mean"]).ravel()
    assert ((lam > 0) & (lam < 1)).all()
    assert np.isfinite(np.asarray(metrics["eval/success_rate"], float)).any()
    if lambdas == "vector":
        assert np.isfinite(np.asarray(metrics["estimator/component_value_loss"])).all()

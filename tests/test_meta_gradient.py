"""Meta-gradient γ and λ (jaxcredit.agents.meta_gradient): a hand case, finite differences
through the real credit and Adam step, and the engine."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents import meta_gradient as M
from jaxcredit.estimators import returns
from jaxcredit.fitting import adam_step
from jaxcredit.objectives import losses


def test_one_step_meta_gradient_by_hand():
    # Inner loss ½(θ − η)², one SGD step of 0.5: θ' = θ − 0.5 (θ − η); outer loss ½(θ' − 3)².
    # θ = 1, η = 2: θ' = 1.5, J' = 1.125, dJ'/dη = (θ' − 3) · 0.5 = −0.75.
    value, grad = M.meta_gradient(
        {"eta": jnp.float32(2.0)},
        inner_loss=lambda theta, eta: 0.5 * (theta - eta["eta"]) ** 2,
        inner_step=lambda theta, g: theta - 0.5 * g,
        outer_loss=lambda theta: 0.5 * (theta - 3.0) ** 2,
        params=jnp.float32(1.0))
    assert float(value) == pytest.approx(1.125)
    assert float(grad["eta"]) == pytest.approx(-0.75)


def test_one_step_scores_at_the_reference_and_descends():
    """Scalar stand-ins: the credit is λ itself, the loss ½(θ − credit)², the step θ − g/2.
    δ = 0, λ = 0.5: θ' = 0 − ½ (0 − 0.5) = 0.25; J' at λ̄ = 1 is ½ (0.25 − 1)² = 0.28125;
    dJ'/dδ = (0.25 − 1) · ½ · σ'(0) = −0.09375 < 0, so Adam's first step raises δ by meta_lr."""
    hp = Hparams.create(lambda_=0.5, meta_lambda_reference=1.0, meta_lr=0.01)
    meta, value = M.one_step(
        M.init_meta_state(("lambda",)), jnp.float32(0.0), None, None, hp,
        assign=lambda window, hp_: hp_.lambda_,
        loss=lambda p, window, credit, hp_: 0.5 * (p - credit) ** 2,
        step=lambda p, g: p - 0.5 * g)
    assert float(value) == pytest.approx(0.28125, rel=1e-5)
    assert float(meta.offsets["lambda_"]) == pytest.approx(0.01, rel=1e-3)


def test_offsets_start_at_the_runs_values_and_the_reference_replaces_them():
    hp = Hparams.create(gamma=0.9, lambda_=0.7, meta_gamma_reference=0.99)
    meta = M.init_meta_state(("gamma", "lambda"))
    adapted = M.adapted(hp, meta.offsets)
    np.testing.assert_allclose([adapted.gamma, adapted.lambda_], [0.9, 0.7], rtol=1e-5)
    shifted = M.adapted(hp, {"lambda_": jnp.float32(1.0)})  # logit(0.7) + 1
    assert float(shifted.lambda_) == pytest.approx(1 / (1 + np.exp(-(np.log(0.7 / 0.3) + 1))),
                                                   rel=1e-5)
    assert float(shifted.gamma) == pytest.approx(0.9)
    ref = M.reference(hp, meta.offsets)
    assert (float(ref.gamma), float(ref.lambda_)) == (pytest.approx(0.99), 1.0)


def _window(seed, T=7, N=2, A=3):
    rng = np.random.default_rng(seed)
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    return dict(logits_feature=f(T, N, 4), action=jnp.asarray(rng.integers(A, size=(T, N))),
                reward=f(T, N), value=f(T, N), next_value=f(T, N),
                terminated=jnp.asarray(rng.random((T, N)) < 0.15),
                truncated=jnp.zeros((T, N), bool))


def test_meta_gradient_through_gae_and_adam_matches_finite_differences():
    """A linear softmax policy and critic, A2C's loss on GAE(γ(δ), λ(δ)), one real Adam step:
    the meta-gradient of J' with respect to δ equals central differences of J'(θ'(δ))."""
    w = _window(0)
    hp = Hparams.create(gamma=0.8, lambda_=0.6, lr=0.05)
    with jax.enable_x64(True):
        params = {"pi": jnp.asarray(np.random.default_rng(1).normal(size=(4, 3)) * 0.3),
                  "v": jnp.zeros(4)}
        opt_state = jax.tree.map(
            jnp.asarray, __import__("optax").scale_by_adam().init(params))
        x = jnp.asarray(w["logits_feature"], jnp.float64)

        def credit(window_cols, hp_):
            adv, target = returns.gae(
                w["reward"][:, window_cols].astype(jnp.float64),
                w["value"][:, window_cols].astype(jnp.float64),
                w["next_value"][:, window_cols].astype(jnp.float64),
                w["terminated"][:, window_cols], w["truncated"][:, window_cols],
                hp_.gamma, hp_.lambda_)
            return adv, target

        def loss(p, cols, adv, target):
            logits = x[:, cols] @ p["pi"]
            pg, _ = losses.policy_loss(logits.reshape(-1, 3), w["action"][:, cols].reshape(-1),
                                       adv.reshape(-1), jnp.zeros(adv.size), None, 0.2, False)
            value = x[:, cols] @ p["v"]
            return pg + 0.5 * losses.value_loss(value.reshape(-1), value.reshape(-1),
                                                target.reshape(-1), 0.2, False)

        def inner_loss(p, offsets):
            hp_ = M.adapted(hp, offsets)
            return loss(p, slice(0, 1), *credit(slice(0, 1), hp_))

        def step(p, g):
            return adam_step(p, opt_state, g, 0.05, jnp.inf, 1e-5, eps_root=M.EPS_ROOT)[0]

        ref = M.reference(hp, {"gamma": 0.0, "lambda_": 0.0})
        outer = lambda p: loss(p, slice(1, 2), *credit(slice(1, 2), ref))  # noqa: E731
        offsets = {"gamma": jnp.float64(0.3), "lambda_": jnp.float64(-0.2)}
        _, grad = M.meta_gradient(offsets, inner_loss, step, outer, params)

        def objective(offsets):
            return outer(step(params, jax.grad(inner_loss)(params, offsets)))

        for field in offsets:
            h = 1e-4
            up = objective({**offsets, field: offsets[field] + h})
            down = objective({**offsets, field: offsets[field] - h})
            fd = (up - down) / (2 * h)
            assert abs(float(grad[field])) > 1e-6, field  # the credit's γ and λ do reach θ'
            np.testing.assert_allclose(grad[field], fd, rtol=1e-4, atol=1e-9, err_msg=field)


def _engine(meta, **hparams):
    config = TrainConfig(algo="a2c", env="DelayedEffect", env_options=(("n", 4),), num_envs=8,
                         num_steps=5, total_timesteps=8 * 5 * 30, hidden_sizes=(16,),
                         meta_gradient=meta).resolved().replace(eval_every=0)
    engine = make_engine(config)
    hp = Hparams.create(gamma=0.9, lambda_=0.5, **hparams)
    state, metrics = jax.jit(engine.train)(jax.random.key(0), hp)
    return state, metrics


def test_the_engine_adapts_lambda_and_gamma():
    state, metrics = _engine(("lambda", "gamma"), meta_lr=0.05)
    lam, gamma = np.asarray(metrics["meta/lambda"]), np.asarray(metrics["meta/gamma"])
    assert lam[0] == pytest.approx(0.5, rel=1e-5) and gamma[0] == pytest.approx(0.9, rel=1e-5)
    assert abs(lam[-1] - 0.5) > 0.01 and abs(gamma[-1] - 0.9) > 0.005
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values()
               if np.asarray(v).dtype.kind == "f" and not np.isnan(np.asarray(v)).all())


def test_with_a_tiny_meta_rate_the_agent_trains_as_without_the_meta_gradient():
    # Both parameters meta-learned: test_the_engine_adapts_lambda_and_gamma's program (the meta
    # rate is an argument), compiled once for both tests.
    with_meta, _ = _engine(("lambda", "gamma"), meta_lr=1e-10)
    without, _ = _engine(())
    for a, b in zip(jax.tree.leaves(with_meta.agent.params), jax.tree.leaves(without.agent.params)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("fields, message", [
    (dict(meta_gradient=("beta",)), "meta_gradient takes"),
    (dict(meta_gradient=("lambda", "lambda")), "meta_gradient takes"),
    (dict(meta_gradient=("lambda",), num_envs=1), "num_envs >= 2"),
    (dict(meta_gradient=("gamma",), algo="dqn", estimator="double_q", num_steps=1),
     "no meta-gradient"),
])
def test_bad_meta_gradient_settings_are_refused(fields, message):
    base = dict(algo="a2c", env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=64)
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**base, **fields}).resolved()

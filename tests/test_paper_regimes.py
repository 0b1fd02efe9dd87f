"""The engine features the papers' own training regimes need, for every on-policy learner:

1. the ε-mixture exploration policy π_ε = (1 − ε)·softmax + ε/A (COCOA): a hand case, and in the
   engine it is what acts, what the stored log-probs and the exact models read, while
   evaluation plays the softmax policy;
2. AdamW (decoupled weight decay) and no gradient clipping, for the agent and for a fitted
   credit model, against optax's own ``adamw`` and ``adam``;
3. Hparams accept ``inf`` as "no clipping" and still reject it elsewhere.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.fitting import FitSchedule, adam_step, fit, init_fit_state
from jaxcredit.networks import ActorCritic, epsilon_mixture
from jaxcredit.types import Trajectory


# ---------------------------------------------------------------------------------------------
# 1. The ε-mixture
# ---------------------------------------------------------------------------------------------


def test_epsilon_mixture_hand_case():
    logits = jnp.log(jnp.array([[0.7, 0.3], [1.0, 1e-30]]))
    # (1 − 0.2)·(0.7, 0.3) + 0.1 = (0.66, 0.34); a deterministic policy keeps ε/A = 0.1.
    np.testing.assert_allclose(jnp.exp(epsilon_mixture(logits, 0.2)),
                               [[0.66, 0.34], [0.9, 0.1]], atol=1e-6)
    # ε = 0 is the softmax itself.
    np.testing.assert_allclose(jnp.exp(epsilon_mixture(logits, 0.0)), jnp.exp(logits), atol=1e-7)


def _key_to_door_engine(**overrides):
    settings = dict(algo="a2c", env="KeyToDoor", env_options=(("length", 6),), num_envs=4,
                    num_steps=6, total_timesteps=4 * 6 * 2, eval_every=1, eval_episodes=4)
    config = TrainConfig.from_flat(**{**settings, **overrides})
    return make_engine(config)


def test_epsilon_mixture_acts_and_is_read_by_the_exact_models_not_by_evaluation():
    eps = 0.3
    engine = _key_to_door_engine(policy_epsilon=eps)
    state = engine.init(jax.random.key(0))
    hp = Hparams.create(gamma=1.0)
    # Make the actor's softmax nearly deterministic: only the mixture keeps every action.
    params = jax.tree.map(lambda x: 30.0 * x, state.agent.params)
    state = state.replace(agent=state.agent.replace(params=params))
    window = engine.collect(state, hp, jax.random.key(1))
    pi_stored = jax.nn.softmax(window.trajectory.logits)
    num_actions = pi_stored.shape[-1]
    assert float(pi_stored.min()) >= eps / num_actions - 1e-6
    mdp = engine.ground_truth.mdp()
    behaviour = gt_lib.policy_table(engine.policy_logits, params, mdp)
    target = gt_lib.policy_table(engine.target_logits, params, mdp)
    np.testing.assert_allclose(behaviour, (1 - eps) * target + eps / num_actions, atol=1e-5)
    # The stored log-probs are the behaviour policy's at the visited states.
    np.testing.assert_allclose(pi_stored, behaviour[window.trajectory.state], atol=1e-5)
    # Evaluation reports the target policy's exact return and task metrics.
    metrics = engine.evaluate(state, hp)
    np.testing.assert_allclose(metrics["eval/exact_return"],
                               gt_lib.exact_return(engine.ground_truth, mdp, target), rtol=1e-5)


def test_the_engine_learns_from_the_mixture_and_evaluates_the_softmax():
    """Inside the engine, not only in the network: with ε = 0.3 and a nearly deterministic
    softmax, the logits the objective differentiates are the mixture's, the oracle credit is
    the exact model of the mixture (the behaviour policy), and evaluation plays the softmax.
    DelayedEffect with σ = 0: the first action alone sets the return, so the softmax's 64
    evaluation episodes all return its exact value, where the mixture would take the other
    first action in about 15 % of them."""
    eps = 0.3
    config = TrainConfig.from_flat(
        algo="a2c", env="DelayedEffect", env_options=(("n", 3), ("sigma", 0.0)), num_envs=4,
        num_steps=8, total_timesteps=64, eval_every=1, eval_episodes=64, policy_epsilon=eps,
        estimator="cocoa_reward", estimator_options=(("model", "oracle"),))
    engine = make_engine(config)
    state = engine.init(jax.random.key(0))
    # The softmax all but sure of action 1 in every state: its output bias (0, 12).
    params = jax.tree.map(lambda x: x, state.agent.params)
    params["params"]["actor"]["Dense_2"]["bias"] = jnp.array([0.0, 12.0])
    state = state.replace(agent=state.agent.replace(params=params))
    hp = Hparams.create(gamma=1.0)
    window = engine.collect(state, hp, jax.random.key(1))
    traj = window.trajectory
    # 1. What the objective differentiates.
    logits = engine.agent_network.training_outputs(params, window.memory, traj.obs,
                                                   window.first)[0]
    target = engine.network.apply(params, traj.obs, method=ActorCritic.target_policy)
    np.testing.assert_allclose(jnp.exp(logits), jnp.exp(epsilon_mixture(target, eps)),
                               atol=1e-6)
    # 2. The oracle's exact model is the mixture's.
    mdp = engine.ground_truth.mdp()
    _, credit, _, _ = engine.assign_credit(state, traj, hp, jax.random.key(2))

    def exact_credit(behaviour):
        logits = engine.policy_logits if behaviour else engine.target_logits
        pi = gt_lib.policy_table(logits, params, mdp)
        model = gt_lib.exact_model_params("reward_hindsight", engine.ground_truth, mdp, pi, 1.0)
        return engine.estimator.assign(model, traj, hp, jax.random.key(2)).advantage

    np.testing.assert_allclose(credit.advantage, exact_credit(True), atol=1e-5)
    assert float(jnp.abs(exact_credit(False) - exact_credit(True)).max()) > 0.03
    # 3. Evaluation plays the softmax: every episode returns its exact value.
    metrics = engine.evaluate(state, hp)
    softmax = gt_lib.policy_table(engine.target_logits, params, mdp)
    assert float(softmax.max(-1).min()) > 0.999
    np.testing.assert_allclose(metrics["eval/return"], metrics["eval/exact_return"], atol=1e-3)
    np.testing.assert_allclose(metrics["eval/exact_return"],
                               gt_lib.exact_return(engine.ground_truth, mdp, softmax), rtol=1e-5)


def test_the_objective_differentiates_through_the_mixture():
    net = ActorCritic(3, (8,), epsilon=0.1)
    obs = jnp.ones((2, 4))
    params = net.init(jax.random.key(0), obs)
    logits, _ = net.apply(params, obs)
    np.testing.assert_allclose(
        logits, epsilon_mixture(net.apply(params, obs, method=ActorCritic.target_policy), 0.1),
        atol=1e-6)
    grad = jax.grad(lambda p: jnp.exp(net.apply(p, obs)[0])[:, 0].sum())(params)
    assert float(optax.global_norm(grad)) > 0


# ---------------------------------------------------------------------------------------------
# 2. AdamW and no clipping
# ---------------------------------------------------------------------------------------------


def test_adam_step_is_optax_adamw_and_inf_is_no_clipping():
    params = {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array(0.5)}
    opt = optax.adamw(3e-4, eps=1e-8, weight_decay=1e-4)
    ref_params, ref_state = params, opt.init(params)
    ours, our_state = params, optax.scale_by_adam(eps=1e-8).init(params)
    for i in range(5):
        grads = jax.tree.map(lambda x: (i + 1.0) * 50.0 * jnp.sin(x + i), ref_params)
        updates, ref_state = opt.update(grads, ref_state, ref_params)
        ref_params = optax.apply_updates(ref_params, updates)
        ours, our_state, _ = adam_step(ours, our_state, grads, 3e-4, jnp.inf, 1e-8, 1e-4)
    for name in params:
        np.testing.assert_allclose(ours[name], ref_params[name], rtol=1e-6)
    # Zero gradient: Adam moves nothing, the decay alone shrinks θ by (1 − lr·wd).
    zero = jax.tree.map(jnp.zeros_like, params)
    decayed, _, _ = adam_step(params, optax.scale_by_adam(eps=1e-8).init(params), zero, 0.1,
                              1.0, 1e-8, 0.5)
    np.testing.assert_allclose(decayed["w"], params["w"] * (1 - 0.05), rtol=1e-6)


def test_fit_passes_weight_decay_to_the_model_optimiser():
    zeros = jnp.zeros((3, 2))
    traj = Trajectory(obs=zeros[..., None], action=zeros.astype(jnp.int32), reward=zeros,
                      terminated=zeros.astype(bool), truncated=zeros.astype(bool), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=jnp.zeros((3, 2, 2)))

    def flat_loss(params, batch, hparams, key):  # no gradient: only the decay moves c
        del batch, hparams, key
        return 0.0 * params["c"], {}

    schedule = FitSchedule(steps=2)
    state = init_fit_state({"c": jnp.float32(2.0)}, traj, schedule)
    fitted, _ = fit(flat_loss, state, traj, None, 0.1, jnp.inf, jax.random.key(0), schedule,
                    weight_decay=0.5)
    np.testing.assert_allclose(fitted.params["c"], 2.0 * 0.95 ** 2, rtol=1e-6)


def test_agent_weight_decay_and_adam_eps_reach_the_update():
    base = _key_to_door_engine(eval_every=0)
    decayed = _key_to_door_engine(eval_every=0, adam_eps=1e-8)
    key = jax.random.key(3)
    runs = {}
    for name, engine, wd in (("base", base, 0.0), ("wd", base, 0.1), ("eps", decayed, 0.0)):
        hp = Hparams.create(gamma=1.0, lr=1e-2, weight_decay=wd, max_grad_norm=jnp.inf)
        runs[name] = engine.update_step(engine.init(key), hp)[0].agent.params
    diff = lambda a, b: float(optax.global_norm(jax.tree.map(jnp.subtract, a, b)))  # noqa: E731
    assert diff(runs["base"], runs["wd"]) > 1e-6
    assert diff(runs["base"], runs["eps"]) > 0


# ---------------------------------------------------------------------------------------------
# 3. Validation
# ---------------------------------------------------------------------------------------------


def test_inf_is_accepted_only_for_gradient_clips():
    Hparams.create(max_grad_norm=float("inf"), estimator_max_grad_norm=float("inf"),
                   redistributor_max_grad_norm=float("inf"))
    with pytest.raises(ValueError, match="lr must be finite"):
        Hparams.create(lr=float("inf"))
    with pytest.raises(ValueError, match="weight_decay must be non-negative"):
        Hparams.create(weight_decay=-1e-4)
    with pytest.raises(ValueError, match="policy_epsilon"):
        TrainConfig(policy_epsilon=1.0).resolved()
    with pytest.raises(ValueError, match="adam_eps"):
        TrainConfig(adam_eps=0.0).resolved()


@pytest.mark.parametrize("name", ["hca_state", "cocoa_reward", "cocoa_feature"])
def test_cocoa_hypernet_serves_every_contribution_estimator(name):
    """COCOA's hindsight network is an option of HCA+, COCOA-reward and COCOA-feature: its loss
    has a gradient and its credit is an advantage (Σ_a π A = 0 for the future part)."""
    from jaxcredit.estimators import make_estimator  # noqa: PLC0415

    engine = _key_to_door_engine(estimator=name, estimator_options=(
        ("model", "hypernet"), ("hidden", 16)))
    state = engine.init(jax.random.key(0))
    hp = Hparams.create(gamma=1.0)
    traj = engine.collect(state, hp, jax.random.key(1)).trajectory
    est = make_estimator(name, {"env": engine.env, "env_params": engine.env_params},
                         model="hypernet", hidden=16)
    params = state.credit.estimator.params
    grads = jax.grad(lambda p: est.loss(p, traj, hp, jax.random.key(2))[0])(params)
    assert float(optax.global_norm(grads)) > 0
    credit = est.assign(params, traj, hp, jax.random.key(3)).advantage
    pi = jax.nn.softmax(traj.logits)
    immediate = (jax.nn.one_hot(traj.action, 4) / jnp.take_along_axis(
        pi, traj.action[..., None], -1) - 1) * traj.reward[..., None]
    np.testing.assert_allclose(jnp.sum(pi * (credit - immediate), -1), 0.0, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# 4. Burn-in updates and a pretrained, then frozen, part of a credit model
# ---------------------------------------------------------------------------------------------


def _same(a, b) -> bool:
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a),
                                                            jax.tree.leaves(b)))


def test_burn_in_updates_only_act():
    engine = _key_to_door_engine(estimator="cocoa_reward", burn_in_updates=2, eval_every=0,
                                 total_timesteps=4 * 6 * 3)
    hp = Hparams.create(gamma=1.0, lr=1e-2, estimator_lr=1e-2)
    start = engine.init(jax.random.key(0))
    step = jax.jit(engine.update_step)
    s1, m1 = step(start, hp)
    s2, _ = step(s1, hp)
    s3, m3 = step(s2, hp)
    assert _same(s2.agent.params, start.agent.params)
    assert _same(s2.credit.estimator, start.credit.estimator)
    assert not _same(s3.agent.params, s2.agent.params)
    # The model takes its steps from update 2 on (Adam's state moves even where a sparse
    # reward leaves the pair loss without gradient).
    assert not _same(s3.credit.estimator.opt_state, s2.credit.estimator.opt_state)
    assert np.isnan(m1["estimator/loss"]) and np.isfinite(m3["estimator/loss"])
    # The burn-in acts: its windows are whole episodes of the environment.
    assert float(m1["episodes"]) == 4 and np.isfinite(m1["episode_return"])


def test_pretrained_features_are_fitted_once_after_burn_in_then_frozen():
    engine = _key_to_door_engine(
        estimator="cocoa_feature", estimator_options=(("features", "pretrain"),),
        burn_in_updates=2, estimator_pretrain_steps=60, eval_every=0,
        total_timesteps=4 * 6 * 4)
    # Weight decay would shrink the features after pretraining if they were not frozen.
    hp = Hparams.create(gamma=1.0, estimator_lr=1e-2, estimator_weight_decay=0.1)
    est = engine.estimator
    step = jax.jit(engine.update_step)
    states = [engine.init(jax.random.key(1))]
    for _ in range(4):
        states.append(step(states[-1], hp)[0])
    obj = [s.credit.estimator.params["object"] for s in states]
    hind = [s.credit.estimator.params["hindsight"] for s in states]
    # Updates 0, 1: burn-in (nothing fitted); update 2 pretrains the features once; 3: frozen.
    assert _same(obj[2], obj[0]) and _same(hind[2], hind[0])
    assert not _same(obj[3], obj[2])
    assert _same(obj[4], obj[3])
    assert not _same(hind[4], hind[3])
    # The pretraining lowered the feature loss on the burn-in windows.
    window = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1).reshape(
        (x.shape[1], -1) + x.shape[3:]), states[3].credit.estimator.pretrain_buffer)
    data = window if est.pretrain_data is None else est.pretrain_data(window)
    before = est.pretrain_loss(states[0].credit.estimator.params, data, hp, None)[0]
    after = est.pretrain_loss(states[3].credit.estimator.params, data, hp, None)[0]
    assert float(after) < float(before)


def test_vmapped_runs_pretrain_at_one_update_only(monkeypatch):
    """Seeds run vmapped; the pretraining's steps must run at the update that pretrains and at
    no other. (A ``lax.cond`` on the per-run update count becomes a select under ``vmap`` and
    runs its pretraining branch at every update: same numbers, 20 000 steps a time.) The model's
    Adam steps are counted: 30 pretraining steps once, plus the fit's 4 steps an update."""
    from jaxcredit import fitting

    calls = []
    step = fitting.adam_step

    def counted(params, *args, **kwargs):
        jax.debug.callback(lambda: calls.append(1))
        return step(params, *args, **kwargs)

    monkeypatch.setattr(fitting, "adam_step", counted)
    engine = _key_to_door_engine(
        estimator="cocoa_feature", estimator_options=(("features", "pretrain"),),
        burn_in_updates=1, estimator_pretrain_steps=30, eval_every=0,
        total_timesteps=4 * 6 * 4)
    hp = Hparams.create(gamma=1.0, estimator_lr=1e-2)
    seeds = 2
    state = jax.vmap(engine.init)(jax.random.split(jax.random.key(0), seeds))
    update = jax.jit(jax.vmap(engine.update_step, in_axes=(0, None)))
    for _ in range(4):
        state, _ = update(state, hp)
    jax.effects_barrier()
    # At most one call per run and step (a vmapped callback may also run once for the batch).
    assert 0 < len(calls) <= seeds * (30 + 4 * 4), len(calls)


def test_burn_in_and_pretraining_bad_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="needs burn_in_updates"):
        TrainConfig.from_flat(estimator_pretrain_steps=10).resolved()
    with pytest.raises(ValueError, match="burn_in_updates must be"):
        TrainConfig(burn_in_updates=-1).resolved()
    with pytest.raises(ValueError, match="no part to pretrain"):
        _key_to_door_engine(estimator="cocoa_reward", burn_in_updates=1,
                            estimator_pretrain_steps=5)
    with pytest.raises(ValueError, match="learning_starts"):
        TrainConfig(algo="dqn", burn_in_updates=3).resolved()
    with pytest.raises(ValueError, match="explores ε-greedily by its own schedule"):
        TrainConfig.from_flat(algo="dqn", policy_epsilon=0.05).resolved()

"""The credit pipeline: stages defined outside the package plug in with one registry line and
train; ``module:factory`` names; algo presets; the oracle's refusals.

Compiles dominate on CPU, so every engine here is tiny (CartPole, 4 envs × 8 steps).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_and_train
from jaxcredit import objectives, presets, redistribute, relabel
from jaxcredit.agents import ALGO_PRESETS, Hparams, TrainConfig, make_engine
from jaxcredit.estimators import Estimator, make_estimator, register, registered
from jaxcredit.objectives import losses
from jaxcredit.types import Credit

TINY = dict(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6,
            hidden_sizes=(8,), eval_every=3, eval_episodes=2, eval_max_steps=20)
KEY = jax.random.key(0)


# -- stages written by a user, outside jaxcredit ------------------------------------------------

def td0() -> Estimator:
    """One-step TD error as the advantage: r + γ V(s') − V(s) (bootstrap cut at terminals)."""

    def assign(params, trajectory, hparams, key):
        del params, key
        target = trajectory.reward + hparams.gamma * (1.0 - trajectory.terminated) \
            * trajectory.next_value
        advantage = target - trajectory.value
        return Credit(advantage=advantage, value_target=target,
                      diagnostics={"td0_marker": jnp.float32(7.0)})

    return Estimator(name="td0", assign=assign)


def reward_offset() -> redistribute.Redistributor:
    """A learned stage: fits b ≈ E[r] by least squares and pays r − b instead of r."""

    def loss(params, trajectory, hparams, key):
        value = jnp.mean((trajectory.reward - params["b"]) ** 2)
        return value, {"offset": params["b"]}

    def apply(params, trajectory, key, memory):  # memory: None (no init_memory)
        return trajectory.replace(reward=trajectory.reward - params["b"]), memory, {}

    return redistribute.Redistributor(name="reward_offset", redistribute=apply,
                                      init=lambda key, example: {"b": jnp.zeros(())},
                                      loss=loss, learned=True)


def doubled_rewards() -> relabel.Relabeller:
    return relabel.Relabeller(name="doubled", relabel=lambda traj, key: traj.replace(
        reward=2.0 * traj.reward))


def pg_without_critic_terms() -> objectives.Objective:
    def loss(outputs, batch, credit, hparams):
        value, metrics = losses.policy_loss(outputs.logits, batch.action, credit.advantage,
                                            batch.log_prob, batch.logits, hparams.clip_eps, False)
        return value, {"custom_objective": jnp.float32(1.0), **metrics}

    return objectives.Objective(name="bare_pg", loss=loss)


def test_user_estimator_registers_with_one_line_and_trains():
    register("td0", td0)
    assert "td0" in registered()
    engine = make_engine(TrainConfig.from_flat(algo="a2c", estimator="td0", **TINY))
    _, metrics = jax.jit(engine.train)(KEY, Hparams.create())
    np.testing.assert_allclose(metrics["credit/td0_marker"], 7.0)
    assert np.all(np.isfinite(metrics["loss"]))


def test_module_factory_paths_need_no_registration():
    engine = make_engine(TrainConfig.from_flat(algo="a2c",
                                               estimator="jaxcredit.estimators.classic:n_step",
                                               estimator_options=(("n", 3),), **TINY))
    assert engine.estimator.name == "nstep"
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        make_estimator("no_such_module:factory")
    with pytest.raises(ValueError, match="has no 'nope'"):
        make_estimator("jaxcredit.estimators.classic:nope")


def test_learned_redistributor_is_fitted_and_changes_the_rewards():
    """CartPole pays 1 per step, so the fitted offset moves towards 1 and the estimator sees
    r − b: with b > 0 its value targets fall below the undiscounted-sum of ones."""
    redistribute.register("reward_offset", reward_offset)
    config = TrainConfig.from_flat(algo="a2c", redistribute="reward_offset",
                                   redistribute_fit_steps=5, **TINY)
    engine = make_engine(config)
    hparams = Hparams.create(redistributor_lr=0.1)
    state, metrics = jax.jit(engine.train)(KEY, hparams)
    offsets = np.asarray(metrics["redistribute/offset"])
    assert offsets[0] < offsets[-1] and 0.5 < float(state.credit.redistributor.params["b"]) < 1.2
    assert {"redistribute/loss", "redistribute/loss_first", "redistribute/grad_norm"} <= set(
        metrics)
    window = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    traj, credit, fitted, _ = jax.jit(engine.assign_credit)(state, window.trajectory, hparams,
                                                            jax.random.key(2))
    # Fitted again on this window first, then applied with the new offset.
    np.testing.assert_allclose(traj.reward, 1.0 - fitted.credit.redistributor.params["b"],
                               rtol=1e-5)
    assert np.all(np.isfinite(credit.advantage))


def test_relabeller_runs_before_the_critic_and_objective_is_pluggable():
    relabel.register("doubled", doubled_rewards)
    objectives.register("bare_pg", pg_without_critic_terms)
    config = TrainConfig.from_flat(algo="a2c", relabel="doubled", objective="bare_pg", **TINY)
    engine = make_engine(config)
    hparams = Hparams.create()
    # The initial state comes with the run (one program).
    state, (_, metrics) = jax.jit(init_and_train, static_argnums=0)(engine, KEY, hparams)
    window = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    np.testing.assert_allclose(window.trajectory.reward, 1.0)  # CartPole pays 1
    # The credit transform relabels first, and every later stage reads the relabelled window.
    traj, credit, _, _ = jax.jit(engine.assign_credit)(state, window.trajectory, hparams,
                                                       jax.random.key(2))
    np.testing.assert_allclose(traj.reward, 2.0)
    np.testing.assert_allclose(credit.value_target, jax.jit(engine.credit.assign)(
        None, window.trajectory.replace(reward=2.0 * window.trajectory.reward), hparams,
        jax.random.key(2)).value_target, rtol=1e-6)
    # Training episodes still report the environment's own returns.
    assert "custom_objective" in metrics and "value_loss" not in metrics


def test_algo_is_a_preset_of_objective_estimator_and_loop_counts():
    assert ALGO_PRESETS["reinforce"]["estimator"] == "mc"
    for algo, preset in ALGO_PRESETS.items():
        config = TrainConfig(algo=algo).resolved().flat()
        for name, value in preset.items():
            assert config[name] == value, (algo, name)
    config = TrainConfig(algo="ppo", objective="pg", update_epochs=2).resolved()
    assert config.objective == "pg" and config.update_epochs == 2 and config.num_minibatches == 4
    # REINFORCE's credit is the Monte-Carlo return with V ≡ 0.
    engine = make_engine(TrainConfig.from_flat(algo="reinforce", **TINY))
    assert engine.estimator.name == "mc" and not engine.config.critic


def test_presets_build_configs_and_oracle_suffix():
    fields = presets.learner_fields("hca_state oracle", estimator_options=(("pairs", "sampled"),))
    assert dict(fields["estimator_options"]) == {"model": "oracle", "pairs": "sampled"}
    assert presets.learner_fields("hca_return 1-step")["estimator_fit_steps"] == 1
    with pytest.raises(ValueError, match="unknown learner"):
        presets.learner_fields("hca_magic")
    for label in presets.LEARNERS:
        TrainConfig.from_flat(**presets.learner_fields(label)).resolved()


def test_oracle_needs_ground_truth_and_gamma_one():
    oracle = TrainConfig.from_flat(algo="a2c", estimator="hca_return",
                                   estimator_options=(("model", "oracle"),), **TINY)
    with pytest.raises(ValueError, match="needs an environment with exact ground truth"):
        make_engine(oracle)
    with pytest.raises(ValueError, match="needs return_kind='mc'"):
        make_estimator("hca_return", model="oracle", return_kind="lambda")
    from jaxcredit.agents.host_loop import check_oracle_settings

    engine = make_engine(TrainConfig.from_flat(algo="a2c", estimator="hca_return",
                                               estimator_options=(("model", "oracle"),),
                                               env="AmbiguousBandit", num_envs=4, num_steps=1,
                                               total_timesteps=8))
    check_oracle_settings(engine, [{"gamma": 1.0}])
    with pytest.raises(ValueError, match="needs gamma=1"):
        check_oracle_settings(engine, [{"gamma": 0.99}])


def test_a_continuous_action_space_gets_a_gaussian_and_discrete_only_stages_are_refused():
    assert make_engine(TrainConfig(env="Pendulum-v1")).network.distribution.name == "gaussian"
    with pytest.raises(ValueError, match="estimator 'hca_state' needs discrete actions"):
        make_engine(TrainConfig(env="Pendulum-v1", estimator="hca_state"))


def test_every_registry_hands_the_engine_context_one_way():
    """``Registry.make``: a context entry reaches a factory that names it or takes ``**kwargs``,
    None entries never, options win over the context, and options stay strict."""
    from jaxcredit.registry import Registry

    seen = {}

    def named(env, horizon=None):
        seen["named"] = (env, horizon)
        return "named"

    def catch_all(**kwargs):
        seen["catch_all"] = kwargs
        return "catch_all"

    table = Registry("part", {"named": named, "catch_all": catch_all})
    context = {"env": "E", "horizon": None, "group_size": 4}
    assert table.make("named", context) == "named"
    assert seen["named"] == ("E", None)
    table.make("catch_all", context, k=1)
    assert seen["catch_all"] == {"env": "E", "group_size": 4, "k": 1}
    table.make("named", context, env="mine")
    assert seen["named"] == ("mine", None)
    with pytest.raises(ValueError, match="bad options"):
        table.make("named", context, unknown=1)

    # The engine's context reaches a user's redistributor with **kwargs: its horizon is the
    # environment's time limit (CartPole: 500).
    def offset(**context):
        seen["offset"] = context

        def apply(params, trajectory, key, memory):
            return trajectory, memory, {"horizon": jnp.float32(context["horizon"])}

        return redistribute.Redistributor(name="offset", redistribute=apply)

    redistribute.register("context_probe", offset)
    config = TrainConfig.from_flat(algo="a2c", redistribute="context_probe", **TINY)
    _, metrics = jax.jit(make_engine(config).train)(KEY, Hparams.create())
    assert set(seen["offset"]) >= {"env", "env_params", "horizon", "group_size"}
    np.testing.assert_array_equal(metrics["redistribute/horizon"], 500.0)


USER_EXACT_MODULE = '''
import jax.numpy as jnp

from jaxcredit.estimators import Estimator
from jaxcredit.exact import tabular
from jaxcredit.exact.models import ExactModel
from jaxcredit.types import Credit


def q_values():
    """Q^pi_gamma [S, A] by dynamic programming."""
    return ExactModel(params=lambda plan, mdp, pi, gamma: {
        "q": tabular.action_values(mdp, pi, gamma)})


def q_advantage(model="linear"):
    """A = Q(s, a) - V(s) from a linear Q on the observation, or the exact Q^pi."""
    oracle = model == "oracle"

    def q_all(params, trajectory):
        return params["q"][trajectory.state] if oracle else trajectory.obs @ params["w"]

    def assign(params, trajectory, hparams, key):
        q = q_all(params, trajectory)
        taken = jnp.take_along_axis(q, trajectory.action[..., None], -1)[..., 0]
        pi = jnp.exp(trajectory.logits - trajectory.logits.max(-1, keepdims=True))
        mean = jnp.sum(pi / pi.sum(-1, keepdims=True) * q, -1)
        diagnostics = {f"q_arm{a}": q[0, 0, a] for a in range(2)} if oracle else {}
        return Credit(advantage=taken - mean, value_target=trajectory.reward,
                      diagnostics=diagnostics)

    def loss(params, trajectory, hparams, key):
        q = q_all(params, trajectory)
        taken = jnp.take_along_axis(q, trajectory.action[..., None], -1)[..., 0]
        return jnp.mean((taken - trajectory.reward) ** 2), {}

    kind = "ext_credit:q_values"
    if oracle:
        return Estimator(name="q_advantage", assign=assign, exact_model=kind, is_oracle=True)
    return Estimator(name="q_advantage", assign=assign, learned=True, exact_model=kind, loss=loss,
                     init=lambda key, tr: {"w": jnp.zeros((tr.obs.shape[-1],
                                                           tr.logits.shape[-1]))},
                     oracle=lambda: q_advantage("oracle"))
'''


def test_a_new_kind_of_exact_model_from_outside_needs_no_registration(tmp_path, monkeypatch):
    """A user's module holds a new kind of exact model (Q^π) and an estimator built on it; named
    by ``module:factory`` paths, neither is registered. The engine plans the kind, computes it
    for the current policy and hands it to the oracle: on a one-step bandit Q^π(s₀, ·) is the
    arms' mean rewards whatever π is, so the oracle's reading of it is known exactly."""
    from jaxcredit import envs
    from jaxcredit.exact import ground_truth as gt_lib

    (tmp_path / "ext_credit.py").write_text(USER_EXACT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    env, env_params = envs.make("AmbiguousBandit")
    mdp = env.tabular_mdp(env_params)
    arm_means = np.asarray(jnp.einsum("sat,sat->sa", mdp.transition, mdp.transition_reward))[0]
    bandit = dict(env="AmbiguousBandit", num_envs=8, num_steps=1, total_timesteps=8 * 6,
                  hidden_sizes=(8,), eval_every=3, eval_episodes=4)
    metrics = {}
    for model in ("linear", "oracle"):
        engine = make_engine(TrainConfig.from_flat(algo="a2c", estimator="ext_credit:q_advantage",
                                                   estimator_options=(("model", model),), **bandit))
        _, metrics[model] = jax.jit(engine.train)(KEY, Hparams.create(gamma=1.0))
        assert engine.ground_truth.plans.keys() == {"ext_credit:q_values"}
        assert np.all(np.isfinite(metrics[model]["loss"]))
    # The oracle's Q(s₀, a) is arm a's mean reward (1.9, 1.1) at every update.
    for arm in range(2):
        np.testing.assert_allclose(metrics["oracle"][f"credit/q_arm{arm}"], arm_means[arm],
                                   rtol=1e-5)
    assert "estimator/loss" in metrics["linear"]
    # The same kind through the ground truth directly, on a chain where γ and π matter.
    from jaxcredit.exact import tabular
    chain, chain_params = envs.make("Shortcut")
    truth = gt_lib.make_ground_truth(chain, chain_params, ("ext_credit:q_values",))
    chain_mdp = chain.tabular_mdp(chain_params)
    pi = jax.nn.softmax(jax.random.normal(jax.random.key(3), (chain.num_states, 2)))
    params = gt_lib.exact_model_params("ext_credit:q_values", truth, chain_mdp, pi, 0.5)
    expected = tabular.action_values(chain_mdp, pi, 0.5)
    np.testing.assert_allclose(params["q"], expected, rtol=1e-6)
    assert not np.allclose(expected, tabular.action_values(chain_mdp, pi, 1.0))
    # An unknown kind is refused in one line when the estimator is built.
    with pytest.raises(ValueError, match="unknown exact model 'no_such_kind'"):
        Estimator(name="x", assign=lambda *a: None, exact_model="no_such_kind")

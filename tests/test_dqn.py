"""The off-policy engine: Q-learning targets against a float64 loop, ε-greedy acting, replay
windows, the engine shape (host loop, exact resume with a full buffer), and the BitFlip learning
check with and without HER (DQN on CartPole at PureJaxRL's settings is
experiments/cartpole_baselines)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import runlog
from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents.dqn import epsilon_at, epsilon_greedy_logits
from jaxcredit.agents.host_loop import RunSpec, run_experiment
from jaxcredit.agents.replay import Step, make_replay
from jaxcredit.estimators import q_targets


def reference_targets(reward, terminated, truncated, q_target_next, q_online_next, gamma, n,
                      double):
    """Plain float64 loop: y_t = Σ_{j<m} γ^j r_{t+j} + γ^m (1 − term) v'_{t+m−1}."""
    T, B = reward.shape
    if double:
        best = np.argmax(q_online_next, -1)
        boot = np.take_along_axis(q_target_next, best[..., None], -1)[..., 0]
    else:
        boot = q_target_next.max(-1)
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            total, scale = 0.0, 1.0
            for j in range(t, min(t + n, T)):
                total += scale * reward[j, b]
                if terminated[j, b]:
                    scale = 0.0
                    break
                scale *= gamma
                if truncated[j, b] or j == min(t + n, T) - 1:
                    break
            out[t, b] = total + scale * boot[j, b]
    return out


def test_q_learning_bootstraps_by_hand():
    q_target = jnp.array([[1.0, 3.0, 2.0]])
    q_online = jnp.array([[0.0, 0.0, 5.0]])
    assert float(q_targets.q_learning_bootstrap(q_target)[0]) == 3.0
    # Double Q: the online network picks action 2, the target network values it.
    assert float(q_targets.double_q_learning_bootstrap(q_target, q_online)[0]) == 2.0
    # One step: r + γ (1 − terminated) v'.
    y = q_targets.n_step_q_targets(jnp.array([1.0, 1.0]), jnp.array([False, True]),
                                    jnp.array([False, False]), jnp.array([10.0, 10.0]), 0.5, 1)
    np.testing.assert_allclose(np.asarray(y), [6.0, 1.0])


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("double", [False, True])
def test_n_step_targets_match_a_float64_loop(n, double):
    rng = np.random.default_rng(n + 10 * double)
    T, B, A = 9, 5, 3
    reward = rng.normal(size=(T, B))
    ends = rng.random((T, B))
    terminated, truncated = ends < 0.15, (ends >= 0.15) & (ends < 0.3)  # both kinds of end
    q_target_next, q_online_next = rng.normal(size=(T, B, A)), rng.normal(size=(T, B, A))
    boot = (q_targets.double_q_learning_bootstrap(jnp.asarray(q_target_next, jnp.float32),
                                                   jnp.asarray(q_online_next, jnp.float32))
            if double else q_targets.q_learning_bootstrap(jnp.asarray(q_target_next,
                                                                       jnp.float32)))
    got = q_targets.n_step_q_targets(jnp.asarray(reward, jnp.float32), jnp.asarray(terminated),
                                      jnp.asarray(truncated), boot, 0.9, n)
    want = reference_targets(reward, terminated, truncated, q_target_next, q_online_next, 0.9, n,
                             double)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_epsilon_greedy_logits_and_schedule():
    probs = jax.nn.softmax(epsilon_greedy_logits(jnp.array([0.0, 2.0, 1.0, 2.0]), 0.2))
    np.testing.assert_allclose(np.asarray(probs), [0.05, 0.85, 0.05, 0.05], rtol=1e-6)
    hp = Hparams.create(epsilon_start=1.0, epsilon_end=0.1, epsilon_fraction=0.5)
    eps = [float(epsilon_at(jnp.int32(u), hp, 100)) for u in (0, 25, 50, 99)]
    np.testing.assert_allclose(eps, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)


def test_replay_windows_are_consecutive_steps_of_one_environment():
    replay = make_replay(capacity=4 * 10, num_envs=4, window=3, batch_size=256)
    step = lambda x: Step(obs=x, action=x.astype(jnp.int32), reward=x, terminated=x > 1e9,  # noqa
                          truncated=x > 1e9, next_obs=x + 1)
    state = replay.init(step(jnp.zeros(())))
    for t in range(13):  # wraps around the 10-step ring
        # env e at time t writes the value 100 e + t
        state = replay.add(state, step(100.0 * jnp.arange(4)[None] + t + 0.0))
    batch = replay.sample(state, jax.random.key(0))
    values = np.asarray(batch.obs)  # [3, 256]
    np.testing.assert_array_equal(np.diff(values, axis=0), 1.0)  # consecutive, same env
    assert values.min() % 100 >= 3  # only the 10 newest steps of each env remain
    assert len(np.unique(values[0] // 100)) == 4


def test_bad_dqn_input_is_a_one_line_error():
    for kwargs, message in [
        (dict(algo="dqn", estimator="gae"),
         "choose --estimator double_q or q_learning or q_lambda"),
        (dict(algo="dqn", objective="ppo"), "takes no --objective"),
        (dict(algo="dqn", buffer_size=64, batch_size=128), "smaller than one batch"),
        (dict(algo="dqn", n_step=0), "n_step must be a positive integer"),
        (dict(algo="dqn", target_update_every=0), "target_update_every must be a positive"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            TrainConfig.from_flat(**kwargs).resolved()
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="fewer than one sampled window"):
        make_engine(TrainConfig.from_flat(algo="dqn", env="BitFlip", relabel="her", num_envs=16,
                                          buffer_size=128, batch_size=32))
    with pytest.raises(ValueError, match="epsilon_end must lie in"):
        Hparams.create(epsilon_end=1.5)
    with pytest.raises(ValueError, match="tau must lie in"):
        Hparams.create(tau=0.0)


SMALL = TrainConfig.from_flat(algo="dqn", env="CartPole-v1", num_envs=4, num_steps=2,
                              total_timesteps=4 * 2 * 60, buffer_size=4 * 24, batch_size=16,
                              learning_starts=32, gradient_steps=2, target_update_every=5, n_step=3,
                              hidden_sizes=(16,), eval_every=20, eval_episodes=2)


def test_dqn_update_trains_only_after_learning_starts_and_fills_the_buffer():
    engine = make_engine(SMALL)
    state = engine.init(jax.random.key(0))
    hp = Hparams.create(lr=1e-3)
    step = jax.jit(engine.update_step)
    learning = []
    for _ in range(16):
        state, metrics = step(state, hp)
        learning.append(float(metrics["learning"]))
    assert learning == [0.0] * 3 + [1.0] * 13  # 32 env steps collected after update 4
    assert bool(state.replay.is_full) and int(state.update) == 16
    assert np.isfinite(float(metrics["loss"])) and float(metrics["epsilon"]) < 1.0


def test_q_lambda_over_stored_sequences_is_n_step_q_learning_at_lambda_one():
    """``--estimator q_lambda`` trains on Peng's Q(λ) over the n_step sampled steps. At λ = 1 it
    is the episode-aware n-step Q-learning target (the same sampled rows, the same gradient
    step); at λ = 1/2 it is not."""
    filled = jax.jit(make_engine(SMALL).run, static_argnums=2)(
        make_engine(SMALL).init(jax.random.key(0)), Hparams.create(lr=1e-3), 8)[0]
    key, lr = jax.random.key(3), jnp.float32(1e-3)
    losses = {}
    for name, lam in (("q_learning", 1.0), ("q_lambda", 1.0), ("q_lambda", 0.5)):
        engine = make_engine(SMALL.replace(estimator=name))
        agent, metrics = jax.jit(engine.learn)(filled, Hparams.create(lr=1e-3, lambda_=lam),
                                               key, lr)
        losses[name, lam] = (float(metrics["loss"]), agent.params)
    assert losses["q_lambda", 1.0][0] == pytest.approx(losses["q_learning", 1.0][0], rel=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 losses["q_lambda", 1.0][1], losses["q_learning", 1.0][1])
    assert losses["q_lambda", 0.5][0] != pytest.approx(losses["q_learning", 1.0][0], rel=1e-3)


def test_dqn_resume_with_a_full_replay_equals_the_uninterrupted_run(tmp_path):
    spec = RunSpec(settings=({"lr": 1e-3},), num_seeds=2, num_chunks=3)
    full = run_experiment(SMALL, spec, tmp_path / "full", progress=False, plot=False)
    assert full["finished"]
    part = tmp_path / "part"
    first = run_experiment(SMALL, spec, part, progress=False, plot=False, max_chunks=1)
    assert first["updates"] == 20  # 160 transitions written: the 96-slot buffer is full
    run_experiment(None, None, part, resume=True, progress=False, plot=False)
    assert (part / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()
    columns = runlog.read_metrics(part / "metrics.csv")
    assert {"loss", "q_mean", "epsilon", "eval/return_greedy"} <= set(columns)


def test_replay_sampling_is_flashbax_sampling():
    replay = make_replay(capacity=3 * 8, num_envs=3, window=4, batch_size=64)
    step = lambda x: Step(obs=x, action=x.astype(jnp.int32), reward=x, terminated=x > 1e9,  # noqa
                          truncated=x > 1e9, next_obs=x + 1)
    state = replay.init(step(jnp.zeros(())))
    for t in range(11):
        state = replay.add(state, step(100.0 * jnp.arange(3)[None] + t))
        if t >= 3:
            ours = replay.sample(state, jax.random.key(t)).obs
            theirs = replay.buffer.sample(state, jax.random.key(t)).experience.obs
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs).T)


@pytest.mark.slow
def test_bitflip_10_is_solved_with_her_and_not_without_in_the_same_budget():
    # The paper's bit-flipping settings (experiments/her_bitflip), 2 seeds, 100 updates of
    # 16 envs x 10 steps: HER's relabelled goals make the reward informative, plain DQN sees -1.
    results = {}
    for relabel in (None, "her"):
        config = TrainConfig.from_flat(algo="dqn", estimator="q_learning", env="BitFlip",
                                       env_options=(("n", 10),), num_envs=16, num_steps=10,
                                       total_timesteps=16 * 10 * 100, buffer_size=50_000,
                                       batch_size=128, learning_starts=160, gradient_steps=40,
                                       target_update_every=1, hidden_sizes=(256,),
                                       activation="relu", eval_every=10, eval_episodes=32,
                                       relabel=relabel)
        hp = Hparams.create(lr=1e-3, gamma=0.98, epsilon_start=0.2, epsilon_end=0.2, tau=0.05,
                            max_grad_norm=10.0)
        # One seed per call of one compiled program: the compile dominates this test, and the
        # unbatched program compiles in about two thirds of the CPU time of the vmapped one.
        train = jax.jit(make_engine(config).train)
        rate = np.stack([np.asarray(train(key, hp)[1]["eval/success_rate_greedy"])
                         for key in jax.random.split(jax.random.key(3), 2)])
        results[relabel] = rate[:, ~np.isnan(rate[0])][:, -2:].mean()
    assert results["her"] >= 0.9 and results[None] <= 0.3, results

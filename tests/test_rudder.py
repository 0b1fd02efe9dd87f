"""RUDDER's return decomposition: the redistribution formula by hand and against a float64 loop,
return-equivalence for random models and windows, carry resets, the lessons buffer, and the fused
update step on DelayedEffect."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.agents.config import Hparams, TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.envs import make as make_env
from jaxcredit.redistribute import lessons, make_redistributor, registered
from jaxcredit.redistribute.rudder import prediction_differences
from jaxcredit.types import Trajectory


def test_rudder_is_registered():
    assert "rudder" in registered()


# ------------------------------------------------------------------------------------------
# The formula
# ------------------------------------------------------------------------------------------


def test_perfect_prediction_from_step_k_puts_all_reward_on_step_k():
    # One episode of 5 steps, return 3 paid at the end; the model knows the return from step 2.
    g = jnp.array([0.0, 0.0, 3.0, 3.0, 3.0])[:, None]
    reward = jnp.array([0.0, 0.0, 0.0, 0.0, 3.0])[:, None]
    done = jnp.array([False, False, False, False, True])[:, None]
    new, so_far, p, r = prediction_differences(g, reward, done, jnp.zeros(1), jnp.zeros(1))
    np.testing.assert_allclose(new[:, 0], [0.0, 0.0, 3.0, 0.0, 0.0])
    np.testing.assert_allclose(so_far[:, 0], [0.0, 0.0, 0.0, 0.0, 3.0])
    assert float(p[0]) == 0.0 and float(r[0]) == 0.0  # the episode ended: nothing carried


def test_prediction_error_lands_on_the_last_step():
    # Predictions 1, 2 for a return of 5: r̃ = 1, 1, then 5 − 2 = 3 at the end.
    g = jnp.array([1.0, 2.0, 7.0])[:, None]
    reward = jnp.array([0.0, 0.0, 5.0])[:, None]
    done = jnp.array([False, False, True])[:, None]
    new, *_ = prediction_differences(g, reward, done, jnp.zeros(1), jnp.zeros(1))
    np.testing.assert_allclose(new[:, 0], [1.0, 1.0, 3.0])


def test_an_episode_continued_from_the_previous_window():
    # Carried in: prediction 2, return so far 1. The episode ends at step 1, a new one starts.
    g = jnp.array([4.0, 9.0, 0.5])[:, None]
    reward = jnp.array([1.0, 2.0, 0.25])[:, None]
    done = jnp.array([False, True, False])[:, None]
    new, so_far, p, r = prediction_differences(g, reward, done, jnp.array([2.0]),
                                               jnp.array([1.0]))
    # step 0: 4 − 2; step 1: return 1 + 1 + 2 = 4, minus 4; step 2: a new episode, 0.5 − 0.
    np.testing.assert_allclose(new[:, 0], [2.0, 0.0, 0.5])
    np.testing.assert_allclose(so_far[:, 0], [2.0, 4.0, 0.25])
    np.testing.assert_allclose([p[0], r[0]], [0.5, 0.25])


def _reference(g, reward, done, p0, r0):
    """A float64 plain loop of the formula, one environment at a time."""
    T, N = g.shape
    out = np.zeros((T, N))
    p_end, r_end = np.zeros(N), np.zeros(N)
    for n in range(N):
        before, so_far = float(p0[n]), float(r0[n])
        for t in range(T):
            total = so_far + float(reward[t, n])
            out[t, n] = (total if done[t, n] else float(g[t, n])) - before
            before, so_far = (0.0, 0.0) if done[t, n] else (float(g[t, n]), total)
        p_end[n], r_end[n] = before, so_far
    return out, p_end, r_end


@pytest.mark.parametrize("seed", range(3))
def test_prediction_differences_against_a_float64_loop(seed):
    rng = np.random.default_rng(seed)
    T, N = 40, 6
    g = rng.normal(size=(T, N)).astype(np.float32)
    reward = rng.normal(size=(T, N)).astype(np.float32)
    done = rng.random((T, N)) < 0.15
    p0, r0 = rng.normal(size=N).astype(np.float32), rng.normal(size=N).astype(np.float32)
    new, _, p, r = prediction_differences(jnp.asarray(g), jnp.asarray(reward), jnp.asarray(done),
                                          jnp.asarray(p0), jnp.asarray(r0))
    ref, p_ref, r_ref = _reference(g, reward, done, p0, r0)
    np.testing.assert_allclose(new, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p, p_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, r_ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# The stage on random windows
# ------------------------------------------------------------------------------------------


def _random_window(rng, T, N, obs_size=3, num_actions=2, end_prob=0.2):
    done = rng.random((T, N)) < end_prob
    terminated = np.logical_and(done, rng.random((T, N)) < 0.5)
    truncated = np.logical_and(done, ~terminated)
    zeros = jnp.zeros((T, N), jnp.float32)
    obs = jnp.asarray(rng.normal(size=(T, N, obs_size)), jnp.float32)
    return Trajectory(
        obs=obs, action=jnp.asarray(rng.integers(0, num_actions, (T, N)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(T, N)), jnp.float32),
        terminated=jnp.asarray(terminated), truncated=jnp.asarray(truncated),
        value=zeros, next_value=zeros, log_prob=zeros,
        logits=jnp.zeros((T, N, num_actions), jnp.float32), next_obs=obs)


def _episode_sums(windows, key_name):
    """Per environment, the sums of ``key_name`` over every episode that ends in the windows."""
    sums = []
    N = windows[0].action.shape[1]
    for n in range(N):
        acc = 0.0
        for w in windows:
            values, done = np.asarray(getattr(w, key_name))[:, n], np.asarray(w.done)[:, n]
            for t in range(len(values)):
                acc += float(values[t])
                if done[t]:
                    sums.append(acc)
                    acc = 0.0
    return np.array(sums)


# RUDDER's regime options, each of which must keep return-equivalence: Δ-observation inputs, the
# warm-up (closed for the first window, open after: an episode spans the switch) and the quality
# gate (q moves with the random model's errors, so it opens and closes).
REGIMES = {"plain": {}, "delta": {"inputs": "delta", "input_gate_bias": -3.0},
           "warmup": {"warmup_episodes": 10}, "gate": {"quality_threshold": 0.2},
           "agent_state": {"inputs": "agent_state"}}


def _with_agent_state(rng, window, size=3):
    """The window with a random recurrent agent state ``[T, N, size]`` recorded."""
    T, N = window.reward.shape
    return window.replace(agent_state=jnp.asarray(rng.normal(size=(T, N, size)), jnp.float32))


@pytest.mark.parametrize("regime", sorted(REGIMES))
@pytest.mark.parametrize("cell", ["lstm", "rudder"])
@pytest.mark.parametrize("seed", range(2))
def test_redistributed_rewards_sum_to_each_episode_return(cell, seed, regime):
    """Random model parameters, episode ends of both kinds, episodes spanning four windows."""
    rng = np.random.default_rng(seed)
    windows = [_with_agent_state(rng, _random_window(rng, 16, 5)) for _ in range(4)]
    rudder = make_redistributor("rudder", cell=cell, features=8, lessons=32, horizon=64,
                                **REGIMES[regime])
    params = rudder.init(jax.random.key(seed), windows[0])
    memory = rudder.init_memory(windows[0])
    apply = jax.jit(rudder.redistribute)
    out, used = [], []
    for w in windows:
        new, memory, metrics = apply(params, w, jax.random.key(0), memory)
        out.append(new)
        used.append(float(metrics["redistributing"]))
    returns = _episode_sums(windows, "reward")
    assert len(returns) > 5
    np.testing.assert_allclose(_episode_sums(out, "reward"), returns, rtol=1e-4, atol=1e-4)
    assert np.isfinite(float(metrics["prediction_error"]))
    if regime == "warmup":
        assert used[0] == 0.0 and used[-1] == 1.0, used
    elif regime == "gate":  # no quality before the first episodes end: the gate starts closed
        assert used[0] == 0.0
    else:
        assert used == [1.0] * 4


def test_a_closed_gate_passes_the_reward_on_and_pays_back_the_running_episode():
    """Carried in from an open window: prediction p_0 = 2, return so far R_0 = 1. With the gate
    closed the rewards (1, 2 | 0.25) become (1 + R_0 − p_0, 2 | 0.25) = (0, 2 | 0.25): the
    episode's new rewards 2 + 0 + 2 sum to its return 1 + 1 + 2; the next episode gets its own."""
    window = _random_window(np.random.default_rng(0), 3, 1, end_prob=0.0)
    window = window.replace(reward=jnp.array([[1.0], [2.0], [0.25]]),
                            terminated=jnp.array([[False], [True], [False]]))
    rudder = make_redistributor("rudder", features=4, lessons=4, horizon=8,
                                warmup_episodes=10 ** 6)
    params = rudder.init(jax.random.key(0), window)
    memory = rudder.init_memory(window).replace(prediction=jnp.array([2.0]),
                                                return_so_far=jnp.array([1.0]))
    new, memory, metrics = rudder.redistribute(params, window, jax.random.key(0), memory)
    np.testing.assert_allclose(np.asarray(new.reward)[:, 0], [0.0, 2.0, 0.25], atol=1e-6)
    assert float(metrics["redistributing"]) == 0.0
    # Carried out: the prediction is the return so far, so the telescoping continues exactly.
    np.testing.assert_allclose([memory.prediction[0], memory.return_so_far[0]], [0.25, 0.25])
    # And before the warm-up ends nothing is fitted: every draw weighs nothing.
    _, valid, _, _ = rudder.sample(memory, jax.random.key(1))
    assert not np.any(np.asarray(valid))


def test_quality_is_one_minus_the_running_error_over_the_return_variance():
    """Two finished episodes with returns 1 and 3 (variance 1) and a running squared error of
    0.5: q = 1 − 0.5 / 1 = 0.5, so a threshold of 0.4 redistributes and one of 0.6 does not."""
    window = _random_window(np.random.default_rng(0), 2, 2, end_prob=0.0)
    window = window.replace(reward=jnp.array([[0.0, 3.0], [1.0, 0.0]]),
                            terminated=jnp.array([[False, True], [True, False]]))
    for threshold, expected in ((0.4, 1.0), (0.6, 0.0)):
        rudder = make_redistributor("rudder", features=4, lessons=4, horizon=8,
                                    quality_threshold=threshold)
        params = rudder.init(jax.random.key(0), window)
        _, memory, first = rudder.redistribute(params, window, jax.random.key(0),
                                               rudder.init_memory(window))
        assert np.isnan(float(first["quality"]))  # no episode had ended before this window
        assert float(first["redistributing"]) == 0.0
        np.testing.assert_allclose(np.asarray(memory.return_moments), [2.0, 5.0])
        memory = memory.replace(squared_error=jnp.float32(0.5))
        _, _, metrics = rudder.redistribute(params, window, jax.random.key(0), memory)
        np.testing.assert_allclose(float(metrics["quality"]), 0.5, rtol=1e-6)
        assert float(metrics["redistributing"]) == expected


@pytest.mark.parametrize("inputs,continuous", [("obs", False), ("delta", False), ("obs", True),
                                               ("agent_state", False)])
def test_the_fit_reads_stored_episodes_as_the_stream_read_them(inputs, continuous):
    """One episode of 6 steps in one window: its final-step error written as its priority while
    redistributing (the stream) equals the main loss of the fit on it (the lessons buffer), so
    both paths feed the model the same inputs (the Δ-observations included, and continuous
    actions ``[T, B, 2]``, stored and read as vectors)."""
    rng = np.random.default_rng(5)
    window = _random_window(rng, 6, 1, end_prob=0.0)
    window = window.replace(truncated=jnp.zeros((6, 1), bool).at[5, 0].set(True))
    if continuous:
        window = window.replace(action=jnp.asarray(rng.normal(size=(6, 1, 2)), jnp.float32))
    window = _with_agent_state(rng, window)
    rudder = make_redistributor("rudder", features=8, lessons=4, horizon=8, return_scale=1.0,
                                inputs=inputs)
    params = rudder.init(jax.random.key(2), window)
    _, memory, _ = rudder.redistribute(params, window, jax.random.key(0),
                                       rudder.init_memory(window))
    filled = np.isfinite(np.asarray(memory.episodes.priority))
    assert filled.sum() == 1
    batch = rudder.sample(memory, jax.random.key(1))
    _, metrics = rudder.loss(params, batch, None, jax.random.key(0))
    np.testing.assert_allclose(float(metrics["main_loss"]),
                               float(np.asarray(memory.episodes.priority)[filled][0]), rtol=1e-5)


def test_agent_state_inputs_read_the_agent_state_in_place_of_the_observation():
    """``inputs="agent_state"``: the redistribution changes with the recorded agent state and
    not with the observation, and the lessons buffer stores the states (``[N, H, 3]``)."""
    rng = np.random.default_rng(7)
    window = _with_agent_state(rng, _random_window(rng, 8, 2, end_prob=0.0))
    rudder = make_redistributor("rudder", features=8, lessons=4, horizon=16,
                                inputs="agent_state")
    assert rudder.reads_agent_state
    assert not make_redistributor("rudder", horizon=16).reads_agent_state
    params = rudder.init(jax.random.key(0), window)
    memory = rudder.init_memory(window)
    assert memory.episodes.running.obs.shape[-1] == 3

    def rewards(w):
        return np.asarray(rudder.redistribute(params, w, jax.random.key(0), memory)[0].reward)

    base = rewards(window)
    np.testing.assert_array_equal(rewards(window.replace(obs=window.obs + 5.0)), base)
    assert not np.allclose(rewards(window.replace(agent_state=window.agent_state + 1.0)), base)
    with pytest.raises(ValueError, match="inputs=agent_state reads the agent's recurrent state"):
        rudder.redistribute(params, window.replace(agent_state=None), jax.random.key(0), memory)


def test_carry_resets_at_episode_start():
    """After an episode ends, the next episode is redistributed as if it started afresh."""
    rng = np.random.default_rng(3)
    window = _random_window(rng, 12, 2, end_prob=0.0)
    done = np.zeros((12, 2), bool)
    done[4, :] = True  # the first episode ends at step 4 (terminated in env 0, truncated in 1)
    window = window.replace(terminated=jnp.asarray(done & (np.arange(2) == 0)),
                            truncated=jnp.asarray(done & (np.arange(2) == 1)))
    rudder = make_redistributor("rudder", features=8, lessons=4, horizon=32)
    params = rudder.init(jax.random.key(1), window)
    full, _, _ = rudder.redistribute(params, window, jax.random.key(0),
                                     rudder.init_memory(window))
    rest = jax.tree.map(lambda x: x[5:], window)
    alone, _, _ = rudder.redistribute(params, rest, jax.random.key(0), rudder.init_memory(rest))
    np.testing.assert_allclose(full.reward[5:], alone.reward, rtol=1e-5, atol=1e-6)
    assert not np.allclose(full.reward[:5], 0.0)


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="cell must be one of"):
        make_redistributor("rudder", cell="gru")
    with pytest.raises(ValueError, match="inputs must be one of obs, delta, agent_state"):
        make_redistributor("rudder", inputs="diff")
    with pytest.raises(ValueError, match="model=oracle computes its prediction from the tabular"):
        make_redistributor("rudder", model="oracle", inputs="agent_state")
    with pytest.raises(ValueError, match="warmup_episodes must be >= 0"):
        make_redistributor("rudder", warmup_episodes=-1)
    with pytest.raises(ValueError, match="lessons must be a positive integer"):
        make_redistributor("rudder", lessons=0)
    rudder = make_redistributor("rudder", lessons=2, horizon=8)
    with pytest.raises(ValueError, match="fewer than the 5 environments"):
        rudder.init_memory(_random_window(np.random.default_rng(0), 4, 5))


# ------------------------------------------------------------------------------------------
# The lessons buffer
# ------------------------------------------------------------------------------------------


def test_lessons_buffer_stores_whole_episodes_and_evicts_the_lowest_priority():
    memory = lessons.init_memory(num_envs=2, capacity=2, horizon=3, obs_shape=(1,))
    obs = lambda v: jnp.array([[v], [10 + v]], jnp.float32)  # noqa: E731
    step = jax.jit(lessons.record_step)
    no = jnp.array([False, False])
    # env 0: episode (r = 1, 2), priority 0.5; env 1: episode (r = 5) ends first, priority 2.
    memory = step(memory, obs(0.0), jnp.array([0, 1]), jnp.array([1.0, 5.0]),
                  jnp.array([False, True]), jnp.array([0.0, 2.0]))
    memory = step(memory, obs(1.0), jnp.array([1, 1]), jnp.array([2.0, 7.0]),
                  jnp.array([True, False]), jnp.array([0.5, 0.0]))
    assert int(memory.stored) == 2
    returns = sorted(np.asarray(memory.lessons.returns).tolist())
    assert returns == [3.0, 5.0]
    np.testing.assert_array_equal(np.sort(np.asarray(memory.lessons.length)), [1, 2])
    # A third episode (env 1: r = 7, 1, length 2) replaces the lowest priority (0.5: return 3).
    memory = step(memory, obs(2.0), jnp.array([0, 0]), jnp.array([0.0, 1.0]),
                  jnp.array([False, True]), jnp.array([0.0, 1.0]))
    assert sorted(np.asarray(memory.lessons.returns).tolist()) == [5.0, 8.0]
    # Too long for H = 3: env 0 runs 4 steps (its running episode started at step 2).
    for _ in range(3):
        memory = step(memory, obs(3.0), jnp.array([0, 0]), jnp.array([1.0, 0.0]), no,
                      jnp.zeros(2))
    memory = step(memory, obs(4.0), jnp.array([0, 0]), jnp.array([1.0, 0.0]),
                  jnp.array([True, False]), jnp.array([9.0, 0.0]))
    assert int(memory.too_long) == 1 and int(memory.stored) == 3
    assert sorted(np.asarray(memory.lessons.returns).tolist()) == [5.0, 8.0]


def test_sampling_draws_only_filled_slots():
    memory = lessons.init_memory(num_envs=1, capacity=8, horizon=2, obs_shape=())
    _, valid = lessons.sample(memory, jax.random.key(0), 4)
    assert not np.any(valid)
    memory = lessons.record_step(memory, jnp.zeros((1,)), jnp.array([1]), jnp.array([4.0]),
                                 jnp.array([True]), jnp.array([1.0]))
    episodes, valid = lessons.sample(memory, jax.random.key(0), 16)
    assert np.all(valid) and np.all(np.asarray(episodes.returns) == 4.0)


# ------------------------------------------------------------------------------------------
# Ground truth of the redistribution
# ------------------------------------------------------------------------------------------


def test_redistribution_quality_on_delayed_effect():
    env, params = make_env("DelayedEffect", n=3, sigma=0.0)
    mdp = env.tabular_mdp(params)
    pi = jnp.full((mdp.num_states, 2), 0.5)
    # One episode down the +1 branch: states 0, 1, 3, 5 (branch 0), actions 0 then anything.
    state = jnp.array([0, 1, 3, 5])[:, None]
    action = jnp.array([0, 1, 0, 1])[:, None]
    on_decisive = jnp.array([1.0, 0.0, 0.0, 0.0])[:, None]
    quality = gt_lib.redistribution_quality(mdp, pi, 1.0, state, action, on_decisive)
    assert float(quality["decisive_share"]) == pytest.approx(1.0)
    assert float(quality["advantage_correlation"]) == pytest.approx(1.0, abs=1e-5)
    delayed = jnp.array([0.0, 0.0, 0.0, 1.0])[:, None]  # the original, delayed reward
    quality = gt_lib.redistribution_quality(mdp, pi, 1.0, state, action, delayed)
    assert float(quality["decisive_share"]) == 0.0
    assert float(quality["advantage_correlation"]) < 0.0


# ------------------------------------------------------------------------------------------
# In the engine
# ------------------------------------------------------------------------------------------


def _config(**kw):
    base = dict(algo="a2c", env="DelayedReward-DelayedEffect",
                env_options=(("n", 8), ("sigma", 0.0)), num_envs=16, num_steps=9,
                redistribute="rudder", redistribute_fit_steps=4, eval_every=10,
                total_timesteps=16 * 9 * 60)
    base.update(kw)
    return TrainConfig.from_flat(**base)


def test_engine_reads_the_undelayed_ground_truth_and_keeps_returns():
    engine = make_engine(_config(total_timesteps=16 * 9 * 10))
    assert engine.ground_truth is None  # the credit stages may not read it under DelayedReward
    state = jax.jit(engine.init)(jax.random.key(0))
    hparams = Hparams.create(gamma=1.0, redistributor_lr=1e-2)
    window = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    traj, _, _, metrics = jax.jit(engine.assign_credit)(state, window.trajectory, hparams,
                                                         jax.random.key(2))
    np.testing.assert_allclose(np.asarray(traj.reward).sum(0),
                               np.asarray(window.trajectory.reward).sum(0), atol=1e-5)
    assert {"redistribute/prediction_error", "redistribute/main_loss"} <= set(metrics)
    # The diagnostics against the exact Q run at evaluation points only.
    assert "redistribute/decisive_share" not in metrics
    evaluated = jax.jit(engine.evaluate)(state, hparams)
    assert {"redistribute/advantage_correlation", "redistribute/decisive_share"} <= set(evaluated)
    assert np.isfinite(float(evaluated["redistribute/advantage_correlation"]))
    _, run_metrics = jax.jit(engine.run, static_argnums=2)(state, hparams, 10)
    assert np.isfinite(np.asarray(run_metrics["eval/exact_return"])[-1])


@pytest.mark.slow
def test_a2c_with_rudder_learns_delayed_effect():
    """n = 8, reward only at the end, 60 updates of 16 episodes, 4 seeds: the fitted model moves
    the reward onto the first action and the policy learns it."""
    hparams = Hparams.create(lr=1e-2, gamma=1.0, lambda_=0.9, redistributor_lr=1e-2)
    keys = jax.random.split(jax.random.key(0), 4)
    # One seed per call: the unbatched program compiles in about 60% of the vmapped one's time,
    # which is most of this test (the same metrics as vmapped, to 3 digits).
    train = jax.jit(make_engine(_config()).train)
    runs = [train(key, hparams)[1] for key in keys]
    metrics = {name: np.stack([np.asarray(run[name]) for run in runs]) for name in runs[0]}
    final = metrics["eval/p_optimal_first_action"][:, -1]
    share = metrics["redistribute/decisive_share"][:, -1]
    error = metrics["redistribute/prediction_error"]
    assert np.all(final > 0.9), final
    assert np.all(share > 0.8), share
    assert np.all(error[:, -1] < 0.5 * error[:, 0]), error[:, [0, -1]]


def test_resume_of_a_rudder_run_equals_the_uninterrupted_run(tmp_path):
    """The memory (carries across windows, the lessons buffer) is part of the checkpoint."""
    from jaxcredit.agents.host_loop import RunSpec, run_experiment

    # Windows of 5 steps cut the 9-step episodes: carries cross chunk boundaries.
    config = _config(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 6, eval_every=2,
                     hidden_sizes=(16,),
                     redistribute_options=(("features", 4), ("lessons", 8)))
    spec = RunSpec(settings=({"gamma": 1.0, "redistributor_lr": 1e-2},), num_seeds=2, seed=0,
                   num_chunks=3)
    whole = run_experiment(config, spec, tmp_path / "whole", progress=False, plot=False)
    assert whole["finished"]
    first = run_experiment(config, spec, tmp_path / "part", progress=False, max_chunks=1,
                           plot=False)
    assert not first["finished"]
    run_experiment(None, None, tmp_path / "part", resume=True, progress=False, plot=False)
    assert ((tmp_path / "part" / "metrics.csv").read_bytes()
            == (tmp_path / "whole" / "metrics.csv").read_bytes())


def test_oracle_puts_q_on_the_first_step_and_the_noise_on_the_last():
    """DelayedEffect n = 3, σ = 0.5, reward delayed: the exact prediction is Q(s_0, a_0) = ±1
    from step 0 on (γ = 1), so r̃ = (±1, 0, 0, noise) with the noise Σ of the chain's rewards."""
    config = _config(env_options=(("n", 3), ("sigma", 0.5)), num_envs=8, num_steps=4,
                     redistribute_options=(("model", "oracle"),), total_timesteps=8 * 4)
    engine = make_engine(config)
    state = jax.jit(engine.init)(jax.random.key(0))
    hparams = Hparams.create(gamma=1.0)
    window = jax.jit(engine.collect)(state, hparams, jax.random.key(1))
    traj, _, _, metrics = jax.jit(engine.assign_credit)(state, window.trajectory, hparams,
                                                         jax.random.key(2))
    new, old = np.asarray(traj.reward), np.asarray(window.trajectory.reward)
    sign = 1.0 - 2.0 * np.asarray(window.trajectory.action)[0]
    np.testing.assert_allclose(new[0], sign, atol=1e-5)
    np.testing.assert_allclose(new[1:3], 0.0, atol=1e-5)
    np.testing.assert_allclose(new[3], old[3] - sign, atol=1e-5)
    assert "redistribute/loss" not in metrics  # nothing is fitted
    # At an evaluation point, on a held-out window: r̃ = ±1 on the decisive first step and the
    # noise (±σ per step) on the last, so the first step holds a good share of Σ|r̃|.
    evaluated = jax.jit(engine.evaluate)(state, hparams)
    assert float(evaluated["redistribute/decisive_share"]) > 0.3


def test_oracle_needs_ground_truth():
    with pytest.raises(ValueError, match="needs an environment with exact ground truth"):
        make_engine(TrainConfig.from_flat(algo="ppo", env="DelayedReward-CartPole-v1",
                                          redistribute="rudder",
                                          redistribute_options=(("model", "oracle"),)))

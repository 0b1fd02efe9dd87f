"""Return decomposition by a per-step reward model, ``rrd`` and ``ircr``: the RRD loss by hand and
its identities (K = T is the full-sequence regression; over every subset the (T/K)-scaled sum is
the full sum and the corrected loss is L_RD), IRCR's normalised targets by hand, both fits against
a float64 loop over two windows with episode ends of both kinds and discrete or continuous
actions, the buffer of the best episodes, and a run from the command line (the engine case of
each is in tests/test_every_part.py)."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.redistribute import Redistributor, lessons, make_redistributor, registered
from jaxcredit.redistribute.return_decomposition import subset_loss
from jaxcredit.types import Trajectory


@functools.cache
def _make(name: str, **options) -> Redistributor:
    """The stage with its functions compiled whole (much faster here than op by op), one per
    set of options in this module."""
    stage = make_redistributor(name, **options)
    return dataclasses.replace(stage, init=jax.jit(stage.init),
                               init_memory=jax.jit(stage.init_memory),
                               redistribute=jax.jit(stage.redistribute),
                               sample=jax.jit(stage.sample), loss=jax.jit(stage.loss))


def test_registered_and_the_kinds_of_action_they_read():
    assert {"rrd", "ircr"} <= set(registered())
    for name in ("rrd", "ircr", "rudder", "synthetic_returns"):
        assert make_redistributor(name, {"horizon": 8}).continuous_actions, name
    assert not Redistributor(name="x", redistribute=None).continuous_actions  # the default


# ------------------------------------------------------------------------------------------
# The RRD loss
# ------------------------------------------------------------------------------------------


def test_rrd_loss_by_hand_on_a_three_step_episode():
    """R = 6 over T = 3 steps, the subset I = {0, 2} (K = 2) with R̂ = 1 and 4::

        return units: (6 − (3/2)(1 + 4))² = (6 − 7.5)² = 2.25
        step units:   (6/3 − (1 + 4)/2)²  = (2 − 2.5)²  = 0.25 = 2.25 / 3²

    The correction: s²_I = (1.5² + 1.5²) / (2 − 1) = 4.5, times (1 − K/T) / K = 1/6, is 0.75
    in step units (6.75 in return units): corrected losses −0.5 and −4.5. A second episode with
    weight 0 (an invalid draw) changes nothing."""
    predicted = jnp.array([[1.0, 4.0], [7.0, -3.0]])
    length, episode_return = jnp.array([3, 5]), jnp.array([6.0, 100.0])
    weight = jnp.array([1.0, 0.0])
    for units, plain, corrected, variance in (("return", 2.25, -4.5, 6.75),
                                              ("step", 0.25, -0.5, 0.75)):
        loss, metrics = subset_loss(predicted, length, episode_return, weight, units)
        np.testing.assert_allclose(float(loss), plain, rtol=1e-6)
        loss, metrics = subset_loss(predicted, length, episode_return, weight, units,
                                    bias_correction=True)
        np.testing.assert_allclose(float(loss), corrected, rtol=1e-6)
        np.testing.assert_allclose(float(metrics["subset_loss"]), plain, rtol=1e-6)
        np.testing.assert_allclose(float(metrics["variance"]), variance, rtol=1e-6)


@pytest.mark.parametrize("steps,k", [(4, 2), (3, 1), (3, 3), (2, 3)])
def test_over_every_subset_the_scaled_sum_is_the_sum_and_the_corrected_loss_is_l_rd(steps, k):
    """Every K-subset of T steps (every K-tuple with replacement when K > T), equally likely:
    the mean of (T/K) Σ_I R̂ is Σ_t R̂; the mean loss is L_RD = (R − Σ_t R̂)² plus the variance
    of that estimate (more than L_RD unless K = T), and with the correction exactly L_RD."""
    rhat = np.array([0.5, -1.0, 2.0, 0.25])[:steps]
    episode_return = 1.5
    draws = (list(itertools.combinations(range(steps), k)) if k <= steps
             else list(itertools.product(range(steps), repeat=k)))
    predicted = jnp.asarray(rhat[np.array(draws)], jnp.float32)  # [S, K]
    np.testing.assert_allclose(np.mean(steps / k * np.asarray(predicted).sum(1)), rhat.sum(),
                               rtol=1e-6)
    length = jnp.full((len(draws),), steps)
    returns = jnp.full((len(draws),), episode_return, jnp.float32)
    for units, scale in (("return", 1.0), ("step", 1.0 / steps ** 2)):
        l_rd = scale * (episode_return - rhat.sum()) ** 2
        plain, _ = subset_loss(predicted, length, returns, units=units)
        corrected, _ = subset_loss(predicted, length, returns, units=units,
                                   bias_correction=k > 1)
        if k == steps:
            np.testing.assert_allclose(float(plain), l_rd, rtol=1e-5)
        else:
            assert float(plain) > l_rd + 1e-3
        if k > 1:
            np.testing.assert_allclose(float(corrected), l_rd, rtol=1e-5)


def _window(obs, action, reward, terminated, truncated, next_obs=None, num_actions=4):
    obs = jnp.asarray(obs, jnp.float32)
    zeros = jnp.zeros(obs.shape[:2], jnp.float32)
    return Trajectory(obs=obs, action=jnp.asarray(action), reward=jnp.asarray(reward, jnp.float32),
                      terminated=jnp.asarray(terminated, bool),
                      truncated=jnp.asarray(truncated, bool), value=zeros, next_value=zeros,
                      log_prob=zeros, logits=jnp.zeros(obs.shape[:2] + (num_actions,)),
                      next_obs=jnp.asarray(obs + 0.5 if next_obs is None else next_obs,
                                           jnp.float32))


def test_a_subset_of_every_step_is_the_full_sequence_regression():
    """One episode of T = 9 steps and K = 9: the subset is every step, and the loss is
    (R − Σ_t R̂)² (return units) with R̂ the rewards the stage gives the episode's steps."""
    rng = np.random.default_rng(0)
    done = np.zeros((9, 1), bool)
    done[8] = True
    window = _window(rng.normal(size=(9, 1, 1)), rng.integers(0, 4, (9, 1)),
                     [[0.0]] * 8 + [[3.0]], done, np.zeros((9, 1), bool))
    stage = _make("rrd", sample_size=9, batch_size=9, units="return", hidden=(4,), lessons=1,
                  horizon=16)
    params = stage.init(jax.random.key(0), window)
    new, memory, _ = stage.redistribute(params, window, jax.random.key(0),
                                        stage.init_memory(window))
    batch = stage.sample(memory, jax.random.key(1))
    assert sorted(np.asarray(batch.index)[0].tolist()) == list(range(9))
    loss, _ = stage.loss(params, batch, None, None)
    np.testing.assert_allclose(float(loss), (3.0 - float(new.reward.sum())) ** 2, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# IRCR's targets and the buffer of the best episodes
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("credit,fifo_target,best_target", [("mean", 1.0, 0.0),
                                                            ("return", 0.0, 1.0)])
def test_ircr_targets_by_hand(credit, fifo_target, best_target):
    """One environment, a first-in first-out buffer of one episode and one best episode.
    Episodes: A (steps 0–3, rewards 0, 0, 0, 4, terminated), B (step 4, reward 0, truncated),
    C (step 5, reward 3, terminated), then a running one. The buffer ends with C, the best with
    A (return 4). Credits R/T: C 3, A 1, so g(C) = 1, g(A) = 0; credits R: C 3, A 4, so
    g(C) = 0, g(A) = 1 (min and max over both buffers)."""
    reward = np.array([0, 0, 0, 4, 0, 3, 1, 1, 1], np.float32)[:, None]
    terminated = np.zeros((9, 1), bool)
    terminated[[3, 5]] = True
    truncated = np.zeros((9, 1), bool)
    truncated[4] = True
    window = _window(np.arange(9, dtype=np.float32)[:, None, None], np.zeros((9, 1), np.int32),
                     reward, terminated, truncated)
    stage = _make("ircr", batch_size=6, best=1, credit=credit, hidden=(4,), lessons=1,
                  horizon=16)
    params = stage.init(jax.random.key(0), window)
    _, memory, _ = stage.redistribute(params, window, jax.random.key(0),
                                      stage.init_memory(window))
    assert int(memory.episodes.lessons.length[0]) == 1  # C
    assert int(memory.best.length[0]) == 4 and float(memory.best_priority[0]) == 4.0  # A
    batch = stage.sample(memory, jax.random.key(1))
    assert np.all(np.asarray(batch.valid))
    np.testing.assert_allclose(np.asarray(batch.target), [fifo_target] * 6 + [best_target] * 6)
    assert np.all(np.asarray(batch.step)[:6] == 0) and np.all(np.asarray(batch.step)[6:] < 4)


def test_the_best_buffer_keeps_the_highest_returns_when_several_end_together():
    """Stored returns (2, 4) and three episodes ending at once with returns 5, 1, 3: only 5 beats
    the lowest (2), so (5, 4). With an empty slot, (−, 2, 4) and 1, 3, 0 keep the best three of
    all: 3 fills the empty slot and 2, 4 stay."""
    def episodes(values):
        values = jnp.asarray(values, jnp.float32)
        return lessons.Episodes(obs=values[:, None], action=jnp.zeros((len(values), 1), int),
                                reward=values[:, None], length=jnp.ones(len(values), int))

    for stored, priority, new, expected in (([2, 4], [2.0, 4.0], [5, 1, 3], [5, 4]),
                                            ([0, 2, 4], [-np.inf, 2.0, 4.0], [1, 3, 0],
                                             [3, 2, 4])):
        kept, kept_priority = lessons.store(episodes(stored), jnp.array(priority),
                                            episodes(new), jnp.asarray(new, jnp.float32),
                                            jnp.ones(3, bool), best_only=True)
        np.testing.assert_array_equal(np.asarray(kept_priority), expected)
        np.testing.assert_array_equal(np.asarray(kept.reward)[:, 0], expected)


# ------------------------------------------------------------------------------------------
# Against a float64 loop over windows
# ------------------------------------------------------------------------------------------


def _stream(rng, continuous: bool, num_steps=10, num_envs=3):
    """Two random windows of one stream, terminations and time-outs at random."""
    windows = []
    for _ in range(2):
        ends = rng.random((num_steps, num_envs))
        action = (rng.normal(size=(num_steps, num_envs, 2)).astype(np.float32) if continuous
                  else rng.integers(0, 4, (num_steps, num_envs)).astype(np.int32))
        windows.append(_window(rng.normal(size=(num_steps, num_envs, 3)), action,
                               rng.normal(size=(num_steps, num_envs)), ends < 0.2,
                               (ends >= 0.2) & (ends < 0.35),
                               rng.normal(size=(num_steps, num_envs, 3))))
    return windows


def _finished_episodes(windows):
    """The finished episodes of the stream in float64, each a dict of its steps."""
    num_envs = windows[0].reward.shape[1]
    running = [[] for _ in range(num_envs)]
    finished = []
    for w in windows:
        for t in range(w.reward.shape[0]):
            for n in range(num_envs):
                running[n].append(tuple(np.asarray(x[t, n], np.float64) for x in
                                        (w.obs, w.action, w.reward, w.next_obs)))
                if bool(w.done[t, n]):
                    obs, action, reward, next_obs = (np.stack(v) for v in zip(*running[n]))
                    finished.append(dict(obs=obs, action=action, reward=reward,
                                         next_obs=next_obs, ret=reward.sum()))
                    running[n] = []
    return finished


def _match(buffer, slot, episodes):
    """The float64 episode stored in ``slot`` (found by its first observation)."""
    first = np.asarray(buffer.obs[slot, 0], np.float64)
    found = [e for e in episodes if np.array_equal(e["obs"][0], first)]
    assert len(found) == 1
    assert int(buffer.length[slot]) == len(found[0]["reward"])
    return found[0]


def _features64(episode, steps, continuous, next_obs):
    action = episode["action"][steps]
    action = action if continuous else np.eye(4)[action.astype(int)]
    parts = [episode["obs"][steps], action]
    if next_obs:
        parts.append(episode["obs"][steps] - episode["next_obs"][steps])
    return np.concatenate(parts, axis=-1)


def _model64(params, x):
    layers = params["params"]
    for i in range(len(layers)):
        dense = layers[f"Dense_{i}"]
        x = x @ np.asarray(dense["kernel"], np.float64) + np.asarray(dense["bias"], np.float64)
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x[..., 0]


RRD_OPTIONS = dict(sample_size=3, batch_size=24, bias_correction=True, hidden=(6,), lessons=32,
                   horizon=20)


def test_rrd_fit_against_a_float64_loop():
    """Two windows of three environments, episodes ending by termination or time-out inside and
    across them: the buffer holds every finished episode, and the stage's loss (step units, with
    the correction) on a drawn batch is, in float64 over the same draws and K = 3,
    mean_e [(R − (T/K) Σ_I R̂)² − T² c s²_I / K] / T² with c = 1 − K/T (1 for K > T, 0 for
    T = 1)."""
    windows = _stream(np.random.default_rng(1), continuous=False)
    episodes = _finished_episodes(windows)
    stage = _make("rrd", **RRD_OPTIONS)
    params = stage.init(jax.random.key(0), windows[0])
    memory = stage.init_memory(windows[0])
    for w in windows:
        _, memory, _ = stage.redistribute(params, w, jax.random.key(0), memory)
    assert int(memory.episodes.stored) == len(episodes) > 8
    batch = stage.sample(memory, jax.random.key(3))
    loss, metrics = stage.loss(params, batch, None, None)
    total, k = 0.0, 3
    for slot, index in zip(np.asarray(batch.slot), np.asarray(batch.index)):
        episode = _match(memory.episodes.lessons, slot, episodes)
        steps = len(episode["reward"])
        assert index.max() < steps and (len(set(index)) == k or steps < k)
        rhat = _model64(params, _features64(episode, index, False, True))
        factor = 0.0 if steps == 1 else (1 - k / steps if k <= steps else 1.0)
        squared = (episode["ret"] - steps / k * rhat.sum()) ** 2
        total += (squared - steps ** 2 * factor * rhat.var(ddof=1) / k) / steps ** 2
    np.testing.assert_allclose(float(loss), total / len(batch.slot), rtol=1e-4, atol=1e-6)
    assert float(metrics["variance"]) > 0


def test_ircr_fit_against_a_float64_loop_with_continuous_actions():
    """As for rrd, continuous actions: the best buffer holds the three highest returns of the
    stream, every drawn transition's target is its episode's (R/T − min) / (max − min) over the
    finished episodes, and the loss is the mean squared error of R̂ against it."""
    continuous, credit = True, "mean"
    windows = _stream(np.random.default_rng(2), continuous)
    episodes = _finished_episodes(windows)
    stage = _make("ircr", batch_size=16, best=3, credit=credit, hidden=(6,), next_obs=True,
                  lessons=32, horizon=20)
    params = stage.init(jax.random.key(0), windows[0])
    memory = stage.init_memory(windows[0])
    for w in windows:
        _, memory, _ = stage.redistribute(params, w, jax.random.key(0), memory)
    returns = sorted(e["ret"] for e in episodes)
    np.testing.assert_allclose(np.sort(np.asarray(memory.best_priority)), returns[-3:],
                               rtol=1e-5)

    def credit_of(e):
        return e["ret"] / len(e["reward"]) if credit == "mean" else e["ret"]

    low, high = min(map(credit_of, episodes)), max(map(credit_of, episodes))
    batch = stage.sample(memory, jax.random.key(3))
    loss, _ = stage.loss(params, batch, None, None)
    errors = []
    for i, (slot, step) in enumerate(zip(np.asarray(batch.slot), np.asarray(batch.step))):
        buffer = memory.episodes.lessons if i < 16 else memory.best
        episode = _match(buffer, slot, episodes)
        target = (credit_of(episode) - low) / (high - low)
        np.testing.assert_allclose(float(batch.target[i]), target, rtol=1e-5, atol=1e-6)
        rhat = _model64(params, _features64(episode, np.array([step]), continuous, True))[0]
        errors.append((rhat - target) ** 2)
    np.testing.assert_allclose(float(loss), np.mean(errors), rtol=1e-4)


@pytest.mark.parametrize("continuous", [False, True])
def test_the_stage_reads_actions_through_their_features(continuous):
    """r̃_t is R̂ of (o_t, one-hot a_t, o_t − o_{t+1}) for discrete actions and of (o_t, a_t,
    o_t − o_{t+1}) for continuous ones, and a constant for every gradient."""
    window = _stream(np.random.default_rng(4), continuous)[0]
    stage = _make("rrd", **RRD_OPTIONS)
    params = stage.init(jax.random.key(0), window)
    memory = stage.init_memory(window)
    new, _, _ = stage.redistribute(params, window, jax.random.key(0), memory)
    steps = {k: np.asarray(getattr(window, k), np.float64) for k in ("obs", "next_obs")}
    steps["action"] = np.asarray(window.action)
    np.testing.assert_allclose(np.asarray(new.reward),
                               _model64(params, _features64(steps, ..., continuous, True)),
                               rtol=1e-5, atol=1e-6)
    if not continuous:
        grads = jax.grad(lambda p: stage.redistribute(p, window, jax.random.key(0),
                                                      memory)[0].reward.sum())(params)
        assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="rrd: units must be one of step, return"):
        make_redistributor("rrd", units="sum")
    with pytest.raises(ValueError, match="bias_correction needs sample_size >= 2"):
        make_redistributor("rrd", sample_size=1, bias_correction=True)
    with pytest.raises(ValueError, match="rrd: sample_size must be an integer >= 1"):
        make_redistributor("rrd", sample_size=0)
    with pytest.raises(ValueError, match="ircr: credit must be one of mean, return"):
        make_redistributor("ircr", credit="max")
    with pytest.raises(ValueError, match="ircr: best must be an integer >= 0"):
        make_redistributor("ircr", best=-1)
    with pytest.raises(ValueError, match="ircr: hidden must be integers"):
        make_redistributor("ircr", hidden="a,b")


# ------------------------------------------------------------------------------------------
# From the command line
# ------------------------------------------------------------------------------------------


def test_trains_from_the_command_line_on_a_delayed_continuous_control_reward(tmp_path):
    from jaxcredit import cli, runlog

    out = tmp_path / "run"
    argv = ["train", "--algo", "ppo", "--env", "DelayedReward-Pendulum-v1", "--env-option",
            "max_steps_in_episode=10", "--num-envs", "4", "--num-steps", "6",
            "--num-minibatches", "1", "--update-epochs", "1", "--total-timesteps", "48",
            "--hidden-sizes", "8",
            "--eval-every", "0", "--out", str(out), "--no-progress", "--redistribute", "rrd"]
    for option in ("hidden=8", "lessons=8", "sample_size=4", "batch_size=8",
                   "bias_correction=true"):
        argv += ["--redistribute-option", option]
    assert cli.main(argv) == 0
    columns = runlog.read_metrics(out)
    assert len(columns["update"]) == 2
    for name in ("subset_loss", "variance", "reward_mean", "lessons_filled"):
        assert np.isfinite(columns[f"redistribute/{name}"]).all(), name
    assert columns["redistribute/lessons_filled"][-1] > 0

"""Temporal Value Transport and the memory agent it reads: read events and transported rewards by
hand, the transport against a float64 loop written from the reference's per-episode rule (episode
ends of both kinds, a window that starts mid-episode), the RMA's memory (row j holds step j's
code, content-based reads by hand, reset at episode starts) and training from the command line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.redistribute import make_redistributor, registered
from jaxcredit.redistribute.tvt import read_events, tvt_rewards
from jaxcredit.rma import MemoryAgent, read_memory
from jaxcredit.types import MemoryReads, Trajectory


def test_tvt_is_registered():
    assert "tvt" in registered()


def test_read_events_by_hand():
    """Runs above 2: steps 1–3 (peak at 2) and 5–6 (a tie: the first, 5); an episode start at
    step 6 splits the second run into 5 and 6."""
    strengths = jnp.array([0.0, 3.0, 5.0, 4.0, 1.0, 2.5, 2.5, 0.0])
    none = jnp.zeros(8, bool)
    np.testing.assert_array_equal(read_events(strengths, 2.0, none),
                                  [0, 0, 1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(read_events(strengths, 2.0, none.at[6].set(True)),
                                  [0, 0, 1, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(read_events(strengths.at[6].set(0.0).at[7].set(9.0), 2.0, none),
                                  [0, 0, 1, 0, 0, 1, 0, 1])  # a run still open at the end


def _one_read(weights_at_4, strength=3.0):
    T, R = 6, 6
    weights = np.full((T, 1, R), 1.0 / R)
    weights[4, 0] = weights_at_4
    strengths = np.zeros((T, 1))
    strengths[4] = strength
    value = np.zeros(T)
    value[4] = 2.0
    return (jnp.asarray(weights, jnp.float32), jnp.asarray(strengths, jnp.float32),
            jnp.arange(T), jnp.asarray(value, jnp.float32), jnp.zeros(T, bool).at[0].set(True))


def test_transport_by_hand():
    """One episode of 6 steps, P = 1, α = 0.9: step 4 reads rows (0.5, 0.1, 0.3, 0.1) with
    strength 3 and V̂ = 2. Rows 0–2 are older than P: r̃ = 0.9 · w · 2 = (0.9, 0.18, 0.54);
    row 3 is inside the period. With top_k = 2 only rows 0 and 2 are paid; under the threshold
    nothing is; and a step whose most-read row is inside the period is no event at all."""
    w = [0.5, 0.1, 0.3, 0.1, 0.0, 0.0]
    np.testing.assert_allclose(tvt_rewards(*_one_read(w), 0.9, 50, 2.0, 1),
                               [0.9, 0.18, 0.54, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(tvt_rewards(*_one_read(w), 0.9, 2, 2.0, 1),
                               [0.9, 0.0, 0.54, 0, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(tvt_rewards(*_one_read(w, strength=1.5), 0.9, 50, 2.0, 1),
                                  np.zeros(6))
    recent = [0.1, 0.1, 0.1, 0.7, 0.0, 0.0]  # the most-read row, 3, is 1 step old
    np.testing.assert_array_equal(tvt_rewards(*_one_read(recent), 0.9, 50, 2.0, 1), np.zeros(6))


def _reference_episode(weights, strengths, value, alpha, top_k, threshold, period):
    """The reference's rule on one whole episode, a plain float64 loop (``tvt_rewards.py``,
    ``_tvt_rewards_single_head``, with dense reads: the read times of row j are j)."""
    length, heads, rows = weights.shape
    out = np.zeros(length)
    for h in range(heads):
        w = weights[:, h]
        cut = np.array([strengths[t, h] if t - np.argmax(w[t]) > period else 0.0
                        for t in range(length)])
        events, over, best, best_t = [], False, 0.0, 0
        for t, s in enumerate(cut):
            if s > threshold:
                over = True
                if s > best:
                    best, best_t = s, t
            else:
                if over:
                    events.append(best_t)
                    best = 0.0
                over = False
        if over:
            events.append(best_t)
        for t2 in events:
            masked = np.array([w[t2, j] if t2 - j > period else 0.0 for j in range(rows)])
            chosen = (np.arange(rows) if rows <= top_k
                      else np.argpartition(masked, -top_k)[-top_k:])
            for j in chosen:
                if j < t2:
                    out[j] += alpha * masked[j] * value[t2]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transport_against_a_float64_loop_per_episode(seed):
    """Random reads over 2 environments × 24 steps: episodes end by termination and by
    truncation, and the window starts 3 steps into an episode (its rows 0–2 lie before the
    window and are never paid). Each episode's piece of the window is compared with the loop
    run on the whole episode, keeping the rows inside the window."""
    rng = np.random.default_rng(seed)
    T, N, H, R = 24, 2, 2, 16
    alpha, top_k, threshold, period = 0.9, 5, 1.5, 3
    done = np.zeros((T, N), bool)
    done[[8, 19], 0] = True  # terminated, then truncated: the rule treats both as ends
    done[[12], 1] = True
    offset = np.array([3, 0])  # environment 0's episode began before the window
    rows = np.zeros((T, N), np.int32)
    for n in range(N):
        step = offset[n]
        for t in range(T):
            rows[t, n] = step
            step = 0 if done[t, n] else step + 1
    logits = rng.normal(size=(T, N, H, R)) * 3.0
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    strengths = rng.uniform(0.0, 4.0, (T, N, H))
    value = rng.normal(size=(T, N))
    first = np.concatenate([np.ones((1, N), bool), done[:-1]])
    got = jax.jit(jax.vmap(
        lambda w, s, r, v, f: tvt_rewards(w, s, r, v, f, alpha, top_k, threshold, period),
        in_axes=(1, 1, 1, 1, 1), out_axes=1))(
            jnp.asarray(weights, jnp.float32), jnp.asarray(strengths, jnp.float32),
            jnp.asarray(rows), jnp.asarray(value, jnp.float32), jnp.asarray(first))
    expected = np.zeros((T, N))
    for n in range(N):
        starts = [0] + [t + 1 for t in range(T - 1) if done[t, n]]
        for a, b in zip(starts, starts[1:] + [T]):
            lead = rows[a, n]  # steps of this episode before the window
            length = lead + (b - a)
            w = np.full((length, H, R), 1.0 / R)  # steps before the window: no events
            s = np.zeros((length, H))
            v = np.zeros(length)
            w[lead:], s[lead:], v[lead:] = weights[a:b, n], strengths[a:b, n], value[a:b, n]
            piece = _reference_episode(w, s, v, alpha, top_k, threshold, period)
            expected[a:b, n] = piece[lead:]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-5)
    assert np.abs(expected).sum() > 0.1  # the case transports something


def test_the_stage_adds_the_transported_rewards_and_needs_memory_reads():
    weights, strengths, rows, value, _ = _one_read([0.5, 0.1, 0.3, 0.1, 0.0, 0.0])
    zeros = jnp.zeros((6, 1), jnp.float32)
    traj = Trajectory(obs=jnp.zeros((6, 1, 2)), action=jnp.zeros((6, 1), jnp.int32),
                      reward=zeros + 1.0, terminated=jnp.zeros((6, 1), bool),
                      truncated=jnp.zeros((6, 1), bool), value=value[:, None],
                      next_value=zeros, log_prob=zeros, logits=jnp.zeros((6, 1, 4)),
                      memory_reads=MemoryReads(weights[:, None], strengths[:, None],
                                               rows[:, None]))
    stage = make_redistributor("tvt", no_transport_period=1)
    assert stage.reads_memory and stage.reads_agent_state and not stage.learned
    new, _, metrics = stage.redistribute({}, traj, jax.random.key(0), None)
    np.testing.assert_allclose(new.reward[:, 0], [1.9, 1.18, 1.54, 1, 1, 1], rtol=1e-6)
    assert float(metrics["transported"]) == pytest.approx((0.9 + 0.18 + 0.54) / 6, rel=1e-5)
    with pytest.raises(ValueError, match="use --policy rma"):
        stage.redistribute({}, traj.replace(memory_reads=None), jax.random.key(0), None)
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        make_redistributor("tvt", top_k=0)


def test_content_based_reads_by_hand():
    """Rows (1, 0), (0, 1) and an empty row; key (2, 0) (its direction is what counts) with
    strength 2: cosines (1, 0, 0), so w = softmax(2, 0, 0) and the read is w₀ (1, 0) + w₁ (0, 1)."""
    memory = jnp.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    reads, weights = read_memory(jnp.array([[[2.0, 0.0]]]), jnp.array([[2.0]]), memory)
    e2 = np.exp(2.0)
    np.testing.assert_allclose(weights[0, 0], [e2 / (e2 + 2), 1 / (e2 + 2), 1 / (e2 + 2)],
                               rtol=1e-6)
    np.testing.assert_allclose(reads[0, 0], [e2 / (e2 + 2), 1 / (e2 + 2)], rtol=1e-6)


def test_the_memory_holds_each_steps_code_in_its_row_and_restarts_with_the_episode():
    """Over 6 steps with an episode starting at step 4: row j of the memory after step 3 is
    the code z_j written at step j (the first entries of the features), the counter gives each
    step's index in its episode, and from step 4 on the memory restarts (row 0 is z_4, row 1
    empty) with outputs equal to a fresh run from there."""
    net = MemoryAgent(4, (8, 8), memory_rows=6, obs_size=3)
    obs = jax.random.normal(jax.random.key(1), (6, 2, 3))
    first = jnp.zeros((6, 2), bool).at[0].set(True).at[4].set(True)
    params = net.init(jax.random.key(0), _fresh(2), obs, first, method=MemoryAgent.everything)
    _, (states, features, reads) = net.apply(params, _fresh(2), obs, first,
                                             method=MemoryAgent.unroll_with_reads)
    z = np.asarray(features[..., :8])
    memories = np.asarray(states[3])  # the state's memory [T, B, R, L] after every step
    memory = memories[3]  # after step 3: rows 0–3 written
    np.testing.assert_allclose(memory[:, :4], np.swapaxes(z[:4], 0, 1), atol=1e-6)
    np.testing.assert_array_equal(memory[:, 4:], 0.0)
    np.testing.assert_array_equal(reads.rows, np.array([[0, 1, 2, 3, 0, 1]] * 2).T)
    after = memories[4]
    np.testing.assert_allclose(after[:, 0], z[4], atol=1e-6)
    np.testing.assert_array_equal(after[:, 1:], 0.0)
    _, (_, fresh, _) = net.apply(params, _fresh(2), obs[4:], first[4:].at[0].set(True),
                                 method=MemoryAgent.unroll_with_reads)
    np.testing.assert_allclose(features[4:], fresh, atol=1e-6)
    np.testing.assert_allclose(np.asarray(reads.weights).sum(-1), 1.0, rtol=1e-5)
    # Reads come before the step's write: at step t rows t.. are empty, with equal weights.
    w = np.asarray(reads.weights)
    for t, row in enumerate([0, 1, 2, 3, 0, 1]):
        np.testing.assert_allclose(w[t, :, :, row:], w[t, :, :, row:row + 1]
                                   * np.ones_like(w[t, :, :, row:]), rtol=1e-6)
    assert not np.allclose(w[3, :, :, 0], w[3, :, :, 3])  # a written row reads differently


def _fresh(batch):
    from jaxcredit.rma import initial_memory

    return initial_memory(8, 8, 6, batch)


def test_trains_from_the_command_line_with_the_memory_agent(tmp_path, no_cache_writes):
    """A2C with ``--policy rma`` and ``--redistribute tvt`` on MemoryKeyToDoor: the metrics of
    the transport and of the memory agent's own losses are finite."""
    from jaxcredit import cli, runlog

    out = tmp_path / "run"
    argv = ["train", "--algo", "a2c", "--redistribute", "tvt", "--env", "MemoryKeyToDoor",
            "--env-option", "preset=cca", "--policy", "rma", "--num-envs", "2", "--num-steps",
            "8", "--num-minibatches", "1", "--total-timesteps", "32", "--hidden-sizes", "8", "8",
            "--eval-every", "0", "--out", str(out), "--no-progress",
            "--redistribute-option", "no_transport_period=2"]
    assert cli.main(argv) == 0
    columns = runlog.read_metrics(out)
    for name in ("redistribute/transported", "rma/reconstruction", "rma/read_strength"):
        assert np.isfinite(columns[name]).all(), name
    assert len(columns["update"]) == 2

"""Synthetic Returns: the prediction r̂_t = g(c_t) Σ_{k<t} s(c_k) + b(c_t) by hand (an episode end
inside the window, a sum carried in, the capacity), r̃ = α s + β r, r̂ against a float64 loop over
windows, the fit on a delayed-reward task, and training from the command line."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.fitting import FitSchedule, fit, init_fit_state
from jaxcredit.redistribute import make_redistributor, registered
from jaxcredit.redistribute.synthetic_returns import embedding_input, make_networks, outputs
from jaxcredit.types import Trajectory


def test_synthetic_returns_is_registered():
    assert "synthetic_returns" in registered()


def _window(obs, reward, terminated, truncated=None, num_actions=2, action=None):
    obs = jnp.asarray(obs, jnp.float32)
    T, N = obs.shape[:2]
    zeros = jnp.zeros((T, N), jnp.float32)
    truncated = np.zeros((T, N), bool) if truncated is None else truncated
    action = np.zeros((T, N), np.int32) if action is None else action
    return Trajectory(obs=obs, action=jnp.asarray(action, jnp.int32),
                      reward=jnp.asarray(reward, jnp.float32),
                      terminated=jnp.asarray(terminated), truncated=jnp.asarray(truncated),
                      value=zeros, next_value=zeros, log_prob=zeros,
                      logits=jnp.zeros((T, N, num_actions), jnp.float32), next_obs=obs)


def _dense(kernel, bias):
    return {"params": {"mlp": {"Dense_0": {"kernel": jnp.asarray(kernel, jnp.float32),
                                           "bias": jnp.asarray(bias, jnp.float32)}}}}


# Three observation types, one-hot; linear layers: c = obs, s = (1, 10, 100)[type],
# g = sigmoid(0, ln 3, −ln 3) = (1/2, 3/4, 1/4), b = (0.5, −1, 2).
S_VALUES, GATES, BIASES = (1.0, 10.0, 100.0), (0.5, 0.75, 0.25), (0.5, -1.0, 2.0)
HAND_PARAMS = {
    "embedding": _dense(np.eye(3), np.zeros(3)),
    "synthetic_return": _dense(np.array(S_VALUES)[:, None], [0.0]),
    "gate": _dense(np.array([0.0, np.log(3.0), -np.log(3.0)])[:, None], [0.0]),
    "bias": _dense(np.array(BIASES)[:, None], [0.0]),
}


def _hand_stage(capacity, **options):
    return make_redistributor("synthetic_returns", capacity=capacity, memory_size=3,
                              hidden_layers=(), embedding_layers=(), **options)


@pytest.mark.parametrize("capacity", [4, 2])
def test_prediction_by_hand_with_an_episode_end_and_a_sum_carried_in(capacity):
    """Stored before the window, oldest first: types (2 | 0, 1), of which the running episode
    owns the newest two (count 2): a carried sum of s = 1 + 10 = 11; the type-2 slot belongs to
    an earlier episode and is not summed. The window: types 2, 0, 1, 1 with the episode ending
    at step 1 (terminated)::

        t = 0: g = 1/4, Σ = 11              → 11/4 + 2     = 4.75
        t = 1: g = 1/2, Σ = 11 + 100 = 111  → 111/2 + 0.5  = 56
        t = 2: a new episode, Σ = 0         → 0 − 1        = −1
        t = 3: g = 3/4, Σ = s(type 1) = 10  → 30/4 − 1     = 6.5

    With capacity 2 only the two previous steps are summed: at t = 1 that is 10 + 100
    (110/2 + 0.5 = 55.5); the others are unchanged."""
    types = [2, 0, 1, 1]
    obs = np.eye(3)[types][:, None]
    window = _window(obs, np.zeros((4, 1)), np.array([[False], [True], [False], [False]]))
    stage = _hand_stage(capacity)
    memory = stage.init_memory(window)
    stored = np.eye(3)[[2, 0, 1][-capacity:]][:, None]
    memory = memory.replace(embeddings=jnp.asarray(stored, jnp.float32),
                            count=jnp.array([2], jnp.int32))
    networks = make_networks(3, (), ())
    s, prediction, gate, _ = outputs(networks, HAND_PARAMS, window.obs, window.done,
                                     memory.embeddings, memory.count, capacity)
    expected = [4.75, 56.0 if capacity == 4 else 55.5, -1.0, 6.5]
    np.testing.assert_allclose(np.asarray(prediction)[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s)[:, 0], [100.0, 1.0, 10.0, 10.0])
    np.testing.assert_allclose(np.asarray(gate)[:, 0], [0.25, 0.5, 0.75, 0.75], rtol=1e-6)
    # The stage's own loss is ½ mean (r̂ − r)²: zero on the hand-computed rewards.
    new, memory, _ = stage.redistribute(HAND_PARAMS, window.replace(
        reward=jnp.asarray(expected, jnp.float32)[:, None]), jax.random.key(0), memory)
    value, _ = stage.loss(HAND_PARAMS, stage.sample(memory, jax.random.key(1)), None, None)
    assert float(value) < 1e-9
    # After the window the running episode is steps 2, 3 (types 1, 1): count 2, newest last.
    assert int(memory.count[0]) == 2
    np.testing.assert_allclose(np.asarray(memory.embeddings)[-2:, 0], np.eye(3)[[1, 1]])


def test_new_reward_is_alpha_s_plus_beta_r():
    rng = np.random.default_rng(0)
    window = _window(rng.normal(size=(6, 3, 5)), rng.normal(size=(6, 3)),
                     rng.random((6, 3)) < 0.3)
    stage = make_redistributor("synthetic_returns", alpha=0.7, beta=-0.4, capacity=4,
                               memory_size=8, hidden_layers=(16,), embedding_layers=(16,))
    params = stage.init(jax.random.key(0), window)
    memory = stage.init_memory(window)
    s, *_ = outputs(make_networks(8, (16,), (16,)), params, window.obs, window.done,
                    memory.embeddings, memory.count, 4)
    new, _, _ = stage.redistribute(params, window, jax.random.key(0), memory)
    np.testing.assert_allclose(np.asarray(new.reward),
                               0.7 * np.asarray(s) - 0.4 * np.asarray(window.reward),
                               rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(s)).max() > 1e-3  # s is not zero: α is tested
    # And a constant for every gradient.
    grads = jax.grad(lambda p: stage.redistribute(p, window, jax.random.key(0),
                                                  memory)[0].reward.sum())(params)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))


# ------------------------------------------------------------------------------------------
# Against a float64 loop, episodes spanning windows
# ------------------------------------------------------------------------------------------


def _mlp64(layers, x):
    for i, layer in enumerate(layers):
        x = x @ layer["kernel"] + layer["bias"]
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def _layers(params, name):
    mlp = params[name]["params"]["mlp"]
    return [{k: np.asarray(v, np.float64) for k, v in mlp[f"Dense_{i}"].items()}
            for i in range(len(mlp))]


def _reference(params, obs, reward_shape, done, capacity):
    """r̂ of a stream ``[T, N, D]`` in float64, one environment and one step at a time: the
    episode's list of s values so far, of which the last ``capacity`` are summed."""
    c = _mlp64(_layers(params, "embedding"), np.asarray(obs, np.float64))
    s = _mlp64(_layers(params, "synthetic_return"), c)[..., 0]
    g = 1.0 / (1.0 + np.exp(-_mlp64(_layers(params, "gate"), c)[..., 0]))
    b = _mlp64(_layers(params, "bias"), c)[..., 0]
    out = np.zeros(reward_shape)
    for n in range(reward_shape[1]):
        past = []
        for t in range(reward_shape[0]):
            out[t, n] = g[t, n] * sum(past[-capacity:]) + b[t, n]
            past.append(s[t, n])
            if done[t, n]:
                past = []
    return out


@pytest.mark.parametrize("seed", range(2))
def test_prediction_against_a_float64_loop_over_windows(seed):
    """Four windows of 7 steps, episodes ending by termination and by truncation, episodes that
    span windows and a capacity (5) shorter than many of them: r̂ of each window, read from the
    memory the stage carried, equals the loop over the whole stream."""
    rng = np.random.default_rng(seed)
    T, N, W, capacity = 7, 4, 4, 5
    obs = rng.normal(size=(W * T, N, 3))
    done = rng.random((W * T, N)) < 0.12
    terminated = done & (rng.random((W * T, N)) < 0.5)
    truncated = done & ~terminated
    reward = rng.normal(size=(W * T, N))
    assert terminated.any() and truncated.any()
    stage = make_redistributor("synthetic_returns", capacity=capacity, memory_size=6,
                               hidden_layers=(8, 8), embedding_layers=(8,))
    windows = [_window(obs[w * T:(w + 1) * T], reward[w * T:(w + 1) * T],
                       terminated[w * T:(w + 1) * T], truncated[w * T:(w + 1) * T])
               for w in range(W)]
    params = stage.init(jax.random.key(seed), windows[0])
    memory = stage.init_memory(windows[0])
    networks = make_networks(6, (8, 8), (8,))
    predictions = []
    for window in windows:
        _, prediction, _, _ = outputs(networks, params, window.obs, window.done,
                                      memory.embeddings, memory.count, capacity)
        predictions.append(np.asarray(prediction))
        _, memory, _ = stage.redistribute(params, window, jax.random.key(0), memory)
    expected = _reference(params, obs, reward.shape, done, capacity)
    np.testing.assert_allclose(np.concatenate(predictions), expected, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------
# The fit on a delayed-reward task
# ------------------------------------------------------------------------------------------

EPISODE, CUE_STEP = 6, 2


def _delayed_cue_stream(rng, num_windows, T, N):
    """Episodes of 6 steps (observation: one-hot of the step, plus at step 2 only a cue
    c = ±1), reward c at the last step and 0 before: the action at step 1 decided the cue and
    the reward is paid three steps later, the observation at step 2 (the state after the
    decisive action) the only one that tells. Every other episode ends by truncation."""
    steps = num_windows * T
    phase = np.arange(steps) % EPISODE
    episode = np.arange(steps) // EPISODE
    cue = np.where(rng.random((steps // EPISODE + 1, N)) < 0.5, 1.0, -1.0)[episode]
    obs = np.zeros((steps, N, EPISODE + 1))
    obs[np.arange(steps), :, phase] = 1.0
    obs[:, :, EPISODE] = np.where(phase == CUE_STEP, 1.0, 0.0)[:, None] * cue
    reward = np.where(phase == EPISODE - 1, 1.0, 0.0)[:, None] * cue
    done = np.broadcast_to((phase == EPISODE - 1)[:, None], (steps, N))
    truncated = done & (episode % 2 == 1)[:, None]
    return [_window(obs[w * T:(w + 1) * T], reward[w * T:(w + 1) * T],
                    done[w * T:(w + 1) * T] & ~truncated[w * T:(w + 1) * T],
                    truncated[w * T:(w + 1) * T]) for w in range(num_windows)]


def test_the_fit_learns_a_delayed_reward_and_s_spikes_after_the_decisive_action():
    """Windows of 4 steps cut the 6-step episodes (the sum is carried across windows). After
    the fit the loss has fallen tenfold, and s is large at the cue step, where it separates the
    two cues, and small and the same at every other step: the paper's interpretability claim.
    (Only s(+) − s(−) is identified: a constant added to s at one step can be taken back by the
    gate and bias of the later ones.)"""
    T, N, updates = 4, 16, 150
    windows = _delayed_cue_stream(np.random.default_rng(0), updates + 1, T, N)
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *windows[:updates])
    stage = make_redistributor("synthetic_returns", capacity=8, memory_size=16,
                               hidden_layers=(32,), embedding_layers=(32,))
    schedule = FitSchedule(steps=4)
    params = stage.init(jax.random.key(0), windows[0])
    state = init_fit_state(params, windows[0], schedule).replace(
        memory=stage.init_memory(windows[0]))

    def update(state, inputs):
        window, key = inputs
        fit_key, key = jax.random.split(key)
        state, metrics = fit(stage.loss, state, window, None, 1e-2, jnp.inf, fit_key,
                             schedule, sample=lambda k: stage.sample(state.memory, k))
        _, memory, rd_metrics = stage.redistribute(state.params, window, key, state.memory)
        return state.replace(memory=memory), rd_metrics["prediction_loss"]

    state, losses = jax.jit(lambda s, w, k: jax.lax.scan(update, s, (w, k)))(
        state, stacked, jax.random.split(jax.random.key(1), updates))
    losses = np.asarray(losses)
    # Unfitted, r̂ ≈ 0 against rewards ±1 on one step in six: ½ · 1/6 ≈ 0.08.
    assert losses[-10:].mean() < 0.1 * losses[:3].mean(), losses[[0, 1, 2, -3, -2, -1]]
    # s on a fresh window, by step of the episode.
    probe = windows[-1]
    memory = state.memory
    s, *_ = outputs(make_networks(16, (32,), (32,)), state.params, probe.obs, probe.done,
                    memory.embeddings, memory.count, 8)
    s, obs = np.asarray(s), np.asarray(probe.obs)
    phase, cue = obs[..., :EPISODE].argmax(-1), obs[..., EPISODE]
    at_cue = phase == CUE_STEP
    spread = s[at_cue & (cue > 0)].mean() - s[at_cue & (cue < 0)].mean()
    elsewhere = np.abs(s[~at_cue] - s[~at_cue].mean()).max()
    assert spread > 0.5, spread
    assert np.abs(s[at_cue]).mean() > 5 * np.abs(s[~at_cue]).mean(), (s[at_cue], s[~at_cue])
    assert elsewhere < 0.1 * spread


def test_the_observation_action_input_by_hand():
    """[T=1, N=2]: observations (1, 2) and (3, 4), actions 2 and 0 of 3: the observation alone,
    or with the action's one-hot after it; a continuous action [.., 2] is appended as it is."""
    obs = jnp.array([[[1.0, 2.0], [3.0, 4.0]]])
    action = jnp.array([[2, 0]])
    np.testing.assert_array_equal(embedding_input(obs, action, 3, "observation", 2), obs)
    np.testing.assert_array_equal(embedding_input(obs, action, 3, "observation_action", 2),
                                  [[[1, 2, 0, 0, 1], [3, 4, 1, 0, 0]]])
    continuous = jnp.array([[[0.5, -1.0], [0.0, 2.0]]])
    np.testing.assert_array_equal(
        embedding_input(obs, continuous, 0, "observation_action", 2),
        [[[1, 2, 0.5, -1.0], [3, 4, 0.0, 2.0]]])


def test_with_the_action_as_input_s_credits_an_action_no_observation_shows():
    """The delayed-cue episodes with the cue hidden: the observation is the step's one-hot only,
    and the action at step 1 (0 or 1) sets the reward ±1 paid at step 5. With
    ``inputs="observation_action"`` s separates the two actions at step 1 (the decisive pair)
    and the loss falls tenfold; a stage blind to the action (the default input) cannot do
    either, which is why Delayed Catch needs the option. With ``inputs="agent_state"`` the
    embedding reads a recurrent state that, as a core that saw the action would, holds the
    step-1 action (±1) from step 2 on beside the step's one-hot: the s summed over the steps
    that hold it separates the two actions, and the loss falls tenfold too."""
    rng = np.random.default_rng(0)
    T, N, updates = 6, 16, 120
    steps = (updates + 1) * T
    phase = np.arange(steps) % EPISODE
    action = rng.integers(0, 2, (steps, N))
    decisive = action[np.arange(steps) - phase + CUE_STEP - 1]  # the episode's step-1 action
    obs = np.zeros((steps, N, EPISODE))
    obs[np.arange(steps), :, phase] = 1.0
    reward = np.where(phase == EPISODE - 1, 1.0, 0.0)[:, None] * (2.0 * decisive - 1.0)
    done = np.broadcast_to((phase == EPISODE - 1)[:, None], (steps, N))
    held = np.where(phase >= CUE_STEP, 1.0, 0.0)[:, None] * (2.0 * decisive - 1.0)
    agent_state = np.concatenate([obs, held[..., None]], axis=-1)
    windows = [_window(obs[w * T:(w + 1) * T], reward[w * T:(w + 1) * T],
                       done[w * T:(w + 1) * T], action=action[w * T:(w + 1) * T]).replace(
                           agent_state=jnp.asarray(agent_state[w * T:(w + 1) * T], jnp.float32))
               for w in range(updates + 1)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *windows[:updates])
    schedule = FitSchedule(steps=4)
    results = {}
    for inputs in ("observation_action", "observation", "agent_state"):
        stage = make_redistributor("synthetic_returns", capacity=8, memory_size=16,
                                   hidden_layers=(32,), embedding_layers=(32,), inputs=inputs)
        params = stage.init(jax.random.key(0), windows[0])
        state = init_fit_state(params, windows[0], schedule).replace(
            memory=stage.init_memory(windows[0]))

        def update(state, window, stage=stage):
            state, _ = fit(stage.loss, state, window, None, 1e-2, jnp.inf, jax.random.key(0),
                           schedule, sample=lambda k: stage.sample(state.memory, k))
            _, memory, metrics = stage.redistribute(state.params, window, jax.random.key(0),
                                                    state.memory)
            return state.replace(memory=memory), metrics["prediction_loss"]

        state, losses = jax.jit(lambda s, w, update=update: jax.lax.scan(update, s, w))(
            state, stacked)
        probe = windows[-1]
        x = embedding_input(probe.obs, probe.action, 2, inputs, 2, probe.agent_state)
        s, *_ = outputs(make_networks(16, (32,), (32,)), state.params, x, probe.done,
                        state.memory.embeddings, state.memory.count, 8)
        s, a = np.asarray(s), np.asarray(probe.action)
        losses = np.asarray(losses)
        if inputs == "agent_state":  # Σ s over the steps summed for the paid reward
            held = np.asarray(probe.agent_state)[:EPISODE - 1, :, -1]
            summed = (s[:EPISODE - 1] * (held != 0)).sum(0)
            results[inputs] = (summed[held[CUE_STEP] > 0].mean()
                               - summed[held[CUE_STEP] < 0].mean(),
                               losses[-10:].mean() / losses[:3].mean())
            continue
        at = np.asarray(probe.obs)[..., CUE_STEP - 1] > 0
        results[inputs] = (s[at & (a == 1)].mean() - s[at & (a == 0)].mean(),
                           losses[-10:].mean() / losses[:3].mean())
    spread, fall = results["observation_action"]
    assert spread > 0.5 and fall < 0.1, results
    blind_spread, blind_fall = results["observation"]
    assert abs(blind_spread) < 0.1 and blind_fall > 0.5, results
    core_spread, core_fall = results["agent_state"]
    assert core_spread > 0.5 and core_fall < 0.1, results


# ------------------------------------------------------------------------------------------
# Options and the engine
# ------------------------------------------------------------------------------------------


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        make_redistributor("synthetic_returns", capacity=0)
    with pytest.raises(ValueError, match="memory_size must be a positive integer"):
        make_redistributor("synthetic_returns", memory_size=0)
    with pytest.raises(ValueError, match="inputs must be one of observation, "
                                         "observation_action, agent_state"):
        make_redistributor("synthetic_returns", inputs="core")
    with pytest.raises(ValueError, match="hidden_layers must be integers separated by commas"):
        make_redistributor("synthetic_returns", hidden_layers="a,b")
    stage = make_redistributor("synthetic_returns", hidden_layers="4,4", embedding_layers="")
    assert stage.name == "synthetic_returns"


def test_trains_from_the_command_line_with_a_recurrent_policy(tmp_path):
    from jaxcredit import cli, runlog

    out = tmp_path / "run"
    argv = ["train", "--algo", "a2c", "--redistribute", "synthetic_returns", "--env",
            "MemoryKeyToDoor", "--env-option", "preset=sr", "--policy", "gru", "--num-envs",
            "2", "--num-steps", "8", "--num-minibatches", "1", "--total-timesteps", "32",
            "--hidden-sizes", "8", "8", "--eval-every", "0", "--out", str(out),
            "--no-progress", "--redistribute-option", "capacity=16",
            "--redistribute-option", "memory_size=8", "--redistribute-option", "hidden_layers=8",
            "--redistribute-option", "embedding_layers=8"]
    assert cli.main(argv) == 0
    columns = runlog.read_metrics(out)
    assert np.isfinite(columns["redistribute/prediction_loss"]).all()
    assert len(columns["update"]) == 2

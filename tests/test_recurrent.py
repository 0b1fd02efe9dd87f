"""Recurrent policies in the on-policy engine: the memory the agent acts with is the one every
later computation re-runs (values, minibatches), it is zeroed at episode starts, whole sequences
make the minibatches, and a recurrent run resumes and sweeps like any other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import runlog
from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.agents.agent_network import first_steps, make_agent_network
from jaxcredit.agents.host_loop import RunSpec, run_experiment
from jaxcredit.agents.optimise import _minibatches
from jaxcredit.policies import ActionDistribution
from conftest import train_gru_from_cli

# TMaze with a 3-cell corridor: episodes of 4 steps, so 10-step windows cut episodes anywhere.
BASE = dict(algo="ppo", env="TMaze", env_options=(("corridor_length", 3),), num_envs=4,
            num_steps=10, hidden_sizes=(16, 8), eval_every=0, num_minibatches=2)


def engine(policy="gru", updates=3, **overrides):
    return make_engine(TrainConfig.from_flat(
        **{**BASE, "policy": policy, "total_timesteps": 40 * updates, **overrides}))


def test_first_steps_marks_the_window_start_and_every_step_after_an_end():
    done = jnp.array([[0, 1], [1, 0], [0, 0]], bool)
    np.testing.assert_array_equal(first_steps(jnp.array([True, False]), done),
                                  [[1, 0], [0, 1], [1, 0]])


@pytest.mark.parametrize("policy", ["gru", "lru"])  # the LSTM shares the GRU's scanned cell
def test_rerunning_a_window_gives_the_policy_and_values_the_agent_acted_with(policy):
    eng = engine(policy)
    state = jax.jit(eng.init)(jax.random.key(0))
    state, _ = jax.jit(eng.update_step)(state, Hparams())  # a window that starts mid-episode
    window = jax.jit(eng.collect)(state, Hparams(), jax.random.key(1))
    traj = window.trajectory
    assert not bool(window.first[0].all()) and bool(traj.done.any())
    logits, value = jax.jit(eng.agent_network.outputs)(state.agent.params, window.memory,
                                                       traj.obs, window.first)
    np.testing.assert_allclose(logits, traj.logits, atol=1e-5)
    np.testing.assert_allclose(value, traj.value, atol=1e-6)
    # V(s'_{t+1}) continues the episode from the memory after step t: within an episode it is
    # the next step's V(s_{t+1}); after an end it is not (the next step starts afresh).
    inside = ~np.asarray(traj.done[:-1])
    np.testing.assert_allclose(np.asarray(traj.next_value[:-1])[inside],
                               np.asarray(traj.value[1:])[inside], atol=1e-6)
    assert traj.agent_state is None  # recorded only where a stage reads it


def test_the_agent_state_a_stage_reads_is_the_memory_the_agent_acted_with():
    """With a stage that reads ``Trajectory.agent_state`` (Synthetic Returns on the agent's
    core), the engine records at each step the GRU's output after reading that step's
    observation, which for a GRU is its memory: the memory ``act`` carries, step by step, from
    the window's starting memory, resets included."""
    eng = engine(redistribute="synthetic_returns", redistribute_options=(
        ("inputs", "agent_state"), ("capacity", 8), ("memory_size", 4), ("hidden_layers", "4"),
        ("embedding_layers", "4")))
    state = jax.jit(eng.init)(jax.random.key(0))
    state, _ = jax.jit(eng.update_step)(state, Hparams())  # a window that starts mid-episode
    window = jax.jit(eng.collect)(state, Hparams(), jax.random.key(1))
    traj = window.trajectory
    assert traj.agent_state.shape == (10, 4, 16) and bool(traj.done.any())
    memory, expected = window.memory, []
    for t in range(10):
        memory, _ = eng.agent_network.act(state.agent.params, memory, traj.obs[t],
                                          window.first[t])
        expected.append(memory)
    np.testing.assert_allclose(traj.agent_state, jnp.stack(expected), atol=1e-5)


def test_rudder_on_the_agent_state_stores_and_fits_the_states_the_agent_had():
    """RUDDER with ``inputs="agent_state"`` in the engine: the lessons buffer holds the agent's
    recorded states (16 wide, the GRU's width) of whole episodes, and the return model is
    fitted on them (its parameters move) with finite metrics."""
    eng = engine(updates=4, redistribute="rudder", redistribute_options=(
        ("inputs", "agent_state"), ("features", 8), ("lessons", 8), ("batch_episodes", 4)))
    state = jax.jit(eng.init)(jax.random.key(0))
    before = state.credit.redistributor.params
    update = jax.jit(eng.update_step)
    for _ in range(4):
        state, metrics = update(state, Hparams())
    assert all(np.isfinite(float(v)) for k, v in metrics.items()
               if k.startswith("redistribute/") and "prediction_error" not in k), metrics
    lessons = state.credit.redistributor.memory.episodes
    assert lessons.lessons.obs.shape[-1] == 16
    filled = np.isfinite(np.asarray(lessons.priority))
    assert filled.sum() >= 4
    stored = np.asarray(lessons.lessons.obs)[filled][:, 0]  # each episode's first state
    assert np.abs(stored).max() > 0  # a GRU's output, not the 2-number observation
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), state.credit.redistributor.params,
                         before)
    assert max(jax.tree.leaves(moved)) > 0


@pytest.mark.parametrize("policy", ["gru", "lstm", "lru"])
def test_the_memory_is_zeroed_where_an_episode_starts(policy):
    net = make_agent_network(policy, ActionDistribution("categorical", 4), (8, 8), "relu", 1, 0.0)
    params = net.init(jax.random.key(0), jnp.zeros((2, 2)))
    obs = jax.random.uniform(jax.random.key(1), (5, 2, 2))
    first = jnp.zeros((5, 2), bool).at[3].set(True)
    outputs = jax.jit(net.outputs)  # one program per window length, not one per operation
    full, _ = outputs(params, net.initial_memory(2), obs, first)
    # From step 3 on, the outputs are those of a fresh episode started there...
    start = jnp.zeros((2, 2), bool).at[0].set(True)
    fresh, _ = outputs(params, net.initial_memory(2), obs[3:], start)
    np.testing.assert_allclose(full[3:], fresh, atol=1e-6)
    # ... and before it they depend on the history (the network has a memory at all).
    later, _ = outputs(params, net.initial_memory(2), obs[1:3], start)
    assert not np.allclose(full[2], later[1], atol=1e-4)


@pytest.mark.parametrize("policy", ["gru", "lstm"])
def test_an_update_at_lr_0_replays_each_sequence_from_the_memory_it_acted_with(policy):
    """At lr 0 PPO's ratio π_new/π_old is 1 on every step only if each minibatch re-runs its
    sequences from the memory the window started with (not zeros, not the memory after the
    window) through the same resets, time-outs included; and that memory is the running
    episode's, not zeroed between windows. CartPole with 5-step episodes and 7-step windows:
    the window starts mid-episode and holds time-outs."""
    eng = engine(policy, env="CartPole-v1", env_options=(("max_steps_in_episode", 5),),
                 num_steps=7, total_timesteps=4 * 7 * 4)
    state = jax.jit(eng.init)(jax.random.key(0))
    update = jax.jit(eng.update_step)
    for _ in range(3):
        state, _ = update(state, Hparams(lr=3e-2))
    inside = ~np.asarray(state.runner.first)
    assert inside.any()  # the next window starts mid-episode...
    for leaf in jax.tree.leaves(state.runner.memory):  # ... with that episode's memory
        assert float(np.abs(np.asarray(leaf)[inside]).max()) > 1e-3
    _, metrics = update(state, Hparams(lr=0.0))
    assert abs(float(metrics["approx_kl"])) < 1e-6 and float(metrics["clip_frac"]) == 0.0


def test_recurrent_minibatches_are_whole_environments():
    eng = engine()
    state = jax.jit(eng.init)(jax.random.key(0))
    window = jax.jit(eng.collect)(state, Hparams(), jax.random.key(1))
    traj, memory = window.trajectory, jnp.arange(4.0)[:, None] * jnp.ones((4, 16))
    column = traj.replace(reward=jnp.broadcast_to(jnp.arange(4.0), (10, 4)))
    (per_step, _), mb_memory, mb_first = _minibatches(
        eng.agent_network, jax.random.key(2), ((column, None), memory, window.first), 2)
    assert per_step.reward.shape == (2, 10, 2) and mb_first.shape == (2, 10, 2)
    envs = np.asarray(per_step.reward[:, 0])  # the environment of each sequence
    assert sorted(envs.ravel().tolist()) == [0, 1, 2, 3]
    np.testing.assert_array_equal(per_step.reward, np.broadcast_to(envs[:, None], (2, 10, 2)))
    np.testing.assert_array_equal(mb_memory[..., 0], envs)  # each with its starting memory
    np.testing.assert_array_equal(
        mb_first, np.asarray(window.first)[:, envs.astype(int)].transpose(1, 0, 2))


def test_recurrent_ppo_learns_to_remember_the_cue():
    """Passive TMaze with a 2-cell corridor: the cue decides the final turn. A GRU agent turns
    the right way; the best memoryless policy is right half the time."""
    config = TrainConfig.from_flat(algo="ppo", env="TMaze", env_options=(("corridor_length", 2),),
                                   policy="gru", num_envs=8, num_steps=24, hidden_sizes=(32, 32),
                                   total_timesteps=8 * 24 * 60, eval_every=60, eval_episodes=64)
    _, metrics = jax.jit(make_engine(config).train)(jax.random.key(0), Hparams(lr=3e-3))
    assert float(metrics["eval/success_rate_greedy"][-1]) >= 0.9


def test_recurrent_run_resumes_bit_for_bit(tmp_path):
    # Two chunks of 3 updates: the checkpoint falls 30 steps in, half-way through a 4-step
    # episode, so a resume that lost the memory would differ (after 20 steps, at an episode
    # start, it would not).
    config = TrainConfig.from_flat(**{**BASE, "policy": "gru", "total_timesteps": 40 * 6})
    spec = RunSpec(settings=({"lr": 1e-3},), num_seeds=2, seed=0, num_chunks=2)
    run_experiment(config, spec, tmp_path / "full", progress=False, plot=False)
    run_experiment(config, spec, tmp_path / "part", progress=False, plot=False, max_chunks=1)
    run_experiment(None, None, tmp_path / "part", resume=True, progress=False, plot=False)
    full, part = runlog.read_metrics(tmp_path / "full"), runlog.read_metrics(tmp_path / "part")
    assert len(full["update"]) == 2 * 6
    for name, column in full.items():
        np.testing.assert_array_equal(part[name], column, err_msg=name)


@pytest.mark.parametrize("overrides, message", [
    (dict(estimator_options=(("model", "oracle"),), estimator="hca_return",
          env="DelayedEffect", env_options=(("n", 3),)), "no policy table"),
    (dict(algo="dqn", num_minibatches=None, estimator="double_q", num_steps=1),
     "feed-forward Q-network"),
    (dict(meta_gradient=("lambda",)), "no sequence form"),
    (dict(num_minibatches=8), "must divide num_envs=4"),
    (dict(policy="transformer"), "unknown policy"),
    (dict(policy="mlp", redistribute="synthetic_returns",
          redistribute_options=(("inputs", "agent_state"),)), "reads the agent's recurrent state"),
    (dict(policy="mlp", estimator="cca", estimator_options=(("agent_state", "agent"),)),
     "reads the agent's recurrent state"),
    (dict(redistribute="tvt"), "use --policy rma"),
    (dict(policy="mlp", redistribute="rudder", redistribute_options=(("inputs", "agent_state"),)),
     "reads the agent's recurrent state"),
    (dict(hidden_sizes=()), "needs hidden_sizes: the first is the width of its embedding"),
    (dict(policy="rma", hidden_sizes=()), "--policy rma needs hidden_sizes"),
])
def test_recurrent_misconfigurations_are_one_line_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_engine(TrainConfig.from_flat(**{**BASE, "policy": "gru", "total_timesteps": 40,
                                             **overrides}))


# The three-phase tasks and DelayedCatch: tests/test_memory_tasks.py (the same check, run on the
# other test worker).
MEMORY_TASKS = (
    ("TMaze", ("--env-option", "corridor_length=3", "--env-option", "active=1")),
    ("MemoryChain-bsuite", ()),
    ("UmbrellaChain-bsuite", ()),
    ("XMiniGrid", ("--env-option", "env_id=MiniGrid-MemoryS8")),
)


def test_every_memory_task_trains_with_a_recurrent_policy_from_the_command_line(tmp_path):
    for env, options in MEMORY_TASKS:
        columns = train_gru_from_cli(tmp_path / env, env, options)
        assert np.isfinite(columns["loss"]).all() and len(columns["update"]) == 2, env

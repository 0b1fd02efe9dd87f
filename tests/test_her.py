"""HER as the relabel stage: which goal, which reward, episode boundaries, time-outs, the
relabelled fraction, and the one-line refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents import Hparams, TrainConfig, make_engine
from jaxcredit.envs import make as make_env
from jaxcredit.relabel import make_relabeller
from jaxcredit.relabel.her import apply_goals, choose_goal_steps, episode_ids, relabel_goals
from jaxcredit.types import Trajectory

ENV, _ = make_env("BitFlip", n=2)


def window(bits, goal, done_at, terminated_at=()):
    """A one-column BitFlip window: ``bits[t]`` is s_t (len S + 1 states), ``goal`` the desired
    goal of every step, episode ends after the steps in ``done_at`` (truncations unless listed in
    ``terminated_at``). Episodes that end are followed by the next state as given (the reset)."""
    S = len(bits) - 1
    obs = np.array([b + goal for b in bits[:-1]], np.float32)[:, None]
    next_obs = np.array([b + goal for b in bits[1:]], np.float32)[:, None]
    terminated = np.zeros((S, 1), bool)
    truncated = np.zeros((S, 1), bool)
    for t in done_at:
        (terminated if t in terminated_at else truncated)[t, 0] = True
    reward = np.where(np.all(next_obs[..., :2] == next_obs[..., 2:], -1), 0.0, -1.0)
    zeros = np.zeros((S, 1), np.float32)
    return Trajectory(obs=jnp.asarray(obs), action=jnp.zeros((S, 1), jnp.int32),
                      reward=jnp.asarray(reward, jnp.float32), terminated=jnp.asarray(terminated),
                      truncated=jnp.asarray(truncated), value=zeros, next_value=zeros,
                      log_prob=zeros, logits=zeros[..., None], next_obs=jnp.asarray(next_obs))


def test_episode_ids_count_the_ends_before_each_step():
    done = jnp.array([[0], [1], [0], [1], [0]], bool)
    np.testing.assert_array_equal(episode_ids(done)[:, 0], [0, 0, 1, 1, 2])


def test_future_goals_stay_in_the_anchors_episode():
    # Steps 0-1 are one episode (time-out after step 1), steps 2-3 the next.
    done = jnp.array([[0], [1], [0], [0]], bool)
    rows = jax.vmap(lambda k: choose_goal_steps(k, done, 0, "future"))(
        jax.random.split(jax.random.key(0), 400))[:, 0]
    assert set(np.unique(rows).tolist()) == {0, 1}
    assert abs(float(np.mean(rows == 1)) - 0.5) < 0.1  # uniform over the two
    # From anchor 2 only the second episode's steps, never the first's.
    rows = jax.vmap(lambda k: choose_goal_steps(k, done, 2, "future"))(
        jax.random.split(jax.random.key(1), 400))[:, 0]
    assert set(np.unique(rows).tolist()) == {2, 3}


def test_final_and_episode_strategies():
    done = jnp.array([[0], [0], [1], [0], [1]], bool)
    assert int(choose_goal_steps(jax.random.key(0), done, 0, "final")[0]) == 2
    assert int(choose_goal_steps(jax.random.key(0), done, 1, "final")[0]) == 2
    assert int(choose_goal_steps(jax.random.key(0), done, 3, "final")[0]) == 4
    rows = jax.vmap(lambda k: choose_goal_steps(k, done, 1, "episode"))(
        jax.random.split(jax.random.key(2), 600))[:, 0]
    assert set(np.unique(rows).tolist()) == {0, 1, 2}  # before and after the anchor, same episode
    rows = jax.vmap(lambda k: choose_goal_steps(k, done, 3, "episode"))(
        jax.random.split(jax.random.key(3), 200))[:, 0]
    assert set(np.unique(rows).tolist()) == {3, 4}


def test_relabelled_goal_reward_and_termination_by_hand():
    # s0 = 00 -> 01 -> 11 (time-out after step 1); goal 10 is never reached.
    traj = window([[0, 0], [0, 1], [1, 1], [0, 0]], [1, 0], done_at=(1,))
    out, relabelled = relabel_goals(ENV, traj, jax.random.key(0), 0, "final", k=10 ** 6)
    assert bool(relabelled[0])
    # final: the goal achieved at the episode's end, 11.
    np.testing.assert_array_equal(np.asarray(out.obs[:, 0, 2:]), [[1, 1]] * 3)
    np.testing.assert_array_equal(np.asarray(out.next_obs[:, 0, 2:]), [[1, 1]] * 3)
    np.testing.assert_array_equal(np.asarray(out.obs[:, 0, :2]), np.asarray(traj.obs[:, 0, :2]))
    # Rewards under g' = 11: step 0 reaches 01 (-1), step 1 reaches 11 (0, a success).
    np.testing.assert_array_equal(np.asarray(out.reward[:2, 0]), [-1.0, 0.0])
    np.testing.assert_array_equal(np.asarray(out.terminated[:2, 0]), [False, True])
    np.testing.assert_array_equal(np.asarray(out.truncated[:2, 0]), [False, False])


def test_an_episode_that_ended_on_its_own_goal_is_a_time_out_for_another_goal():
    # s0 = 00 -> 01 -> 11, the original goal 11 is reached at step 1 (terminated).
    traj = window([[0, 0], [0, 1], [1, 1], [1, 0]], [1, 1], done_at=(1,), terminated_at=(1,))
    np.testing.assert_array_equal(np.asarray(traj.reward[:2, 0]), [-1.0, 0.0])
    # Find a key whose future goal is the one achieved at step 0 (01).
    for seed in range(50):
        out, _ = relabel_goals(ENV, traj, jax.random.key(seed), 0, "future", k=10 ** 6)
        if np.array_equal(np.asarray(out.obs[0, 0, 2:]), [0, 1]):
            break
    else:
        pytest.fail("no key chose the goal of step 0")
    np.testing.assert_array_equal(np.asarray(out.reward[:2, 0]), [0.0, -1.0])
    np.testing.assert_array_equal(np.asarray(out.terminated[:2, 0]), [True, False])
    # Step 1 still ends the stored episode, but for goal 01 only by the cut: a time-out.
    np.testing.assert_array_equal(np.asarray(out.truncated[:2, 0]), [False, True])


def test_relabelled_fraction_is_k_over_k_plus_one():
    env, _ = make_env("BitFlip", n=4)
    key = jax.random.key(0)
    S, B = 5, 20_000
    bits = jax.random.bernoulli(key, 0.5, (S, B, 8)).astype(jnp.float32)
    zeros = jnp.zeros((S, B))
    traj = Trajectory(obs=bits, action=zeros.astype(jnp.int32), reward=zeros - 1.0,
                      terminated=zeros.astype(bool), truncated=zeros.astype(bool), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=zeros[..., None],
                      next_obs=jnp.roll(bits, -1, 0))
    for k, expected in ((1, 0.5), (4, 0.8), (8, 8 / 9)):
        _, relabelled = relabel_goals(env, traj, jax.random.key(k), 0, "future", k)
        assert abs(float(relabelled.mean()) - expected) < 0.01


def test_compute_reward_on_the_own_goal_is_the_stored_reward():
    # What the replay holds after a few updates: compute_reward(achieved(s'), desired(s))
    # reproduces every stored reward, so relabelling with the own goal changes nothing.
    env, _ = make_env("BitFlip", n=3)
    engine = make_engine(TrainConfig.from_flat(algo="dqn", env="BitFlip", env_options=(("n", 3),),
                                               num_envs=4, num_steps=12, total_timesteps=48 * 3,
                                               buffer_size=400, batch_size=4))
    state = jax.jit(engine.init)(jax.random.key(0))
    step = jax.jit(engine.update_step)
    for _ in range(3):
        state, _ = step(state, Hparams.create())
    exp = state.replay.experience
    filled = int(state.replay.current_index)
    assert filled == 36
    recomputed = env.compute_reward(env.achieved_goal(exp.next_obs), env.desired_goal(exp.obs))
    np.testing.assert_array_equal(np.asarray(recomputed[:, :filled]),
                                  np.asarray(exp.reward[:, :filled]))
    assert bool(jnp.any(exp.reward[:, :filled] == 0.0))  # some episodes reached their goal


def test_bad_her_input_is_a_one_line_error():
    with pytest.raises(ValueError, match="goal-conditioned environment") as error:
        make_engine(TrainConfig(algo="dqn", env="CartPole-v1", relabel="her"))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="k >= 1"):
        make_engine(TrainConfig.from_flat(algo="dqn", env="BitFlip", relabel="her",
                                          relabel_options=(("k", 0),)))
    with pytest.raises(ValueError, match="unknown HER strategy"):
        make_engine(TrainConfig.from_flat(algo="dqn", env="BitFlip", relabel="her",
                                          relabel_options=(("strategy", "later"),)))
    with pytest.raises(ValueError, match="off-policy learner"):
        make_engine(TrainConfig(algo="ppo", env="BitFlip", relabel="her"))
    with pytest.raises(ValueError, match="smaller than one batch"):
        TrainConfig.from_flat(algo="dqn", buffer_size=64, batch_size=128).resolved()


def test_factory_gets_env_and_horizon():
    relabeller = make_relabeller("her", env=ENV, horizon=7, strategy="episode")
    assert (relabeller.past, relabeller.future) == (6, 6)
    relabeller = make_relabeller("her", env=ENV, horizon=7, strategy="random")
    assert (relabeller.past, relabeller.future) == (0, 0)


def test_relabelling_only_the_trained_rows_equals_relabelling_the_window():
    env, _ = make_env("BitFlip", n=3)
    relabeller = make_relabeller("her", env=env, horizon=3, strategy="episode", k=4)
    key = jax.random.key(0)
    S, B = 5, 64
    bits = jax.random.bernoulli(key, 0.5, (S + 1, B, 6)).astype(jnp.float32)
    done = jax.random.bernoulli(jax.random.key(1), 0.3, (S, B))
    zeros = jnp.zeros((S, B))
    traj = Trajectory(obs=bits[:-1], action=zeros.astype(jnp.int32), reward=zeros - 1.0,
                      terminated=done, truncated=zeros.astype(bool), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=zeros[..., None],
                      next_obs=bits[1:])
    whole = relabeller.relabel(traj, jax.random.key(2))
    a = relabeller.past
    rows = jax.tree.map(lambda x: x[a:a + 2], traj)
    fast, relabelled = relabeller.relabel_rows(rows, traj.done,
                                               env.achieved_goal(traj.next_obs),
                                               jax.random.key(2))
    for name in ("obs", "next_obs", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(np.asarray(getattr(fast, name)),
                                      np.asarray(getattr(whole, name))[a:a + 2])
    assert 0.6 < float(relabelled.mean()) < 0.95


def test_the_engine_trains_on_the_relabelled_rows_it_says():
    # `episode` (anchor = horizon − 1) with 2-step targets: engine.learn's loss equals the loss
    # rebuilt from the whole sampled window, relabelled, cut to rows anchor .. anchor + 1.
    from jaxcredit.estimators import q_targets

    config = TrainConfig.from_flat(algo="dqn", env="BitFlip", env_options=(("n", 3),),
                                   relabel="her",
                                   relabel_options=(("k", 4), ("strategy", "episode")), n_step=2,
                                   num_envs=4, num_steps=3, total_timesteps=4 * 3 * 10,
                                   buffer_size=240, batch_size=16, learning_starts=0,
                                   hidden_sizes=(8,),
                                   eval_every=0)  # no evaluation: a smaller program to compile
    engine = make_engine(config)
    assert engine.anchor == 2 and engine.replay.window == 2 + max(2, 1 + 2)
    hp = Hparams.create()
    state = jax.jit(engine.init)(jax.random.key(0))
    state, _ = jax.jit(lambda s: engine.run(s, hp, 4))(state)
    key = jax.random.key(5)
    _, metrics = jax.jit(engine.learn)(state, hp, key, 1e-3)
    sample_key, relabel_key = jax.random.split(key)
    window = engine.replay.sample(state.replay, sample_key)
    rows = jax.tree.map(lambda x: x[2:4], engine.relabeller.relabel(window, relabel_key))
    apply = engine.network.apply
    bootstrap = q_targets.double_q_learning_bootstrap(apply(state.target_params, rows.next_obs),
                                                       apply(state.agent.params, rows.next_obs))
    target = q_targets.n_step_q_targets(rows.reward, rows.terminated, rows.truncated, bootstrap,
                                         hp.gamma, 2)[0]
    q = jnp.take_along_axis(apply(state.agent.params, rows.obs[0]), rows.action[0][:, None],
                            axis=-1)[:, 0]
    np.testing.assert_allclose(float(metrics["loss"]), float(jnp.mean((q - target) ** 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(float(metrics["reward_mean"]), float(rows.reward[0].mean()))
    assert 0.5 < float(metrics["relabel/fraction"]) <= 1.0


def test_random_goals_come_from_any_column():
    # Two columns whose achieved goals differ: `random` draws from both, `future` only its own.
    traj = window([[0, 0], [0, 1], [1, 1], [1, 0]], [0, 0], done_at=())
    other = window([[1, 0], [1, 0], [1, 0], [1, 0]], [0, 0], done_at=())
    both = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=1), traj, other)
    goals = {name: set() for name in ("random", "future")}
    for seed in range(60):
        for strategy in goals:
            out, _ = relabel_goals(ENV, both, jax.random.key(seed), 0, strategy, k=10 ** 6)
            goals[strategy].add(tuple(np.asarray(out.obs[0, 0, 2:]).astype(int).tolist()))
    assert goals["future"] == {(0, 1), (1, 1), (1, 0)}  # column 0's own next states
    assert (1, 0) in goals["random"] and len(goals["random"]) == 3


def test_a_termination_that_is_not_a_success_stays_terminal():
    # A goal task that can also end in a pit: the stored termination at step 1 did not reach
    # the original goal, so it is still a termination under any relabelled goal.
    traj = window([[0, 0], [0, 1], [1, 1], [0, 0]], [1, 0], done_at=(1,), terminated_at=(1,))
    out, _ = relabel_goals(ENV, traj, jax.random.key(0), 0, "final", k=10 ** 6)
    np.testing.assert_array_equal(np.asarray(out.terminated[:2, 0]), [False, True])
    np.testing.assert_array_equal(np.asarray(out.truncated[:2, 0]), [False, False])


def test_a_pit_stays_terminal_for_a_goal_reached_elsewhere_or_never():
    # The check above relabels to 11, reached on the pit step itself, so the new goal's success
    # alone terminates that step. Here neither goal is reached on the pit step: only the stored
    # termination can keep it terminal. s0 = 00 -> 01 -> 11 falls into a pit after step 1
    # (terminated; the original goal 10 is never reached). Column 0 is relabelled to 01,
    # reached one step before the pit; column 1 to 00, never reached in the episode.
    pit = window([[0, 0], [0, 1], [1, 1], [0, 0]], [1, 0], done_at=(1,), terminated_at=(1,))
    traj = jax.tree.map(lambda x: jnp.concatenate([x, x], axis=1), pit)
    goal = jnp.array([[0, 1], [0, 0]], jnp.float32)
    out = apply_goals(ENV, traj, ENV.achieved_goal(traj.next_obs), goal,
                      jnp.array([True, True]))
    np.testing.assert_array_equal(np.asarray(out.obs[:2, :, 2:]), [[[0, 1], [0, 0]]] * 2)
    # Rewards on steps 0, 1 (achieved 01, then 11): goal 01 is met at step 0 only, 00 never.
    np.testing.assert_array_equal(np.asarray(out.reward[:2]), [[0.0, -1.0], [-1.0, -1.0]])
    # Step 0 terminates for goal 01 by its success; step 1 is the pit's termination for both
    # goals: not a success of 01 or 00, not of the original 10, and not a time-out.
    np.testing.assert_array_equal(np.asarray(out.terminated[:2]), [[True, False], [True, True]])
    np.testing.assert_array_equal(np.asarray(out.truncated[:2]), [[False, False], [False, False]])


def test_her_refuses_a_reward_changing_wrapper():
    with pytest.raises(ValueError, match="changes its rewards"):
        make_engine(TrainConfig(algo="dqn", env="DelayedReward-BitFlip", relabel="her"))

"""The Brax adapter (``brax/<task>``): gymnax's six-value step over Brax's tasks under jit and vmap,
termination (Brax's done) against truncation (the time limit), the auto-reset with the final
observation, clipped actions, and DelayedReward's episode sums. One compiled program on the
cheapest task and backend (inverted_pendulum, spring): Brax compiles slowly on a CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs, policies
from jaxcredit.envs import brax_env

pytest.importorskip("brax")


def test_every_brax_task_is_registered_and_make_builds_nothing():
    names = [name for name in envs.registered() if name.startswith("brax/")]
    assert names == [f"brax/{task}" for task in brax_env.TASKS]
    env, params = envs.make("brax/hopper", backend="generalized", max_steps_in_episode=50)
    assert isinstance(env, brax_env.BraxEnv) and params.max_steps_in_episode == 50
    assert "brax_env" not in vars(env)  # built on first use, not by make
    assert envs.make("brax/ant")[1].max_steps_in_episode == 1000  # brax.envs.create's default
    with pytest.raises(ValueError, match="unknown Brax backend 'fast'"):
        envs.make("brax/ant", backend="fast")
    with pytest.raises(ValueError, match="Did you mean: brax/hopper"):
        envs.make("brax/hoper")
    with pytest.raises(ValueError, match="unknown Brax task 'nope'"):
        brax_env.BraxEnv("nope").brax_env


@pytest.mark.parametrize("task, obs_size, action_size, backend", [
    ("hopper", 11, 3, "spring"), ("walker2d", 17, 6, "spring"), ("ant", 27, 8, "spring"),
    ("swimmer", 8, 2, "generalized"),  # Brax has no spring swimmer: the task's own backend
])
def test_spaces_and_the_default_backend(task, obs_size, action_size, backend):
    env, params = envs.make(f"brax/{task}")
    assert env.backend == backend
    space = env.action_space(params)
    assert space.shape == (action_size,) and env.num_actions == action_size
    assert float(space.low) == -1.0 and float(space.high) == 1.0
    assert env.observation_space(params).shape == (obs_size,)
    distribution = policies.for_space(space)
    assert distribution.name == "gaussian" and distribution.low == (-1.0,) * action_size
    if task == "swimmer":
        with pytest.raises(ValueError, match="Unsupported backend: spring"):
            envs.make("brax/swimmer", backend="spring")[0].obs_size
    if task == "hopper":  # brax_options go to Brax's task constructor
        env, _ = envs.make("brax/hopper", brax_options={"terminate_when_unhealthy": False})
        assert env.brax_env._terminate_when_unhealthy is False


def test_termination_truncation_auto_reset_and_delayed_reward_under_jit_and_vmap():
    """inverted_pendulum pays 1 a step and terminates once the pole leans past 0.2 rad: a constant
    push of ±1 tips it within the 12-step limit, no push lets the limit truncate the episode."""
    limit, steps = 12, 40
    env, params = envs.make("DelayedReward-brax/inverted_pendulum", max_steps_in_episode=limit)
    push = jnp.array([-1.0, 0.0, 1.0, 0.0])
    actions = jnp.concatenate([push, 5.0 * push])  # the second half clipped back to the first
    keys = jax.random.split(jax.random.key(0), 4)
    keys = jnp.concatenate([keys, keys])

    def run(key, action):
        obs, state = env.reset(key, params)
        brax_obs = env.brax_env.reset(jax.random.key_data(key)).obs

        def body(carry, k):
            obs, state = carry
            obs, state, reward, terminated, truncated, info = env.step(k, state, action[None],
                                                                       params)
            return (obs, state), (obs, reward, info["undelayed_reward"], terminated, truncated,
                                  info["final_observation"])

        return obs, brax_obs, jax.lax.scan(body, (obs, state), jax.random.split(key, steps))[1]

    first, brax_first, trajectory = jax.jit(jax.vmap(run))(keys, actions)
    obs, delayed, undelayed, terminated, truncated, final = map(np.asarray, trajectory)
    np.testing.assert_array_equal(first, brax_first)  # the adapter's reset is Brax's
    assert obs.shape == final.shape == (8, steps, 4) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs[4:], obs[:4])  # actions clipped to [-1, 1]

    done = terminated | truncated
    assert not (terminated & truncated).any()
    assert terminated[[0, 2]].sum() >= 6 and not truncated[[0, 2]].any()
    assert truncated[[1, 3]].sum() == 2 * (steps // limit) and not terminated[[1, 3]].any()
    # Termination is Brax's own rule on the final observation; between ends it is the obs.
    np.testing.assert_array_equal(terminated, np.abs(final[..., 1]) > 0.2)
    np.testing.assert_array_equal(final[~done], obs[~done])
    # After an end the next episode starts afresh (Brax's reset: q, qd within ±0.01).
    assert (np.abs(obs[done]) <= 0.01).all() and (final[done] != obs[done]).any(-1).all()

    assert (undelayed == 1.0).all() and (delayed[~done] == 0).all()
    for row in range(8):
        ends = np.flatnonzero(done[row])
        lengths = np.diff(np.concatenate([[-1], ends]))
        np.testing.assert_array_equal(delayed[row, ends], lengths.astype(np.float32))
        assert (lengths[truncated[row, ends]] == limit).all()
        assert (lengths[terminated[row, ends]] < limit).all()

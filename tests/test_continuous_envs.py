"""gymnax's continuous-action tasks through jaxcredit's registry: Pendulum-v1 (ends only by
truncation, at 200 steps) and MountainCarContinuous-v0 (terminates at the goal), float actions
under jit and vmap, and DelayedReward on them: float actions passed through unchanged, the
undelayed reward kept, each episode's return paid whole at its last step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs, policies
from jaxcredit.envs import DelayedReward


def test_the_continuous_tasks_are_registered_with_box_actions():
    names = envs.registered()
    for name, bound in [("Pendulum-v1", 2.0), ("MountainCarContinuous-v0", 1.0)]:
        assert name in names
        env, params = envs.make(f"DelayedReward-{name}")
        assert isinstance(env, DelayedReward)
        space = env.action_space(params)  # the inner task's, through the wrapper
        assert space.shape == (1,) and float(space.low) == -bound and float(space.high) == bound
        distribution = policies.for_space(space)
        assert distribution.name == "gaussian" and (distribution.low, distribution.high) == (
            (-bound,), (bound,))
    assert envs.make("Pendulum-v1", max_steps_in_episode=50)[1].max_steps_in_episode == 50


def _uniform(key, obs, space):
    return jax.random.uniform(key, space.shape, minval=space.low, maxval=space.high)


def _pump(key, obs, space):
    """Push along the velocity: MountainCar's energy pumping reaches the goal in ~100-200 steps
    (return about 83 over 2000 episodes, every one at the goal)."""
    return jnp.where(obs[1] >= 0, 1.0, -1.0)[None] + 0.1 * jax.random.normal(key, (1,))


@pytest.mark.parametrize("name, policy, steps", [
    ("Pendulum-v1", _uniform, 450), ("MountainCarContinuous-v0", _pump, 500)])
def test_delayed_reward_on_float_actions_under_jit_and_vmap(name, policy, steps):
    inner, params = envs.make(name)
    env = DelayedReward(inner)
    space = inner.action_space(params)

    def run(key):
        obs, state = env.reset(key, params)
        inner_state = inner.reset(key, params)[1]

        def body(carry, k):
            obs, state, inner_state = carry
            k_action, k_step = jax.random.split(k)
            action = policy(k_action, obs, space).astype(jnp.float32)
            obs, state, delayed, terminated, truncated, info = env.step(k_step, state, action,
                                                                        params)
            inner_obs, inner_state, reward, *_ = inner.step(k_step, inner_state, action, params)
            return (obs, state, inner_state), (obs, inner_obs, delayed, info["undelayed_reward"],
                                               reward, terminated, truncated)

        carry = (obs, state, inner_state)
        return jax.lax.scan(body, carry, jax.random.split(key, steps))[1]

    out = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 8))
    obs, inner_obs, delayed, undelayed, reward, terminated, truncated = map(np.asarray, out)
    # The wrapper hands the float action to the task unchanged and keeps its reward.
    np.testing.assert_array_equal(obs, inner_obs)
    np.testing.assert_array_equal(undelayed, reward)
    assert delayed.dtype == np.float32
    done = terminated | truncated
    if name == "Pendulum-v1":
        assert not terminated.any()
        assert (np.flatnonzero(truncated[0]) == [199, 399]).all() and truncated.sum() == 16
    else:
        assert terminated.sum(1).min() >= 2  # every copy reaches the goal at least twice
    # Delayed: 0 before an episode's last step, then its whole return (the float32 running sum).
    assert (delayed[~done] == 0).all()
    for row in range(obs.shape[0]):
        total = np.float32(0.0)
        for t in range(steps):
            total = np.float32(total + undelayed[row, t])
            if done[row, t]:
                assert delayed[row, t] == total, (row, t)
                total = np.float32(0.0)

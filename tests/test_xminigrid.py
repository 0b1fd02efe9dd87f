"""The XLand-MiniGrid adapter: gymnax's six-value step over xminigrid's own, step for step the
same rewards and observations as xminigrid itself, its ends and time limit, and bad ids."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.envs import make

xminigrid = pytest.importorskip("xminigrid")


def test_the_adapter_replays_xminigrid_step_for_step():
    env, params = make("XMiniGrid", env_id="MiniGrid-MemoryS8")
    inner, inner_params = xminigrid.make("MiniGrid-MemoryS8")
    assert (env.num_actions, env.obs_size) == (6, 3 * 3 * 25)
    assert params.max_steps_in_episode == 5 * 8 ** 2
    key = jax.random.key(3)
    obs, state = env.reset(key, params)
    timestep = inner.reset(inner_params, key)
    actions = jax.random.randint(jax.random.key(4), (40,), 0, 6)
    step, inner_step = jax.jit(env.step_env), jax.jit(inner.step)
    for t, action in enumerate(actions):
        obs, state, reward, terminated, info = step(jax.random.key(t), state, action, params)
        timestep = inner_step(inner_params, timestep, action)
        window = np.asarray(timestep.observation)
        # One-hot (tile, colour) per cell of the 3 × 3 window, flattened.
        cells = np.asarray(obs).reshape(3, 3, 25)
        np.testing.assert_array_equal(cells[..., :13].argmax(-1), window[..., 0])
        np.testing.assert_array_equal(cells[..., 13:].argmax(-1), window[..., 1])
        assert cells.sum() == 18
        assert float(reward) == float(timestep.reward)
        assert bool(terminated) == bool(timestep.last() & (timestep.discount == 0))
        if bool(terminated):
            break


def test_episodes_end_on_an_object_and_success_is_the_matching_one():
    env, params = make("XMiniGrid")

    def run(key):
        obs, state = env.reset(key, params)

        def body(carry, k):
            obs, state = carry
            action = jax.random.randint(k, (), 0, env.num_actions)
            obs2, state, reward, terminated, truncated, info = env.step(k, state, action, params)
            return (obs2, state), (reward, terminated, truncated,
                                   env.episode_success(obs, info["final_observation"], reward))

        return jax.lax.scan(body, (obs, state), jax.random.split(key, 400))[1]

    reward, terminated, truncated, success = jax.tree.map(
        np.asarray, jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), 32)))
    assert terminated.sum() > 0 and truncated.sum() > 0
    # Reward only where an episode terminates on the matching object, and then in (0.1, 1].
    assert not (reward[~terminated] != 0).any()
    assert (success == (reward > 0)).all() and 0 < success.sum() < terminated.sum()
    assert (reward[success] > 0.1).all() and (reward[success] <= 1.0).all()


def test_the_time_limit_truncates():
    env, params = make("XMiniGrid", max_steps_in_episode=5)
    obs, state = env.reset(jax.random.key(0), params)
    turn = jnp.int32(1)  # turning in place never ends an episode
    for t in range(5):
        obs, state, reward, terminated, truncated, info = env.step(
            jax.random.key(t), state, turn, params)
        assert not bool(terminated) and bool(truncated) == (t == 4)
    assert int(state.time) == 0  # auto-reset after the cut


def test_only_minigrid_ids_are_accepted():
    with pytest.raises(ValueError, match="unknown xminigrid env_id 'XLand-MiniGrid-R1-9x9'"):
        make("XMiniGrid", env_id="XLand-MiniGrid-R1-9x9")

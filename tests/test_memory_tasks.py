"""Memory-vs-credit tasks: VisualMatch, MemoryKeyToDoor (three phases, TVT / CCA / SR presets),
DelayedCatch (Synthetic Returns), and gymnax's MemoryChain / UmbrellaChain through jaxcredit.

Episodes are walked by hand on small phase lengths with the expected rewards written out; the
draws at reset and the random-policy returns of docs/envs.md are checked on vmapped batches; every
task trains for two updates in the engine.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import train_gru_from_cli
from jaxcredit import envs
from jaxcredit.envs.delayed_catch import DelayedCatch
from jaxcredit.envs.memory_key_to_door import APPLE, DOOR, KEY, MemoryKeyToDoor
from jaxcredit.envs.visual_match import FIRST_COLOUR, GREY, VisualMatch

N, S, W, E = 0, 1, 2, 3
LEFT, STAY, RIGHT = 0, 1, 2


def _cells(*cells, size=5):
    mask = np.zeros(size * size, bool)
    for r, c in cells:
        mask[r * size + c] = True
    return jnp.asarray(mask)


def _play(env, params, state, actions):
    """Observations (the first included), rewards and dones of a scripted episode."""
    observations, rewards, dones = [np.asarray(env.get_obs(state))], [], []
    step = jax.jit(env.step_env)
    for action in actions:
        obs, state, reward, done, _ = step(jax.random.key(1), state, action, params)
        observations.append(np.asarray(obs))
        rewards.append(float(reward))
        dones.append(bool(done))
    return np.array(observations), rewards, dones, state


def _planes(env, obs, channel):
    cells = env.size * env.size
    return obs[:, channel * cells:(channel + 1) * cells]


# --------------------------------------------------------------------------------------------
# MemoryKeyToDoor
# --------------------------------------------------------------------------------------------


def _key_to_door_start(env, params, key_cell):
    _, state = env.reset_env(jax.random.key(0), params)
    return state.replace(position=jnp.array([3, 2], jnp.int32),
                         key_cell=jnp.array(key_cell, jnp.int32),
                         apples=_cells((3, 2), (2, 2)), apple_value=jnp.float32(10.0))


def test_key_to_door_with_the_key_by_hand():
    env = MemoryKeyToDoor(explore_steps=2, distractor_steps=4, final_steps=4)
    params = env.default_params.replace(respawn_every=1)
    assert env.episode_length == 10 and params.max_steps_in_episode == 10
    assert params.final_reward == 10.0 and (params.apple_reward_low,
                                            params.apple_reward_high) == (1.0, 10.0)
    state = _key_to_door_start(env, params, key_cell=(1, 2))
    # N, N: onto the key at the second step; then teleported to the bottom centre (4, 2).
    # Distractor: N eats (3, 2) (+10), N eats (2, 2) (+10), S back to (3, 2): eaten at frame 0,
    # back only once frame > 0 + 1, i.e. after the pickup check of frame 2: no reward, but the
    # apple is on the board again; S to (4, 2). Final: four steps north, the last into the door
    # with the key.
    actions = [N, N] + [N, N, S, S] + [N, N, N, N]
    obs, rewards, dones, last = _play(env, params, state, actions)
    assert rewards == [0, 0, 10, 10, 0, 0, 0, 0, 0, 10]
    assert dones == [False] * 9 + [True]
    assert bool(last.door_open) and not bool(last.has_key)  # the key is used up
    # Phase by phase: the key shows at times 0 and 1 (until taken: gone at time 2 anyway), the
    # apples at times 2..5 (the respawned one at time 5), the door from time 6 on.
    assert _planes(env, obs, KEY).sum(1).tolist() == [1, 1] + [0] * 9
    assert _planes(env, obs, APPLE).sum(1).tolist() == [0, 0, 2, 1, 0, 1] + [0] * 5
    assert _planes(env, obs, DOOR).sum(1).tolist() == [0] * 6 + [1] * 5
    # The agent: (2, 2) after the first step, then the distractor start (4, 2) at time 2, and
    # the final phase's start (4, 2) at time 6.
    agent = obs[:, :25].argmax(1)
    assert agent.tolist() == [17, 12, 22, 17, 12, 17, 22, 17, 12, 7, 2]
    # Success is the door's reward, not the apples' (equal to it here: 10 each).
    success = env.episode_success(obs[:-1], obs[1:], jnp.asarray(rewards))
    assert np.asarray(success).tolist() == [False] * 9 + [True]


def test_key_to_door_without_the_key_the_door_is_a_wall():
    env = MemoryKeyToDoor(explore_steps=2, distractor_steps=4, final_steps=4)
    params = env.default_params.replace(respawn_every=0)  # CCA: apples never come back
    state = _key_to_door_start(env, params, key_cell=(0, 0))
    obs, rewards, dones, last = _play(env, params, state, [W, W] + [N, N, S, S] + [N] * 4)
    assert rewards == [0, 0, 10, 10, 0, 0, 0, 0, 0, 0]
    assert not bool(last.door_open)
    assert not np.asarray(env.episode_success(obs[:-1], obs[1:], jnp.asarray(rewards))).any()
    assert obs[-1, :25].argmax() == 7  # stopped at (1, 2), below the door
    # No respawn: the eaten apple stays eaten.
    assert _planes(env, obs, APPLE).sum(1).tolist()[2:6] == [2, 1, 0, 0]


def test_presets_set_phase_lengths_and_reward_laws():
    lengths = {name: (env.explore_steps, env.distractor_steps, env.final_steps)
               for name in ("tvt", "cca", "sr")
               for env in [envs.make("MemoryKeyToDoor", preset=name)[0]]}
    assert lengths == {"tvt": (15, 90, 15), "cca": (15, 30, 15), "sr": (15, 60, 10)}
    _, sr = envs.make("MemoryKeyToDoor", preset="sr")
    assert (sr.apple_reward_low, sr.apple_reward_high, sr.respawn_every, sr.final_reward) == \
        (1.0, 1.0, 20, 5.0)
    _, cca = envs.make("VisualMatch", preset="cca", final_reward=3.0)
    assert (cca.respawn_every, cca.final_reward, cca.max_steps_in_episode) == (0, 3.0, 60)
    env, _ = envs.make("MemoryKeyToDoor", preset="sr", distractor_steps=7)
    assert env.episode_length == 32
    with pytest.raises(ValueError, match="preset"):
        envs.make("VisualMatch", preset="rudder")


# --------------------------------------------------------------------------------------------
# VisualMatch
# --------------------------------------------------------------------------------------------


def _match_start(env, params, colour):
    _, state = env.reset_env(jax.random.key(0), params)
    return state.replace(position=jnp.array([4, 1], jnp.int32), colour=jnp.int32(colour),
                         apples=_cells((3, 2)), apple_value=jnp.float32(1.0))


def test_visual_match_right_and_wrong_colour_by_hand():
    env = VisualMatch(explore_steps=2, distractor_steps=2, final_steps=6)
    params = env.default_params
    assert env.square_cells.tolist() == [[0, 0], [0, 2], [0, 4]]
    # Colour 2's square is the top-right cell: E, E along the bottom, then four steps north.
    script = [S, S] + [N, S] + [E, E, N, N, N, N]
    obs, rewards, dones, _ = _play(env, params, _match_start(env, params, 2), script)
    assert rewards == [0, 0, 1, 0, 0, 0, 0, 0, 0, 10]
    assert dones == [False] * 9 + [True]
    success = env.episode_success(obs[:-1], obs[1:], jnp.asarray(rewards))
    assert np.asarray(success).tolist() == [False] * 9 + [True]  # the apple is no success
    # The cue (colour 2 in the top centre) shows at times 0 and 1 only; the three squares at
    # times 4.. (phase 3); nothing of any colour in phase 2.
    colour_planes = [_planes(env, obs, FIRST_COLOUR + i) for i in range(3)]
    assert colour_planes[2][:2, 2].tolist() == [1, 1]
    assert [p[:, :5].sum(1).tolist() for p in colour_planes] == [
        [0] * 4 + [1] * 6 + [0], [0] * 4 + [1] * 6 + [0], [1, 1, 0, 0] + [1] * 6 + [0]]
    # The wrong colour: the same walk pays no final reward.
    _, rewards, _, _ = _play(env, params, _match_start(env, params, 0), script)
    assert rewards == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    # Touching a wrong square first removes all of them: north through colour 1's square at
    # (0, 2), then east onto colour 2's pays nothing.
    script = [S, S] + [S, S] + [N, N, N, N, E, E]
    obs, rewards, _, _ = _play(env, params, _match_start(env, params, 2), script)
    assert sum(rewards) == 0 and obs[-1, 75:].sum() == 0


def test_visual_match_hides_the_colour_after_phase_one():
    env = VisualMatch(explore_steps=2, distractor_steps=2, final_steps=6)
    params = env.default_params
    script = [S, S, N, S, E, E]
    runs = [_play(env, params, _match_start(env, params, c), script)[0] for c in range(3)]
    assert not np.array_equal(runs[0][:2], runs[1][:2])
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0][2:], other[2:])


def test_active_visual_match_shows_the_colour_once_walked_onto():
    env = VisualMatch(explore_steps=4, distractor_steps=1, final_steps=1, active=1)
    params = env.default_params
    state = _match_start(env, params, 1).replace(cue_cell=jnp.array([2, 1], jnp.int32))
    obs, _, _, _ = _play(env, params, state, [N, N, S, S, N, N])
    grey, colour = _planes(env, obs, GREY)[:, 11], _planes(env, obs, FIRST_COLOUR + 1)[:, 11]
    assert grey.tolist() == [1, 1, 0, 0, 0, 0, 0]  # grey until the agent reaches (2, 1)
    assert colour.tolist() == [0, 0, 1, 1, 0, 0, 0]  # then coloured until phase 1 ends


def test_reset_draws():
    env, params = envs.make("MemoryKeyToDoor")
    _, states = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(0), 4000),
                                               params)
    key_cells = np.asarray(states.key_cell[:, 0] * 5 + states.key_cell[:, 1])
    starts = np.asarray(states.position[:, 0] * 5 + states.position[:, 1])
    assert set(key_cells) == set(range(10)) and set(starts) == set(range(15, 25))
    apples = np.asarray(states.apples)
    assert (apples.sum(1) == 10).all() and not apples[:, 22].any()  # never on the start
    assert set(np.unique(np.asarray(states.apple_value))) == {1.0, 10.0}
    assert abs(float(np.mean(states.apple_value == 10.0)) - 0.5) < 0.04
    env, params = envs.make("VisualMatch")
    _, states = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(1), 3000),
                                               params)
    counts = np.bincount(np.asarray(states.colour), minlength=3)
    assert counts.min() > 900
    assert np.asarray(states.seen).all()  # passive: the colour is in view from the start


# --------------------------------------------------------------------------------------------
# DelayedCatch
# --------------------------------------------------------------------------------------------


def test_delayed_catch_by_hand():
    env = DelayedCatch(games=2, rows=4, columns=3)
    params = env.default_params
    assert env.episode_length == 6 and params.max_steps_in_episode == 6
    _, state = env.reset_env(jax.random.key(0), params)
    state = state.replace(ball_x=jnp.int32(0))
    obs, rewards, dones, state = _play(env, params, state, [LEFT, STAY, STAY])
    assert rewards == [0, 0, 0] and dones == [False] * 3
    assert int(state.caught) == 1 and int(state.paddle_x) == 1 and int(state.ball_y) == 0
    np.testing.assert_array_equal(obs[0].reshape(4, 3), [[1, 0, 0], [0, 0, 0], [0, 0, 0],
                                                         [0, 1, 0]])
    # The second game: catch it (return 2) or miss it (return 0).
    ball = int(state.ball_x)
    catch = {0: [LEFT, STAY, STAY], 1: [STAY] * 3, 2: [RIGHT, STAY, STAY]}[ball]
    miss = {0: [RIGHT] * 3, 1: [LEFT] * 3, 2: [LEFT] * 3}[ball]
    _, rewards, dones, _ = _play(env, params, state, catch)
    assert rewards == [0, 0, 2] and dones == [False, False, True]
    _, rewards, _, _ = _play(env, params, state, miss)
    assert rewards == [0, 0, 0]


def test_delayed_catch_random_return_is_minus_point_six_per_game():
    env, params = envs.make("DelayedCatch", games=5)
    n, steps = 4096, env.episode_length

    @jax.jit
    def returns(key):
        _, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, n), params)

        def body(state, k):
            ka, ks = jax.random.split(k)
            action = jax.random.randint(ka, (n,), 0, 3)
            _, state, reward, terminated, truncated, _ = jax.vmap(
                env.step, (0, 0, 0, None))(jax.random.split(ks, n), state, action, params)
            return state, (reward, terminated, truncated)

        _, out = jax.lax.scan(body, state, jax.random.split(key, steps))
        return out

    reward, terminated, truncated = map(np.asarray, returns(jax.random.key(2)))
    assert terminated[-1].all() and not terminated[:-1].any() and not truncated.any()
    assert not reward[:-1].any()  # withheld until the last step
    total = reward.sum(0)
    assert abs(total.mean() - (-0.6 * 5)) < 4.5 * total.std() / np.sqrt(n)


# --------------------------------------------------------------------------------------------
# gymnax's bsuite memory / credit chains, as documented in docs/envs.md
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MemoryChain-bsuite", "UmbrellaChain-bsuite"])
def test_bsuite_chains_optimal_and_random_returns(name):
    env, params = envs.make(name)
    n = 2000

    def optimal(state):
        if name == "MemoryChain-bsuite":
            return state.context[state.query]
        return state.need_umbrella  # only the first action matters

    @jax.jit
    def returns(key, random):
        _, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, n), params)

        def body(carry, k):
            state, total, alive = carry
            ka, ks = jax.random.split(k)
            action = jnp.where(random, jax.random.randint(ka, (n,), 0, 2),
                               jax.vmap(optimal)(state))
            _, state, reward, terminated, truncated, _ = jax.vmap(
                env.step, (0, 0, 0, None))(jax.random.split(ks, n), state, action, params)
            total = total + alive * reward
            return (state, total, alive & ~(terminated | truncated)), None

        (_, total, alive), _ = jax.lax.scan(body, (state, jnp.zeros(n), jnp.ones(n, bool)),
                                            jax.random.split(key, 20))
        return total, alive

    for random, expected in ((False, 1.0), (True, 0.0)):
        total, alive = map(np.asarray, returns(jax.random.key(3), random))
        assert not alive.any()
        assert abs(total.mean() - expected) < 4.5 * total.std() / np.sqrt(n) + 1e-6, (
            name, random, total.mean())


# The engine: each task trains with --policy gru from the command line (the other memory
# tasks: tests/test_recurrent.py).
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, options", [
    ("VisualMatch", ("--env-option", "preset=cca")),
    ("MemoryKeyToDoor", ("--env-option", "preset=cca")),
    ("DelayedCatch", ("--env-option", "games=2")),
])
def test_trains_with_a_recurrent_policy_from_the_command_line(name, options, tmp_path):
    columns = train_gru_from_cli(tmp_path / name, name, options)
    assert np.isfinite(columns["loss"]).all() and len(columns["update"]) == 2


def test_rollout_counts_an_episode_that_succeeded_before_its_last_step():
    """The engine's ``success_rate`` counts an episode whose door opened at any step, as
    evaluation does, not only on its last step."""
    from jaxcredit.agents.rollout import memoryless, reset_runner, rollout
    from jaxcredit.envs.goals import success_fn

    env = MemoryKeyToDoor(explore_steps=8, distractor_steps=1, final_steps=8)
    params = env.default_params
    runner = reset_runner(env, params, jax.random.key(0), 512)
    uniform = memoryless(lambda obs: jnp.zeros(obs.shape[:-1] + (4,)))
    _, tr, summary = rollout(env, params, uniform, runner, jax.random.key(1),
                             3 * env.episode_length, None, success_fn(env))
    step = np.asarray(env.episode_success(tr.obs, tr.next_obs, tr.reward))
    done = np.asarray(tr.done)
    expected, at_last_step, reached = 0, 0, np.zeros(done.shape[1], bool)
    for t in range(done.shape[0]):
        reached |= step[t]
        expected += int((reached & done[t]).sum())
        at_last_step += int((step[t] & done[t]).sum())
        reached &= ~done[t]
    assert int(summary.success_count) == expected > at_last_step

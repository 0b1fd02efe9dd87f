"""COCOA's environments: KeyToDoor, TaskInterleaving, TreeMDP.

Hand-checked layouts, sizes and returns first; then every environment is rolled out over 4096
parallel copies (one compiled rollout per environment, reused by every check) and compared with
its tabular MDP: the tabular transitions and rewards explain every sampled step, ``state_index``
and the tabular observations agree with the JAX environment, and the exact value of the uniform
policy (float64 numpy solve, independent of ``jaxcredit.exact.tabular``) matches the Monte-Carlo
return within five standard errors.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.envs import make
from jaxcredit.envs.key_to_door import KeyToDoor, fixed_layout
from jaxcredit.envs.task_interleaving import TaskInterleaving
from jaxcredit.envs.tree_mdp import TreeMDP, level_sizes

NUM_ENVS = 4096
Z_BOUND = 5.0


# ---------------------------------------------------------------------------- references


def exact_values(mdp, pi: np.ndarray, horizon: int | None = None) -> np.ndarray:
    """V^pi in float64: linear solve on non-terminal states, or ``horizon`` backups."""
    transition = np.asarray(mdp.transition, np.float64)
    reward = np.asarray(mdp.reward, np.float64)
    live = ~np.asarray(mdp.terminal)
    p_pi = np.einsum("sa,sat->st", pi, transition) * live[:, None]
    r_pi = np.sum(pi * reward, axis=-1) * live
    if horizon is not None:
        v = np.zeros_like(r_pi)
        for _ in range(horizon):
            v = r_pi + p_pi @ v
        return v
    v = np.zeros_like(r_pi)
    block = np.ix_(live, live)
    v[live] = np.linalg.solve(np.eye(live.sum()) - p_pi[block], r_pi[live])
    return v


def optimal_values(mdp, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """(V*, greedy one-hot policy) by ``horizon`` steps of value iteration, float64."""
    transition = np.asarray(mdp.transition, np.float64)
    reward = np.asarray(mdp.reward, np.float64)
    live = ~np.asarray(mdp.terminal)
    v = np.zeros(transition.shape[0])
    for _ in range(horizon):
        q = reward + np.einsum("sat,t->sa", transition, v * live)
        v = q.max(-1) * live
    pi = np.eye(transition.shape[1])[q.argmax(-1)]
    return v, pi


def rollout(env, params, mdp, policy, key, num_envs: int, num_steps: int) -> dict[str, np.ndarray]:
    """Runs ``env.step`` (auto-reset) under a tabular policy ``[S, A]``; time-major numpy records.

    ``state[t]`` is ``env.state_index`` of s_t. ``next_state[t]`` is the index of s_{t+1} before
    any reset: ``state[t + 1]`` inside an episode; at an episode end it is read off the final
    observation through the tabular observation table (these MDPs' observations identify their
    states, which ``test_tabular_mdp_is_a_valid_mdp`` checks).
    """
    policy = jnp.asarray(policy, jnp.float32)
    records, last_state = _rollout(env, params, policy, key, num_envs, num_steps)
    records = jax.tree.map(np.asarray, records)
    done = records["terminated"] | records["truncated"]
    next_state = np.concatenate([records["state"][1:], np.asarray(last_state)[None]])
    by_observation = {row.tobytes(): i for i, row in enumerate(np.asarray(mdp.observation))}
    ended = records["final_obs"][done]
    next_state[done] = [by_observation.get(row.tobytes(), -1) for row in ended]
    records["next_state"] = next_state
    return records


def policy_iteration(mdp, max_iterations: int = 20) -> np.ndarray:
    """Optimal one-hot policy of an episodic MDP by exact policy iteration, float64."""
    transition = np.asarray(mdp.transition, np.float64)
    reward = np.asarray(mdp.reward, np.float64)
    pi = np.full(reward.shape, 1.0 / reward.shape[1])
    for _ in range(max_iterations):
        q = reward + np.einsum("sat,t->sa", transition, exact_values(mdp, pi))
        improved = np.eye(reward.shape[1])[q.argmax(-1)]
        if np.array_equal(improved, pi):
            return pi
        pi = improved
    raise AssertionError("policy iteration did not converge")


@functools.partial(jax.jit, static_argnames=("env", "num_envs", "num_steps"))
def _rollout(env, params, policy, key, num_envs: int, num_steps: int):
    reset_key, key = jax.random.split(key)
    reset_keys = jax.random.split(reset_key, num_envs)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    log_pi = jnp.log(policy)

    def body(carry, step_key):
        obs, state = carry
        action_key, env_key = jax.random.split(step_key)
        s = env.state_index(state)
        action = jax.random.categorical(action_key, log_pi[s])
        env_keys = jax.random.split(env_key, num_envs)
        next_obs, next_state, reward, terminated, truncated, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(env_keys, state, action, params)
        record = {
            "obs": obs,
            "state": s,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "final_obs": info["final_observation"],
            "discount": info["discount"],
        }
        return (next_obs, next_state), record

    (_, state), records = jax.lax.scan(body, (obs, state), jax.random.split(key, num_steps))
    return records, env.state_index(state)


def first_episode_returns(records) -> tuple[np.ndarray, np.ndarray]:
    """(return, length) of the first episode of every environment copy (must end in the window)."""
    done = records["terminated"] | records["truncated"]
    assert done.any(axis=0).all(), "an episode did not end inside the rollout window"
    end = np.argmax(done, axis=0)
    steps = np.arange(done.shape[0])[:, None]
    returns = np.sum(np.where(steps <= end, records["reward"], 0.0), axis=0)
    return returns, end + 1


def assert_mean_close(samples: np.ndarray, expected: float, what: str):
    mean = samples.mean()
    stderr = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(mean - expected) <= Z_BOUND * stderr + 1e-5, (
        f"{what}: Monte-Carlo {mean:.5f} +- {stderr:.5f} vs exact {expected:.5f}"
    )


def assert_follows_tabular(env, mdp, records, reward_values=None, reward_probs=None):
    """Every sampled step is a possible tabular step with the right reward and observations."""
    s, a, s2 = records["state"], records["action"], records["next_state"]
    transition = np.asarray(mdp.transition)
    observation = np.asarray(mdp.observation)
    assert (s >= 0).all() and (s < mdp.num_states).all() and (s2 >= 0).all()
    assert not np.asarray(mdp.terminal)[s].any(), "a step started from a terminal state"
    assert (transition[s, a, s2] > 0).all(), "a sampled transition has tabular probability 0"
    np.testing.assert_array_equal(np.asarray(mdp.terminal)[s2], records["terminated"])
    np.testing.assert_allclose(observation[s], records["obs"], atol=1e-6)
    np.testing.assert_allclose(observation[s2], records["final_obs"], atol=1e-6)
    if reward_probs is None:  # deterministic rewards
        np.testing.assert_allclose(records["reward"], np.asarray(mdp.reward)[s, a], atol=1e-5)
    else:
        hit = np.isclose(records["reward"][..., None], np.asarray(reward_values), atol=1e-6)
        assert hit.any(-1).all(), "a sampled reward is outside the support"
        support = np.asarray(reward_probs)[s, a]  # [T, N, K]
        assert (np.sum(hit * support, -1) > 0).all(), "a sampled reward has probability 0"


def assert_event_rates(mdp, records, events: dict[str, np.ndarray]):
    """For each set E of next states, sum_t 1[s'_t in E] matches sum_t P(E | s_t, a_t).

    The centred sum is a martingale; its standardised value is ~N(0, 1) when the environment
    samples from the tabular transition law.
    """
    transition = np.asarray(mdp.transition, np.float64)
    s, a, s2 = (records[k].ravel() for k in ("state", "action", "next_state"))
    for name, mask in events.items():
        p = transition[:, :, mask].sum(-1)[s, a]
        observed = mask[s2].sum()
        z = (observed - p.sum()) / np.sqrt(np.sum(p * (1 - p)) + 1e-12)
        assert abs(z) < Z_BOUND, f"event {name}: observed {observed}, expected {p.sum():.1f}"


# ---------------------------------------------------------------------------- shared rollouts


@pytest.fixture(scope="module")
def key_to_door():
    env, params = make("KeyToDoor", length=23)
    mdp = env.tabular_mdp(params)
    uniform = np.full((mdp.num_states, mdp.num_actions), 1.0 / mdp.num_actions)
    records = rollout(env, params, mdp, uniform, jax.random.PRNGKey(0), NUM_ENVS, env.length)
    return env, params, mdp, records


@pytest.fixture(scope="module")
def interleaving():
    env, params = make("TaskInterleaving")
    mdp = env.tabular_mdp(params)
    uniform = np.full((mdp.num_states, 2), 0.5)
    records = rollout(env, params, mdp, uniform, jax.random.PRNGKey(1), NUM_ENVS, 100)
    return env, params, mdp, records


@pytest.fixture(scope="module")
def tree():
    env, params = make("TreeMDP", state_overlap=2)
    mdp = env.tabular_mdp(params)
    uniform = np.full((mdp.num_states, env.branching), 1.0 / env.branching)
    records = rollout(env, params, mdp, uniform, jax.random.PRNGKey(2), NUM_ENVS, env.depth)
    return env, params, mdp, records


ALL_ENVS = ["key_to_door", "interleaving", "tree"]


# ---------------------------------------------------------------------------- hand-checked facts


def cocoa_track_by_inverse_cdf(length: int) -> np.ndarray:
    """Cells 1..L-3 of COCOA's track from the uniforms behind it, without ``Generator.choice``.

    COCOA draws the cells with ``default_rng(2022).choice([empty, left, right], L - 3,
    p=(0.2, 0.4, 0.4))``. With replacement and ``p`` given, numpy's ``choice`` takes
    u = ``random(L - 3)`` and returns ``a[cdf.searchsorted(u, side="right")]``, cdf = (0.2, 0.6, 1):
    a cell is empty for u < 0.2, holds a left apple for 0.2 <= u < 0.6, a right one for u >= 0.6.
    """
    u = np.random.default_rng(2022).random(length - 3)
    # No draw sits on a boundary (the nearest is 5e-4 away), so the rounding of cdf is moot.
    assert np.abs(u[:, None] - np.array([0.2, 0.6])).min() > 1e-6
    return np.where(u < 0.2, 0, np.where(u < 0.6, 1, 2))


def test_key_to_door_fixed_layout_matches_cocoa_seed():
    # The L = 23 track, written out: 16 of its 20 cells hold an apple (cell types 1 and 2).
    track_23 = [int(c) for c in "10202200122111122222"]
    np.testing.assert_array_equal(cocoa_track_by_inverse_cdf(23), track_23)
    np.testing.assert_array_equal(fixed_layout(23)[1:-2], track_23)
    layout = fixed_layout(23)
    assert (layout[0], layout[-2], layout[-1]) == (4, 3, 0)  # key, door, empty treasure cell
    # The apple counts of the paper's lengths are the draws u >= 0.2 among the first L - 3.
    lengths = (23, 43, 63, 83, 103)
    derived = [int(np.sum(cocoa_track_by_inverse_cdf(n) > 0)) for n in lengths]
    assert derived == [16, 27, 44, 59, 77]
    assert [KeyToDoor(n).num_apples for n in lengths] == derived


def test_key_to_door_reward_scaling():
    params = KeyToDoor(43).default_params
    np.testing.assert_allclose(
        [params.apple_reward_low, params.apple_reward_high, params.treasure_reward],
        [0.1 * 23 / 43, 0.9 * 23 / 43, 0.2 * 23 / 43],
    )
    assert params.max_steps_in_episode == 43


def test_key_to_door_exact_returns_and_chance_level():
    for length, apples in [(23, 16), (103, 77)]:
        env = KeyToDoor(length)
        mdp = env.tabular_mdp()
        scale = 23.0 / length
        uniform = np.full((mdp.num_states, 4), 0.25)
        v_random = exact_values(mdp, uniform)[0]
        v_star, _ = optimal_values(mdp, length + 1)
        # Random: each apple on its side w.p. 1/4 (mean 0.5); treasure w.p. 1/4 * 1/4.
        np.testing.assert_allclose(v_random, scale * (apples * 0.5 / 4 + 0.2 / 16), rtol=1e-5)
        np.testing.assert_allclose(v_star[0], scale * (apples * 0.5 + 0.2), rtol=1e-5)


def test_key_to_door_optimal_policy_collects_everything(key_to_door):
    env, params, mdp, _ = key_to_door
    _, greedy = optimal_values(mdp, env.length + 1)
    records = rollout(env, params, mdp, greedy, jax.random.PRNGKey(3), NUM_ENVS, env.length)
    returns, lengths = first_episode_returns(records)
    assert (lengths == 23).all()
    assert (records["reward"][-1] == np.float32(0.2)).all()  # treasure in every episode
    # Every apple (mean reward (0.1 + 0.9) / 2) and the treasure: 16 * 0.5 + 0.2.
    assert_mean_close(returns, 16 * 0.5 + 0.2, "KeyToDoor-23 optimal return")


def test_tree_level_sizes_and_state_counts():
    assert level_sizes(4, 6, 0) == [1, 6, 36, 216, 1296]
    assert level_sizes(4, 6, 5) == [1, 6, 11, 16, 21]  # b - o = 1: 1 + o i
    assert level_sizes(4, 6, 6) == [1, 6, 6, 6, 6]  # full overlap: the last action is the state
    # Levels 0..3 by n_{i+1} = (6 - o) n_i + o, plus the terminal state: o = 0: 1 + 6 + 36 + 216
    # + 1; o = 1: 1 + 6 + 31 + 156 + 1; o = 2: 1 + 6 + 26 + 106 + 1; o = 3: 1 + 6 + 21 + 66 + 1;
    # o = 4: 1 + 6 + 16 + 36 + 1; o = 5: 1 + 6 + 11 + 16 + 1; o = 6: 1 + 6 + 6 + 6 + 1.
    counts = [TreeMDP(state_overlap=o).num_states for o in range(7)]
    assert counts == [260, 195, 140, 95, 60, 35, 20]


def test_tree_small_case_by_hand():
    env = TreeMDP(depth=2, branching=2, state_overlap=1, seed=0)
    # Levels: 1 root, (2 - 1) * 1 + 1 = 2 children; index 0 root, 1-2 level one, 3 terminal.
    mdp = env.tabular_mdp()
    np.testing.assert_array_equal(env.next_table, [[1, 2], [3, 3], [3, 3], [3, 3]])
    np.testing.assert_array_equal(np.asarray(mdp.transition).argmax(-1), env.next_table)
    # r = ((node + 9973 a + offset) mod 5) - 2 with offset drawn in [0, 3).
    offset = env.seed_offset
    assert 0 <= offset < 3
    expected = [[(k + 9973 * a + offset) % 5 - 2 for a in (0, 1)] for k in range(3)] + [[0, 0]]
    np.testing.assert_array_equal(np.asarray(mdp.reward), expected)


def test_tree_rewards_and_optimum():
    for overlap in (0, 6):
        env = TreeMDP(state_overlap=overlap)
        mdp = env.tabular_mdp()
        reward = np.asarray(mdp.reward)
        assert set(np.unique(reward[:-1])) == {-2.0, -1.0, 0.0, 1.0, 2.0}
        # 9973 = 3 (mod 5), so actions 0..4 reach every residue: reward 2 is always available.
        v_star, _ = optimal_values(mdp, env.depth)
        assert v_star[0] == 8.0
    # COCOA's offset for env seed 100: jax.random.randint(PRNGKey(100), (), 0, 259).
    assert TreeMDP(seed=100).seed_offset == int(
        jax.random.randint(jax.random.PRNGKey(100), (), 0, 259)
    )


def test_interleaving_tabular_size_and_optimum(interleaving):
    env, _, mdp, _ = interleaving
    # 5 contexts x 33 inventories of the other 4 (<= 2 open, key or not) x (8 query + 2 answer)
    # configurations, plus the terminal state: COCOA's count.
    assert mdp.num_states == 5 * 33 * (8 + 2) + 1 == 1651
    assert env.observation_space(env.default_params).shape == (24,)
    greedy = policy_iteration(mdp)
    # Taking a key is worth something and never changes the dynamics, so the optimal policy
    # picks the rewarded side in every query room ...
    structure = env._tabular_structure()
    query = ~structure["answer_room"]
    np.testing.assert_array_equal(greedy[:-1][query].argmax(-1), structure["flip"][query])
    # ... and a coin flip takes each future key with probability 1/2: from any state holding no
    # key, the uniform policy earns exactly half of the optimum.
    v_star = exact_values(mdp, greedy)
    v_random = exact_values(mdp, np.full((mdp.num_states, 2), 0.5))
    no_key = np.append((structure["status"] != 2).all(1), True)
    np.testing.assert_allclose(v_random[no_key] * 2, v_star[no_key], rtol=1e-6)  # float32 MDP
    # The optimal value by hand. The dynamics are symmetric in the contexts and the first room
    # is uniform, so every context expects the same number of paid answer rooms: V* is the mean
    # context reward (0.2 + 0.4 + 0.6 + 0.8 + 1) / 5 = 0.6 times the expected number of answer
    # rooms, each counted with the probability β^t, β = 0.95, that step t is taken (its reward
    # is paid even if it ends the episode); the optimal policy holds every key, so all pay. Let
    # Q_m be that number from a query room with m others open, A_k from an answer room with k
    # open (itself included). After a query room m + 1 are open, after an answer room k - 1, and
    # with n open the next room is an answer room w.p. n / 3:
    #   Q_m = β [(m+1)/3 A_{m+1} + (1 - (m+1)/3) Q_{m+1}]           m = 0, 1, 2
    #   A_k = 1 + β [(k-1)/3 A_{k-1} + (1 - (k-1)/3) Q_{k-1}]       k = 1, 2, 3
    # (A_1 = 1 + β Q_0 and A_k = 1 + Q_{k-2}), solved by Q = (380, 399, 418) / 41 and
    # A = (402, 421, 440) / 41, checked in exact arithmetic below. V* = 0.6 Q_0 = 228/41; the
    # uniform policy takes each key w.p. 1/2 and earns half, 114/41.
    beta = Fraction(19, 20)
    q = [Fraction(n, 41) for n in (380, 399, 418)] + [Fraction(0)]  # Q_3: never reached
    a = [Fraction(0)] + [Fraction(n, 41) for n in (402, 421, 440)]  # A_0: never reached
    for m in range(3):
        p = Fraction(m + 1, 3)
        assert q[m] == beta * (p * a[m + 1] + (1 - p) * q[m + 1])
    for k in range(1, 4):
        p = Fraction(k - 1, 3)
        assert a[k] == 1 + beta * (p * a[k - 1] + (1 - p) * q[k - 1])
    np.testing.assert_allclose(env.context_rewards, [0.2, 0.4, 0.6, 0.8, 1.0], rtol=1e-6)
    initial = np.asarray(mdp.initial, np.float64)
    assert Fraction(3, 5) * q[0] == Fraction(228, 41)
    np.testing.assert_allclose(initial @ v_star, 228 / 41, rtol=1e-5)
    np.testing.assert_allclose(initial @ v_random, 114 / 41, rtol=1e-5)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="length"):
        KeyToDoor(length=3)
    with pytest.raises(ValueError, match="state_overlap"):
        TreeMDP(state_overlap=7)
    with pytest.raises(ValueError, match="max_open"):
        TaskInterleaving(num_contexts=3, max_open=3)


# ---------------------------------------------------------------------------- API contract


@pytest.mark.parametrize("name", ALL_ENVS)
def test_reset_and_step_shapes_and_dtypes(name, request):
    env, params, mdp, records = request.getfixturevalue(name)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == env.observation_space(params).shape and obs.dtype == jnp.float32
    obs, state, reward, terminated, truncated, info = env.step(
        jax.random.PRNGKey(1), state, jnp.int32(1), params
    )
    assert obs.shape == env.observation_space(params).shape and obs.dtype == jnp.float32
    assert reward.shape == () and reward.dtype == jnp.float32
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
    assert info["final_observation"].shape == obs.shape
    assert env.num_actions == env.action_space(params).n == mdp.num_actions
    # The batched rollout: [T, 4096, ...] with the observation shape of the spec.
    assert records["obs"].shape == (records["reward"].shape[0], NUM_ENVS, *obs.shape)
    assert records["reward"].dtype == np.float32 and np.isfinite(records["reward"]).all()
    np.testing.assert_array_equal(records["discount"], 1.0 - records["terminated"])


@pytest.mark.parametrize("name", ALL_ENVS)
def test_tabular_mdp_is_a_valid_mdp(name, request):
    env, params, mdp, _ = request.getfixturevalue(name)
    transition = np.asarray(mdp.transition, np.float64)
    np.testing.assert_allclose(transition.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(mdp.initial).sum(), 1.0, atol=1e-6)
    terminal = np.asarray(mdp.terminal)
    assert terminal.sum() == 1 and terminal[-1]
    np.testing.assert_array_equal(transition[-1, :, -1], 1.0)
    np.testing.assert_array_equal(np.asarray(mdp.reward)[-1], 0.0)
    assert mdp.observation.shape == (mdp.num_states, *env.observation_space(params).shape)
    # Observations identify states (no aliasing in these tasks).
    assert len({row.tobytes() for row in np.asarray(mdp.observation)}) == mdp.num_states
    values, probs = env.reward_distribution(params)
    np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(probs) @ np.asarray(values), mdp.reward, atol=1e-6)


@pytest.mark.parametrize("name", ALL_ENVS)
def test_state_index_follows_tabular_transitions(name, request):
    env, params, mdp, records = request.getfixturevalue(name)
    if name == "key_to_door":
        assert_follows_tabular(env, mdp, records, *env.reward_distribution(params))
    else:
        assert_follows_tabular(env, mdp, records)
    # Start states: the reset distribution is the tabular initial distribution.
    starts = records["state"][0]
    initial = np.asarray(mdp.initial, np.float64)
    assert (initial[starts] > 0).all()
    if name == "interleaving":
        structure = env._tabular_structure()
        context = np.append(structure["context"], -1)
        for c in range(env.num_contexts):
            observed = np.mean(context[starts] == c)
            assert abs(observed - 0.2) < Z_BOUND * np.sqrt(0.16 / NUM_ENVS)
        events = {"terminal": np.asarray(mdp.terminal)}
        events["answer room"] = np.append(structure["answer_room"], False)
        for c in range(env.num_contexts):
            events[f"context {c}"] = context == c
            events[f"context {c} holds key"] = np.append(structure["status"][:, c] == 2, False)
        assert_event_rates(mdp, records, events)


@pytest.mark.parametrize("name", ALL_ENVS)
def test_random_policy_value_matches_monte_carlo(name, request):
    env, params, mdp, records = request.getfixturevalue(name)
    uniform = np.full((mdp.num_states, mdp.num_actions), 1.0 / mdp.num_actions)
    # TaskInterleaving's time limit (100) truncates; the others end naturally within it.
    horizon = params.max_steps_in_episode if name == "interleaving" else None
    v = exact_values(mdp, uniform, horizon)
    expected = float(np.asarray(mdp.initial, np.float64) @ v)
    returns, lengths = first_episode_returns(records)
    assert_mean_close(returns, expected, f"{name} random-policy return")
    if name == "key_to_door":
        np.testing.assert_allclose(expected, 16 * 0.5 / 4 + 0.2 / 16, rtol=1e-5)
        assert (lengths == 23).all()
        treasure = records["reward"][-1] > 0  # the last step pays the treasure only
        assert abs(treasure.mean() - 1 / 16) < Z_BOUND * np.sqrt(1 / 16 * 15 / 16 / NUM_ENVS)
    if name == "tree":
        assert (lengths == env.depth).all()
    if name == "interleaving":
        # Episode length: min(Geometric(0.05), 100); mean (1 - 0.95^100) / 0.05.
        assert_mean_close(lengths.astype(float), (1 - 0.95**100) / 0.05, "episode length")


# ---------------------------------------------------------------------------- time limits


def test_key_to_door_termination_versus_truncation(key_to_door):
    env, params, mdp, records = key_to_door
    assert records["terminated"][-1].all() and not records["terminated"][:-1].any()
    assert not records["truncated"].any()
    short = params.replace(max_steps_in_episode=5)
    uniform = np.full((mdp.num_states, 4), 0.25)
    cut = rollout(env, short, mdp, uniform, jax.random.PRNGKey(4), NUM_ENVS, env.length)
    expected = np.zeros(env.length, bool)
    expected[4::5] = True  # a fresh episode every 5 steps
    np.testing.assert_array_equal(cut["truncated"], np.repeat(expected[:, None], NUM_ENVS, 1))
    assert not cut["terminated"].any()
    # The final observation of a truncated episode is the state at position 5 (bootstrap target).
    np.testing.assert_allclose(cut["final_obs"][4, :, 0], 5 / 23, rtol=1e-6)


def test_tree_termination_versus_truncation(tree):
    env, params, mdp, records = tree
    assert records["terminated"][-1].all() and not records["terminated"][:-1].any()
    assert not records["truncated"].any()
    uniform = np.full((mdp.num_states, env.branching), 1.0 / env.branching)
    short = params.replace(max_steps_in_episode=2)
    cut = rollout(env, short, mdp, uniform, jax.random.PRNGKey(5), NUM_ENVS, 4)
    np.testing.assert_array_equal(cut["truncated"].all(1), [False, True, False, True])
    assert not cut["terminated"].any()


def test_interleaving_termination_versus_truncation(interleaving):
    env, params, mdp, records = interleaving
    # Default: die w.p. 0.05 per step (termination) and a time limit of 100 (truncation).
    assert_mean_close(records["terminated"].ravel().astype(float), 0.05, "die rate")
    assert not (records["terminated"] & records["truncated"]).any()
    uniform = np.full((mdp.num_states, 2), 0.5)
    immortal = rollout(
        env, params.replace(die_prob=0.0), mdp, uniform, jax.random.PRNGKey(6), NUM_ENVS, 100
    )
    assert not immortal["terminated"].any()
    assert immortal["truncated"][-1].all() and not immortal["truncated"][:-1].any()
    fragile = rollout(
        env, params.replace(die_prob=1.0), mdp, uniform, jax.random.PRNGKey(7), NUM_ENVS, 100
    )
    assert fragile["terminated"].all() and not fragile["truncated"].any()
    np.testing.assert_array_equal(fragile["final_obs"], 0.0)  # terminal observation is zero
    # The tabular MDP follows die_prob (a traced params field: no rebuild of the structure).
    transition = np.asarray(env.tabular_mdp(params.replace(die_prob=0.2)).transition)
    np.testing.assert_allclose(transition[:-1, :, -1], 0.2, rtol=1e-6)
    np.testing.assert_allclose(transition.sum(-1), 1.0, atol=1e-5)

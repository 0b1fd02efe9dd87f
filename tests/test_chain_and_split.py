"""ChainAndSplit (jaxcredit.envs.chain_and_split): values by hand, the MDP against the
environment's own steps, and Chunked-TD's λ on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import envs
from jaxcredit.envs.chain_and_split import ChainAndSplit
from jaxcredit.estimators import chunked as C
from jaxcredit.exact import tabular
from jaxcredit.exact.models import exact_model
from jaxcredit.types import Trajectory


def test_sizes_levels_and_values_by_hand():
    env = ChainAndSplit(chain_length=4, num_actions=3, levels=5)
    params = env.default_params
    # s_0; chain steps 1..4; other branch step 1; steps 2..4 for each of 5 levels.
    assert env.num_states == 1 + 4 + 1 + 3 * 5 == 21
    np.testing.assert_allclose(env._level_reward(jnp.arange(1, 6), params),
                               [-1.0, -0.5, 0.0, 0.5, 1.0])
    mdp = env.tabular_mdp(params)
    # Q(s_0, ·) under any policy: the bonus for action 0, the levels' mean 0 for the others.
    pi = jax.nn.softmax(jax.random.normal(jax.random.key(0), (env.num_states, 3)))
    for policy in (pi, tabular.uniform_policy(mdp)):
        np.testing.assert_allclose(tabular.action_values(mdp, policy, 1.0)[0], [0.01, 0, 0],
                                   atol=1e-6)
    assert env.task_metrics(params, pi)["p_optimal_first_action"] == pi[0, 0]


@pytest.mark.parametrize("one_hot", [0, 1])
def test_the_mdp_is_the_environments_own_process(one_hot):
    """Along sampled episodes every observed state, transition and reward is the MDP's."""
    env = ChainAndSplit(chain_length=5, num_actions=4, levels=3, one_hot=one_hot)
    params = env.default_params
    mdp = env.tabular_mdp(params)
    key = jax.random.key(1)
    lengths, branches = [], set()
    for _ in range(8):
        key, reset_key = jax.random.split(key)
        obs, state = env.reset(reset_key, params)
        for t in range(10):
            key, action_key, step_key = jax.random.split(key, 3)
            action = int(jax.random.randint(action_key, (), 0, 4))
            s = int(env.state_index(state))
            np.testing.assert_allclose(mdp.observation[s], obs, atol=1e-6)
            obs, state, reward, done, _ = env.step_env(step_key, state, action, params)
            nxt = int(env.state_index(state))
            assert float(mdp.transition[s, action, nxt]) > 0, (s, action, nxt)
            np.testing.assert_allclose(mdp.transition_reward[s, action, nxt], reward, atol=1e-6)
            if done:
                assert bool(mdp.terminal[nxt])
                lengths.append(t + 1)
                branches.add(int(state.right))
                break
    assert set(lengths) == {5} and branches == {0, 1}


def _episode(env, right: bool, level: int = 1) -> Trajectory:
    """One whole episode as a one-column window, taken by hand."""
    L = env.chain_length
    steps = np.arange(L)
    state = np.where(steps == 0, 0, np.where(right, steps, np.where(
        steps == 1, L + 1, L + 2 + (steps - 2) * env.levels + (level - 1))))
    A = env.num_actions
    action = np.where(steps == 0, 0 if right else 1, 0)
    terminated = steps == L - 1
    zeros = jnp.zeros((L, 1))
    return Trajectory(obs=jnp.zeros((L, 1, 3)), action=jnp.asarray(action[:, None], jnp.int32),
                      reward=zeros, terminated=jnp.asarray(terminated[:, None]),
                      truncated=jnp.zeros((L, 1), bool), value=zeros, next_value=zeros,
                      log_prob=zeros - np.log(A), logits=jnp.zeros((L, 1, A)),
                      state=jnp.asarray(state[:, None], jnp.int32))


@pytest.mark.parametrize("right", [True, False])
def test_chunked_lambda_continues_along_the_chain_and_bootstraps_at_the_draw(right):
    env = ChainAndSplit(chain_length=6, num_actions=3, levels=4)
    mdp = env.tabular_mdp(env.default_params)
    p_next = exact_model("transition").params(None, mdp, None, 1.0)["p_next"]
    _, _, lam = C.chunked_advantages(p_next, _episode(env, right, level=2), 1.0, "expected")
    # Expected form: λ'_i = P^π(s_{i+2} | s_{i+1}); 1 on every deterministic step, 1/levels
    # where step 1 of the other branch draws the level, 0 on the last step.
    expected = np.ones(6)
    expected[-1] = 0.0
    if not right:
        expected[0] = 1.0 / 4
    np.testing.assert_allclose(lam[:, 0], expected, rtol=1e-6)


def test_registered_with_the_chunked_task_defaults():
    env, params = envs.make("ChainAndSplit")
    assert (env.chain_length, env.num_actions, env.levels) == (20, 10, 11)
    assert params.bonus == 0.01 and params.max_steps_in_episode == 20
    with pytest.raises(ValueError, match="chain_length >= 3"):
        ChainAndSplit(chain_length=2)

"""Chain-and-Split, the first task of Chunked-TD (Ramesh et al., ICML 2024, arXiv 2405.03878).

The official environment is ``ChainAndSplitEnv`` in ``Aditya-Ramesh-10/chunktd``,
``environments/rl_envs.py``; its defaults in ``scripts/evaluate_cns.py`` are 10 actions, a chain
of 20 steps, a bonus of 0.01 and 101 reward levels. This is the same process as a gymnax
environment with an exact tabular MDP. One default differs: 11 reward levels instead of 101.
Each level after the draw is its own tabular state (the level is observed, and a model of the
transitions must find the draw surprising), so 101 levels make S = 1,941 states and dense
[S, A, S] tensors of 150 MB each; 11 levels keep S = 231. Both are uniform over evenly spaced
levels in [−1, 1], with variance 0.34 (101) and 0.40 (11); ``levels=101`` is the paper's.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

Array = jax.Array


@struct.dataclass
class ChainAndSplitState(environment.EnvState):
    step: Array  # steps taken, 0 .. chain_length
    right: Array  # 1 after the optimal first action (the deterministic chain)
    level: Array  # the reward level drawn on the other branch (0 before the draw)
    time: int


@struct.dataclass
class ChainAndSplitParams(environment.EnvParams):
    bonus: float = 0.01
    max_reward: float = 1.0
    max_steps_in_episode: int = 20


class ChainAndSplit(TabularEnv, DiscreteEnv):
    """One decision, then a long chain: the optimal first action pays a small sure bonus at the
    end, every other one a large zero-mean random reward early on (Chunked-TD's Chain-and-Split).

    * Step 0: action 0 enters the deterministic chain (``right``); any other of the
      ``num_actions`` actions enters the other branch. Later actions have no effect.
    * On the other branch, the second step draws one of ``levels`` reward levels uniformly,
      evenly spaced over [−max_reward, max_reward], pays it, and shows it in the observation.
    * The episode ends after ``chain_length`` steps; on the chain the last step pays ``bonus``.

    Q(s_0, 0) = bonus and Q(s_0, a) = 0 for a ≠ 0 (γ = 1): the bonus is small against the other
    branch's noise, so a Monte-Carlo learner needs many episodes to separate the actions, and a
    TD(0) learner must carry the bonus back along the whole chain. The chain is fully
    predictable, which is what Chunked-TD exploits. Observation: [right, step / chain_length,
    level / levels] (the level counted from 1 once drawn, 0 before), as the official
    environment's (right, step, level) scaled into [0, 1]; with ``one_hot=1`` the one-hot
    vector of the state index instead (the paper's learners are tables: a network on one-hot
    states shares nothing between states). Task metric: ``p_optimal_first_action`` = π(0 | s_0).
    """

    def __init__(self, chain_length: int = 20, num_actions: int = 10, levels: int = 11,
                 one_hot: int = 0):
        super().__init__()
        if int(chain_length) < 3:
            raise ValueError(f"ChainAndSplit needs chain_length >= 3 (the level is drawn on "
                             f"the second step), got {chain_length}")
        if int(num_actions) < 2:
            raise ValueError(f"ChainAndSplit needs num_actions >= 2, got {num_actions}")
        if int(levels) < 1:
            raise ValueError(f"ChainAndSplit needs levels >= 1, got {levels}")
        self.chain_length, self._num_actions, self.levels = (int(chain_length), int(num_actions),
                                                             int(levels))
        self.one_hot = bool(one_hot)

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def obs_size(self) -> int:
        return self.num_states if self.one_hot else 3

    @property
    def default_params(self) -> ChainAndSplitParams:
        return ChainAndSplitParams(max_steps_in_episode=self.chain_length)

    def _level_reward(self, level: Array, params: ChainAndSplitParams) -> Array:
        """The reward of level 1 .. levels: evenly spaced over [−max_reward, max_reward]."""
        spacing = 2.0 / max(self.levels - 1, 1)
        centre = -1.0 + spacing * (level - 1).astype(jnp.float32)
        return params.max_reward * jnp.where(self.levels == 1, 0.0, centre)

    def step_env(self, key, state, action, params):
        right = jnp.where(state.step == 0, jnp.asarray(action == 0, jnp.int32), state.right)
        step = state.step + 1
        draw = (step == 2) & (right == 0)
        level = jnp.where(draw, 1 + jax.random.randint(key, (), 0, self.levels), state.level)
        reward = (jnp.where(draw, self._level_reward(level, params), 0.0)
                  + jnp.where((step == self.chain_length) & (right == 1), params.bonus, 0.0))
        state = ChainAndSplitState(step=step.astype(jnp.int32), right=right.astype(jnp.int32),
                                   level=level.astype(jnp.int32), time=state.time + 1)
        return (self.get_obs(state), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params):
        state = ChainAndSplitState(step=jnp.int32(0), right=jnp.int32(0), level=jnp.int32(0),
                                   time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        if self.one_hot:
            return jax.nn.one_hot(self.state_index(state), self.num_states, dtype=jnp.float32)
        return jnp.stack([state.right.astype(jnp.float32),
                          state.step / self.chain_length,
                          state.level / self.levels]).astype(jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return state.step >= self.chain_length

    # -- ground truth ---------------------------------------------------------------------------

    @property
    def num_states(self) -> int:
        """s_0, the chain's steps 1 .. L, the other branch's step 1, and its steps 2 .. L for
        each level."""
        return 1 + self.chain_length + 1 + (self.chain_length - 1) * self.levels

    def state_index(self, state: ChainAndSplitState) -> Array:
        L, C = self.chain_length, self.levels
        k, level = state.step, state.level
        other = jnp.where(k == 1, L + 1, L + 2 + (k - 2) * C + (level - 1))
        return jnp.where(k == 0, 0, jnp.where(state.right == 1, k, other)).astype(jnp.int32)

    def _tabular_arrays(self, params: ChainAndSplitParams) -> dict[str, Array]:
        L, C, A, S = self.chain_length, self.levels, self.num_actions, self.num_states
        transition = np.zeros((S, A, S), np.float32)
        bonus = np.zeros((S, A, S), np.float32)
        drawn = np.zeros((S, A, S), np.float32)  # which level a transition draws (1-based)
        observation = np.zeros((S, 3), np.float32)
        other = lambda k, c: L + 2 + (k - 2) * C + c  # noqa: E731  (c counted from 0)
        transition[0, 0, 1] = 1.0
        transition[0, 1:, L + 1] = 1.0
        for k in range(1, L):
            transition[k, :, k + 1] = 1.0
        bonus[L - 1, :, L] = 1.0
        for c in range(C):
            transition[L + 1, :, other(2, c)] = 1.0 / C
            drawn[L + 1, :, other(2, c)] = c + 1
            for k in range(2, L):
                transition[other(k, c), :, other(k + 1, c)] = 1.0
        for k in range(1, L + 1):
            observation[k] = [1.0, k / L, 0.0]
        observation[L + 1] = [0.0, 1.0 / L, 0.0]
        for k in range(2, L + 1):
            for c in range(C):
                observation[other(k, c)] = [0.0, k / L, (c + 1) / C]
        terminal = np.zeros(S, bool)
        terminal[L] = True
        terminal[[other(L, c) for c in range(C)]] = True
        levels = jnp.asarray(drawn)
        level_reward = jnp.where(levels > 0, self._level_reward(levels, params), 0.0)
        if self.one_hot:
            observation = np.eye(S, dtype=np.float32)
        return dict(transition=transition,
                    transition_reward=params.bonus * jnp.asarray(bonus) + level_reward,
                    initial=jax.nn.one_hot(0, S), terminal=terminal, observation=observation)

    def task_metrics(self, params, pi: Array) -> dict[str, Array]:
        """``p_optimal_first_action`` = π(0 | s_0), the action of the sure bonus."""
        del params
        chex.assert_shape(pi, (self.num_states, self.num_actions))
        return {"p_optimal_first_action": pi[0, 0]}

"""COCOA's (overlapping) tree MDP as a gymnax environment.

Meulemans, Schug, Kobayashi, Daw & Wayne, "Would I have gotten that reward? Long-term credit
assignment by counterfactual contribution analysis", NeurIPS 2023 (arXiv 2306.16803), and its
code ``seijin-kobayashi/cocoa`` (``ccoa/envs/tree.py`` with ``configs/tree.py``).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

# COCOA makes the reward depend on the action through this multiplier of the action index.
ACTION_PRIME = 9973


@struct.dataclass
class TreeMDPState(environment.EnvState):
    """Attributes:
    depth: int32 level in the tree; ``depth`` (the env's) means the episode is over.
    position: int32 index of the node within its level (0 in the terminal state).
    time: int32 steps taken in this episode (equals depth).
    """

    depth: jax.Array
    position: jax.Array
    time: jax.Array


@struct.dataclass
class TreeMDPParams(environment.EnvParams):
    """Attributes:
    max_steps_in_episode: time limit; only truncates when set below the tree depth.
    """

    max_steps_in_episode: int = 4


def level_sizes(depth: int, branching: int, state_overlap: int) -> list[int]:
    """Number of nodes at levels 0..depth: n_0 = 1, n_{i+1} = (b - o) n_i + o.

    This is the recurrence behind COCOA's closed form ((b-1)(b-o)^i - o) / (b-o-1): every node
    has ``b`` children, and consecutive nodes of a level share ``o`` of them.
    """
    sizes = [1]
    for _ in range(depth):
        sizes.append((branching - state_overlap) * sizes[-1] + state_overlap)
    return sizes


class TreeMDP(TabularEnv, DiscreteEnv):
    """COCOA's tree MDP with tunable state overlap and deterministic pseudo-random rewards.

    Level i of the tree has n_i nodes (``level_sizes``); the episode starts at the root and lasts
    exactly ``depth`` steps (default 4). From node (i, p), action a in {0..b-1} (b = ``branching``,
    default 6) pays r(i, p, a) and moves to node

        (i + 1, (p (b - o) + a - floor((b - o) / 2)) mod n_{i+1}),

    so consecutive nodes share ``o = state_overlap`` children (o = 0: a tree; o = b: the next
    node depends only on the last action). More overlap means states carry less information
    about past actions, which is what separates state-conditioned (HCA+) from reward-conditioned
    (COCOA) hindsight in the paper.

    Rewards are COCOA's deterministic table: with k(i, p) = sum_{j<i} n_j + p the node's index,

        r(i, p, a) = ((k + 9973 a + offset) mod m) - floor((m - 1) / 2),   m = num_reward_values,

    i.e. integers in {-2, ..., 2} for m = 5, and ``offset`` = ``jax.random.randint(
    PRNGKey(seed), (), 0, sum_{j<depth} n_j)`` as in the reference (COCOA uses env seeds 100-109).

    Observation: one-hot of the tabular state index (size ``num_states``, terminal last), a
    choice: COCOA feeds its tabular agent the raw triple (depth, position, offset), which carries
    the same information.

    Ground truth (a :class:`~jaxcredit.envs.tabular_env.TabularEnv`): ``tabular_mdp(params)``;
    ``sum_{i<depth} n_i + 1`` states (260 for depth 4, branching 6, overlap 0; 20 for overlap 6).
    Deterministic transitions and rewards.
    """

    def __init__(
        self,
        depth: int = 4,
        branching: int = 6,
        state_overlap: int = 0,
        seed: int = 100,
        num_reward_values: int = 5,
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"TreeMDP depth must be >= 1, got {depth}")
        if branching < 1:
            raise ValueError(f"TreeMDP branching must be >= 1, got {branching}")
        if not 0 <= state_overlap <= branching:
            raise ValueError(
                f"TreeMDP state_overlap must lie in [0, branching={branching}], got {state_overlap}"
            )
        if num_reward_values < 2:
            raise ValueError(f"TreeMDP num_reward_values must be >= 2, got {num_reward_values}")
        self.depth = int(depth)
        self.branching = int(branching)
        self.state_overlap = int(state_overlap)
        self.seed = int(seed)
        self.num_reward_values = int(num_reward_values)
        sizes = level_sizes(self.depth, self.branching, self.state_overlap)
        self.level_sizes = np.asarray(sizes, np.int64)
        # first_index[i] = tabular index of node (i, 0); first_index[depth] is the terminal state.
        self.first_index = np.concatenate([[0], np.cumsum(self.level_sizes[:-1])])
        self.num_states = int(self.first_index[-1]) + 1
        if self.num_states > 1_000_000:
            raise ValueError(f"TreeMDP with {self.num_states} states is too large")
        self.reward_offset = -((self.num_reward_values - 1) // 2)
        self.seed_offset = int(
            jax.random.randint(
                jax.random.key(self.seed, impl="threefry2x32"), (), 0, self.num_states - 1
            )
        )
        self.reward_table = self._reward_table_np()  # [num_states, branching]; terminal row 0
        self.next_table = self._next_table_np()  # [num_states, branching]

    # ------------------------------------------------------------------ gymnax API

    @property
    def obs_size(self) -> int:
        return self.num_states

    @property
    def default_params(self) -> TreeMDPParams:
        return TreeMDPParams(max_steps_in_episode=self.depth)

    def step_env(
        self,
        key: chex.PRNGKey,
        state: TreeMDPState,
        action: int | jax.Array,
        params: TreeMDPParams,
    ) -> tuple[jax.Array, TreeMDPState, jax.Array, jax.Array, dict[str, Any]]:
        del key  # deterministic
        node = jnp.asarray(self.first_index, jnp.int32)[state.depth] + state.position
        k = node + ACTION_PRIME * action + self.seed_offset
        reward = jnp.mod(k, self.num_reward_values) + self.reward_offset
        shift = self.branching - self.state_overlap
        next_depth = state.depth + 1
        next_size = jnp.asarray(self.level_sizes, jnp.int32)[jnp.minimum(next_depth, self.depth)]
        next_position = jnp.mod(state.position * shift + action - shift // 2, next_size)
        terminated = next_depth >= self.depth
        next_state = TreeMDPState(
            depth=next_depth,
            position=jnp.where(terminated, 0, next_position).astype(jnp.int32),
            time=state.time + 1,
        )
        info = {"discount": 1.0 - terminated.astype(jnp.float32)}
        obs = self.get_obs(next_state, params)
        obs, next_state = self._apply_transition_gradient_policy(obs, next_state)
        return obs, next_state, reward.astype(jnp.float32), terminated, info

    def reset_env(self, key: chex.PRNGKey, params: TreeMDPParams) -> tuple[jax.Array, TreeMDPState]:
        del key  # the root is the only start state
        state = TreeMDPState(depth=jnp.int32(0), position=jnp.int32(0), time=jnp.int32(0))
        return self.get_obs(state, params), state

    def get_obs(self, state: TreeMDPState, params=None, key=None) -> jax.Array:
        return jax.nn.one_hot(self.state_index(state), self.num_states, dtype=jnp.float32)

    def is_terminated(self, state: TreeMDPState, params: TreeMDPParams) -> jax.Array:
        return state.depth >= self.depth

    @property
    def num_actions(self) -> int:
        return self.branching

    def state_space(self, params: TreeMDPParams | None = None) -> spaces.Dict:
        return spaces.Dict(
            {
                "depth": spaces.Discrete(self.depth + 1),
                "position": spaces.Discrete(int(self.level_sizes.max())),
                "time": spaces.Discrete(self.depth + 1),
            }
        )

    # ------------------------------------------------------------------ tabular ground truth

    @property
    def reward_values(self) -> np.ndarray:
        """The reward support {offset, ..., offset + m - 1}."""
        return np.arange(self.num_reward_values) + self.reward_offset

    def state_index(self, state: TreeMDPState) -> jax.Array:
        """Tabular index sum_{j<depth} n_j + position (jittable); the terminal state is last."""
        first = jnp.asarray(self.first_index, jnp.int32)[jnp.minimum(state.depth, self.depth)]
        return jnp.where(state.depth >= self.depth, self.num_states - 1, first + state.position)

    def _tabular_arrays(self, params: TreeMDPParams | None = None) -> dict[str, jax.Array]:
        """Arguments of ``jaxcredit.exact.tabular.make_tabular_mdp`` (numpy-built tables)."""
        del params  # nothing in the params changes the untruncated MDP
        num_states = self.num_states
        terminal = np.zeros((num_states,), bool)
        terminal[-1] = True
        initial = np.zeros((num_states,), np.float32)
        initial[0] = 1.0
        return {
            "transition": jax.nn.one_hot(self.next_table, num_states, dtype=jnp.float32),
            "transition_reward": jnp.asarray(self.reward_table, jnp.float32),
            "initial": jnp.asarray(initial),
            "terminal": jnp.asarray(terminal),
            "observation": jnp.eye(num_states, dtype=jnp.float32),
        }

    def reward_distribution(
        self, params: TreeMDPParams | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Exact reward law given (s, a), for reward-conditioned hindsight (COCOA-reward).

        Returns:
          (values ``[m]`` = ``reward_values``, probs ``[S, A, m]``, one-hot; terminal: reward 0).
        """
        del params
        values = self.reward_values.astype(np.float32)
        probs = (self.reward_table[..., None] == values).astype(np.float32)
        return jnp.asarray(values), jnp.asarray(probs)

    # ------------------------------------------------------------------ numpy tables

    def _reward_table_np(self) -> np.ndarray:
        nodes = np.arange(self.num_states - 1)[:, None]
        actions = np.arange(self.branching)[None, :]
        k = nodes + ACTION_PRIME * actions + self.seed_offset
        table = np.mod(k, self.num_reward_values) + self.reward_offset
        return np.concatenate([table, np.zeros((1, self.branching), table.dtype)]).astype(
            np.float32
        )

    def _next_table_np(self) -> np.ndarray:
        shift = self.branching - self.state_overlap
        table = np.full((self.num_states, self.branching), self.num_states - 1, np.int32)
        for level in range(self.depth - 1):
            for position in range(self.level_sizes[level]):
                for action in range(self.branching):
                    child = (position * shift + action - shift // 2) % self.level_sizes[level + 1]
                    table[self.first_index[level] + position, action] = (
                        self.first_index[level + 1] + child
                    )
        return table


"""The diagnostic tasks of Harutyunyan et al. (2019), "Hindsight Credit Assignment", Fig. 2.

Shortcut, Delayed effect and Ambiguous bandit as pure gymnax (>= 1.0) environments, each a
:class:`~jaxcredit.envs.tabular_env.TabularEnv`: exact tabular MDP (``env.tabular_mdp(params)``),
state index (``env.state_index(state)``) and the task metric ``p_optimal_first_action``
(``env.task_metrics(params, pi)``).
The paper's figure captions leave details open; the choices made here are written in each class
docstring and in docs/envs.md.

Common conventions: actions are integers; observations are float32 one-hot vectors; the time limit
``params.max_steps_in_episode`` is never reached before the natural end of an episode, and
``truncated`` is reported only when the episode did not terminate at the same step.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

Array = jax.Array


class _OptimalFirstAction(TabularEnv, DiscreteEnv):
    """The three tasks start in state 0, where action 0 is the optimal choice.

    (Shortcut: the shortcut; DelayedEffect: the +1 branch; AmbiguousBandit: the HI arm, optimal
    while ε < 1/2 and μ_HI > μ_LO, as in the defaults.)
    """

    num_actions = 2
    # Whole episodes per window, from the HCA-tasks experiment (experiments/hca_tasks/run.py,
    # TASKS): the number of parallel environments and of steps per window.
    window: tuple[int, int]
    estimator_lr = 1e-3  # the hindsight models' rate there (run.py, HPARAMS)

    def recommended_settings(self, params) -> dict:
        """The HCA-tasks experiment's settings (experiments/hca_tasks/run.py: ``HPARAMS``,
        ``TASKS``): undiscounted, windows of whole episodes, a constant rate of 3e-3, a small
        entropy bonus, the gradient clipped at norm 1, evaluation every 10 updates (``window``: the
        environments and steps per update). The
        engine's defaults (PPO's CartPole settings: 4 × 128-step windows, 2.5e-4 annealed)
        left P(optimal first action) at 0.504 on DelayedEffect n=30 σ=1 after 600 episodes;
        these end at 0.781 and 0.749 (A2C+GAE, two sets of 16 seeds)."""
        num_envs, num_steps = self.window
        return dict(gamma=1.0, num_envs=num_envs, num_steps=num_steps, lr=3e-3,
                    anneal_lr=False, ent_coef=0.003, max_grad_norm=1.0,
                    estimator_lr=self.estimator_lr, eval_every=10, eval_episodes=16)

    def task_metrics(self, params, pi: Array) -> dict[str, Array]:
        """``p_optimal_first_action`` = π(a* = 0 | s_0 = 0): the decision the task is about."""
        del params
        chex.assert_shape(pi, (self.num_states, self.num_actions))
        return {"p_optimal_first_action": pi[0, 0]}


# --------------------------------------------------------------------------------------------
# Shortcut
# --------------------------------------------------------------------------------------------


@struct.dataclass
class ShortcutState(environment.EnvState):
    position: Array
    time: int


@struct.dataclass
class ShortcutParams(environment.EnvParams):
    slip_prob: float = 0.1
    step_reward: float = -1.0
    goal_reward: float = 1.0
    max_steps_in_episode: int = 5


class Shortcut(_OptimalFirstAction, environment.Environment[ShortcutState, ShortcutParams]):
    """Chain with a shortcut (Harutyunyan et al. 2019, Fig. 2 left).

    States 0..n−1 of a chain; the episode starts in 0 and ends on arrival in the goal n−1.

    * action 0 ("shortcut") jumps to the goal;
    * action 1 ("long") moves one state along the chain, and with probability ``slip_prob`` (0.1)
      also jumps to the goal.

    Rewards (choice among the public reimplementations): every step pays ``step_reward`` (−1) and
    the step that arrives in the goal also pays ``goal_reward`` (+1), so a shortcut step pays 0
    and a long step that does not reach the goal pays −1. The optimal policy takes the shortcut:
    return 0 in one step. Observation: one-hot position ``[n]``. ``n`` counts the goal state.
    """

    window = (16, 8)  # the HCA-tasks experiment's (episodes vary in length: a window is 8 steps)

    def __init__(self, n: int = 5):
        super().__init__()
        if int(n) < 2:
            raise ValueError(f"Shortcut needs n >= 2 states (got n={n}).")
        self.n = int(n)

    @property
    def obs_size(self) -> int:
        return self.n

    @property
    def default_params(self) -> ShortcutParams:
        return ShortcutParams(max_steps_in_episode=self.n)

    def step_env(self, key, state, action, params) -> tuple[Array, ShortcutState, Array, Array,
                                                            dict[str, Any]]:
        goal = self.n - 1
        slip = jax.random.bernoulli(key, params.slip_prob)
        jump = jnp.logical_or(action == 0, slip)
        position = jnp.where(jump, goal, jnp.minimum(state.position + 1, goal)).astype(jnp.int32)
        reward = params.step_reward + params.goal_reward * (position == goal)
        state = ShortcutState(position=position, time=state.time + 1)
        return (self.get_obs(state), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params) -> tuple[Array, ShortcutState]:
        state = ShortcutState(position=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        return jax.nn.one_hot(state.position, self.n, dtype=jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return state.position == self.n - 1

    @property
    def num_states(self) -> int:
        return self.n

    def state_index(self, state: ShortcutState) -> Array:
        """Tabular index of a state: its position."""
        return jnp.asarray(state.position, jnp.int32)

    def _tabular_arrays(self, params: ShortcutParams) -> dict[str, Array]:
        n, goal = self.n, self.n - 1
        move = np.zeros((n, n), np.float32)
        move[np.arange(n - 1), np.arange(1, n)] = 1.0
        to_goal = np.zeros((n, n), np.float32)
        to_goal[:, goal] = 1.0
        transition = jnp.stack(
            [jnp.asarray(to_goal), (1.0 - params.slip_prob) * move + params.slip_prob * to_goal],
            axis=1)
        arrive = (jnp.arange(n) == goal).astype(jnp.float32)
        reward = params.step_reward + params.goal_reward * arrive
        return dict(
            transition=transition,
            transition_reward=jnp.broadcast_to(reward, (n, 2, n)),
            initial=jax.nn.one_hot(0, n),
            terminal=jnp.arange(n) == goal,
            observation=jnp.eye(n, dtype=jnp.float32),
        )


# --------------------------------------------------------------------------------------------
# Delayed effect
# --------------------------------------------------------------------------------------------


@struct.dataclass
class DelayedEffectState(environment.EnvState):
    position: Array  # 0 start, 1..n aliased chain, n + 1 final
    branch: Array  # the first action
    time: int


@struct.dataclass
class DelayedEffectParams(environment.EnvParams):
    sigma: float = 0.1
    final_reward: float = 1.0
    max_steps_in_episode: int = 4


class DelayedEffect(_OptimalFirstAction,
                    environment.Environment[DelayedEffectState, DelayedEffectParams]):
    """First action decides a reward paid n steps later (Harutyunyan et al. 2019, Fig. 2 centre).

    * Step 0, start state: action a ∈ {0, 1} picks the branch; reward 0.
    * Steps 1..n: the agent walks an aliased chain of n middle states whatever it does. Leaving a
      middle state pays white noise N(0, σ²); leaving the last one also pays +``final_reward`` if
      the first action was 0 and −``final_reward`` if it was 1, and ends the episode in the final
      state of that branch.

    Episodes last exactly n + 1 steps. Observation: one-hot ``[4]`` of (start, middle, final after
    action 0, final after action 1): all 2n middle states share one observation (a POMDP), and only
    the final observation reveals the first action. Q(s_0, 0) − Q(s_0, 1) = 2 γ^n · final_reward;
    σ only adds variance. Optimal return +1, uniform-policy return 0.

    ``n`` (constructor) fixes the structure; ``sigma`` is a parameter (default 0.1, the middle of
    the {0, 0.1, 1} range used in public reproductions). Task metric: ``p_optimal_first_action``
    = π(0 | start), the first action of the +1 branch.
    """

    def __init__(self, n: int = 3):
        super().__init__()
        if int(n) < 1:
            raise ValueError(f"DelayedEffect needs a chain of n >= 1 states (got n={n}).")
        self.n = int(n)

    @property
    def window(self) -> tuple[int, int]:
        """4 whole episodes of n + 1 steps per update, and the model's rate 3e-3, as in the
        showcase (jaxcredit/showcase.py), whose A2C+GAE ends at 0.741 ± 0.067 after 600 episodes
        at n=30 σ=1 (32 seeds)."""
        return 4, self.n + 1

    estimator_lr = 3e-3

    obs_size = 4

    @property
    def default_params(self) -> DelayedEffectParams:
        return DelayedEffectParams(max_steps_in_episode=self.n + 1)

    def step_env(self, key, state, action, params):
        at_start = state.position == 0
        branch = jnp.where(at_start, action, state.branch).astype(jnp.int32)
        noise = params.sigma * jax.random.normal(key, (), jnp.float32)
        sign = 1.0 - 2.0 * branch.astype(jnp.float32)
        reward = (jnp.where(at_start, 0.0, noise)
                  + jnp.where(state.position == self.n, sign * params.final_reward, 0.0))
        state = DelayedEffectState(position=(state.position + 1).astype(jnp.int32), branch=branch,
                                   time=state.time + 1)
        return (self.get_obs(state), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params):
        state = DelayedEffectState(position=jnp.int32(0), branch=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        kind = jnp.where(state.position == 0, 0,
                         jnp.where(state.position <= self.n, 1, 2 + state.branch))
        return jax.nn.one_hot(kind, 4, dtype=jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return state.position == self.n + 1

    @property
    def num_states(self) -> int:
        return 2 * self.n + 3

    def state_index(self, state: DelayedEffectState) -> Array:
        """0 start; 1 + 2(k−1) + b middle state k of branch b; 2n + 1 + b final of branch b."""
        k, b = state.position, state.branch
        return jnp.where(k == 0, 0, jnp.where(k <= self.n, 1 + 2 * (k - 1) + b,
                                              2 * self.n + 1 + b)).astype(jnp.int32)

    def _tabular_arrays(self, params: DelayedEffectParams) -> dict[str, Array]:
        n, num = self.n, self.num_states
        transition = np.zeros((num, 2, num), np.float32)
        final = np.zeros((num, 2, num), np.float32)  # sign of the final reward
        noisy = np.zeros((num, 2, num), np.float32)
        for b in range(2):
            transition[0, b, 1 + b] = 1.0
            for k in range(1, n + 1):
                s = 1 + 2 * (k - 1) + b
                nxt = 1 + 2 * k + b if k < n else 2 * n + 1 + b
                transition[s, :, nxt] = 1.0
                noisy[s, :, nxt] = 1.0
                if k == n:
                    final[s, :, nxt] = 1.0 - 2.0 * b
        kind = np.concatenate([[0], np.ones(2 * n, np.int64), [2, 3]])
        return dict(
            transition=transition,
            transition_reward=params.final_reward * jnp.asarray(final),
            transition_reward_std=params.sigma * jnp.asarray(noisy),
            initial=jax.nn.one_hot(0, num),
            terminal=np.arange(num) >= 2 * n + 1,
            observation=np.eye(4, dtype=np.float32)[kind],
        )


# --------------------------------------------------------------------------------------------
# Ambiguous bandit
# --------------------------------------------------------------------------------------------


@struct.dataclass
class AmbiguousBanditState(environment.EnvState):
    position: Array  # 0 start, 1 the HI outcome state, 2 the LO outcome state
    time: int


@struct.dataclass
class AmbiguousBanditParams(environment.EnvParams):
    epsilon: float = 0.1
    mean_hi: float = 2.0
    mean_lo: float = 1.0
    sigma: float = 1.5
    max_steps_in_episode: int = 1


class AmbiguousBandit(_OptimalFirstAction,
                      environment.Environment[AmbiguousBanditState, AmbiguousBanditParams]):
    """Two-armed bandit with crossed outcomes (Harutyunyan et al. 2019, Fig. 2 right).

    Action 0 (HI) leads to the HI state and action 1 (LO) to the LO state, except that with
    probability ε (0.1) each lands in the other one. The reward of the single step is
    N(μ_HI = 2, σ²) in the HI state and N(μ_LO = 1, σ²) in the LO state, σ = 1.5, so luck and skill
    overlap. Uniform policy: Q = (1.9, 1.1), V = 1.5, A = ±0.4; optimal return 1.9.
    Observation: one-hot ``[3]`` of (start, HI, LO). Task metric: ``p_optimal_first_action`` =
    π(HI | start).
    """

    window = (16, 4)  # the HCA-tasks experiment's: whole episodes, several per window

    obs_size = 3

    @property
    def default_params(self) -> AmbiguousBanditParams:
        return AmbiguousBanditParams()

    def step_env(self, key, state, action, params):
        cross_key, noise_key = jax.random.split(key)
        cross = jax.random.bernoulli(cross_key, params.epsilon)
        outcome = jnp.where(cross, 1 - action, action).astype(jnp.int32)
        mean = jnp.where(outcome == 0, params.mean_hi, params.mean_lo)
        reward = mean + params.sigma * jax.random.normal(noise_key, (), jnp.float32)
        state = AmbiguousBanditState(position=1 + outcome, time=state.time + 1)
        return (self.get_obs(state), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params):
        state = AmbiguousBanditState(position=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        return jax.nn.one_hot(state.position, 3, dtype=jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return state.position > 0

    @property
    def num_states(self) -> int:
        return 3

    def state_index(self, state: AmbiguousBanditState) -> Array:
        """0 start, 1 HI outcome, 2 LO outcome."""
        return jnp.asarray(state.position, jnp.int32)

    def _tabular_arrays(self, params: AmbiguousBanditParams) -> dict[str, Array]:
        eps = params.epsilon
        transition = jnp.zeros((3, 2, 3)).at[0, 0].set(jnp.array([0.0, 1.0 - eps, eps]))
        transition = transition.at[0, 1].set(jnp.array([0.0, eps, 1.0 - eps]))
        means = jnp.array([0.0, params.mean_hi, params.mean_lo])
        stds = jnp.array([0.0, params.sigma, params.sigma])
        return dict(
            transition=transition,
            transition_reward=jnp.broadcast_to(means, (3, 2, 3)),
            transition_reward_std=jnp.broadcast_to(stds, (3, 2, 3)),
            initial=jnp.array([1.0, 0.0, 0.0]),
            terminal=jnp.array([False, True, True]),
            observation=jnp.eye(3, dtype=jnp.float32),
        )

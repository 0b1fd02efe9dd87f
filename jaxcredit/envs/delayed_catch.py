"""Delayed Catch (Synthetic Returns): k games of bsuite Catch in one episode, their rewards paid
together at the end.

Raposo, Ritter, Santoro, Wayne, Weber, Botvinick, van Hasselt & Song, "Synthetic Returns for
Long-Term Credit Assignment", arXiv 2102.12425 (2021): the catch of each game is rewarded only
at the end of the episode, so the credit for a catch must cross every later game. The game is
bsuite's Catch as gymnax writes it (``gymnax/environments/bsuite/catch.py``: ``rows = 10``,
``columns = 5``, the ball on row 0 in a uniform column, the paddle at the bottom centre; actions
left / stay / right; the ball falls one row per step and the game ends when it reaches the
bottom row, rows − 1 = 9 steps, with +1 if the paddle is under it, else −1). Here the games
follow one another without a reset of the episode (each new game is a fresh Catch start: a new
ball, the paddle back at the centre) and every step pays 0 except the last of the k-th game,
which pays the sum of the k games' ±1. The re-creation ``twni2016/pomdp-baselines``
(``envs/pomdp/memory/catch.py``, ``DelayedCatch``) registers ``runs`` ∈ {1, 2, 5, 10, 20, 40}
on a 7 × 7 board; the default k = 20 is jaxcredit's choice among them (docs/envs.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv

Array = jax.Array


@struct.dataclass
class DelayedCatchState(environment.EnvState):
    ball_x: Array
    ball_y: Array
    paddle_x: Array
    caught: Array  # the sum of the ±1 of the games finished so far (withheld)
    time: int


@struct.dataclass
class DelayedCatchParams(environment.EnvParams):
    max_steps_in_episode: int = 180


class DelayedCatch(DiscreteEnv):
    """``games`` games of bsuite Catch in a row, every catch's ±1 withheld and their sum paid at
    the end of the episode (Raposo et al. 2021's delayed Catch).

    * Board ``rows`` × ``columns`` (10 × 5, bsuite's); actions 0 left, 1 stay, 2 right (the
      paddle stops at the border).
    * A game: the ball starts on row 0 in a uniform column, the paddle at the bottom centre;
      the ball falls one row per step; after rows − 1 steps it reaches the bottom row: +1 if the
      paddle is under it, else −1 (withheld). The next game starts at once.
    * The episode is ``games`` × (rows − 1) steps (k = 20: 180) and terminates after the last;
      only that step pays: the sum of the games' ±1.
    * Observation: the board, rows × columns floats, 1 on the ball and on the paddle
      (bsuite's), flattened row-major (50 floats); nothing of the withheld sum.

    Optimal return k (the paddle reaches any column in time: at most 2 moves from the centre in
    9 steps). Any policy blind to the ball catches with probability 1/columns (the ball's
    column is uniform and independent of the paddle's), so the uniformly random paddle's return
    is exactly k·(2/5 − 1) = −0.6·k (−12 at k = 20).
    """

    num_actions = 3
    obs_size: int

    def __init__(self, games: int = 20, rows: int = 10, columns: int = 5):
        super().__init__()
        if int(games) < 1:
            raise ValueError(f"DelayedCatch needs games >= 1, got {games}")
        if int(rows) < 2 or int(columns) < 1:
            raise ValueError(f"DelayedCatch needs rows >= 2, columns >= 1, got {rows}, {columns}")
        self.games, self.rows, self.columns = int(games), int(rows), int(columns)
        self.obs_size = self.rows * self.columns

    @property
    def name(self) -> str:
        return "DelayedCatch"

    @property
    def game_length(self) -> int:
        return self.rows - 1

    @property
    def episode_length(self) -> int:
        return self.games * self.game_length

    @property
    def default_params(self) -> DelayedCatchParams:
        return DelayedCatchParams(max_steps_in_episode=self.episode_length)

    def _new_ball(self, key) -> Array:
        return jax.random.randint(key, (), 0, self.columns, dtype=jnp.int32)

    def step_env(self, key, state, action, params):
        paddle_x = jnp.clip(state.paddle_x + action - 1, 0, self.columns - 1)
        ball_y = state.ball_y + 1
        landed = ball_y == self.rows - 1
        caught = state.caught + jnp.where(
            landed, jnp.where(paddle_x == state.ball_x, 1, -1), 0)
        time = state.time + 1
        done = time >= self.episode_length
        reward = jnp.where(done, caught, 0).astype(jnp.float32)
        # A landed ball starts the next game (a new ball, the paddle back at the centre), except
        # after the last game: the final observation shows where the last ball landed.
        restart = landed & ~done
        new = DelayedCatchState(
            ball_x=jnp.where(restart, self._new_ball(key), state.ball_x),
            ball_y=jnp.where(restart, 0, ball_y).astype(jnp.int32),
            paddle_x=jnp.where(restart, self.columns // 2, paddle_x).astype(jnp.int32),
            caught=caught.astype(jnp.int32), time=time)
        return self.get_obs(new), new, reward, done, {}

    def reset_env(self, key, params):
        state = DelayedCatchState(ball_x=self._new_ball(key), ball_y=jnp.int32(0),
                                  paddle_x=jnp.int32(self.columns // 2),
                                  caught=jnp.int32(0), time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        board = jnp.zeros((self.rows, self.columns), jnp.float32)
        board = board.at[state.ball_y, state.ball_x].set(1.0)
        board = board.at[self.rows - 1, state.paddle_x].set(1.0)
        return board.reshape(-1)

    def is_terminated(self, state, params) -> Array:
        return state.time >= self.episode_length

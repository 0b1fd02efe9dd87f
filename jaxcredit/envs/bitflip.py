"""Bit flipping (Andrychowicz et al. 2017, "Hindsight Experience Replay", Sec. 3.1 / App. A).

The state is n bits, the goal is n bits, and action i flips bit i. The reward of a step is
r = −[s' ≠ g], evaluated on the next state: 0 on the step that reaches the goal, −1 otherwise.
Choices where the paper is silent (following the public reimplementations):

* Start state and goal are uniform with g ≠ s_0 (g = s_0 XOR d, d uniform over non-zero masks).
* Reaching the goal **terminates** the episode; otherwise it is truncated after n steps (the
  paper's "episode length equal to the number of bits").

Observation: float32 ``concat(state, goal)`` of size 2n. BitFlip is goal-conditioned
(``jaxcredit.envs.goals``): the achieved goal is the state's bits, the desired goal the last n
entries, :func:`goal_reward` is ``compute_reward``. ``info`` also carries ``achieved_goal`` (the
bits after the step, before any auto-reset) and ``desired_goal``. Optimal return from Hamming
distance d: −(d − 1). No tabular ground truth (4^n states).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv

Array = jax.Array


@struct.dataclass
class BitFlipState(environment.EnvState):
    bits: Array  # [n] bool
    goal: Array  # [n] bool
    time: int


@struct.dataclass
class BitFlipParams(environment.EnvParams):
    max_steps_in_episode: int = 10


def goal_reward(achieved_goal: Array, desired_goal: Array) -> Array:
    """r = −[achieved ≠ desired] over the last axis (0 on success, −1 otherwise)."""
    success = jnp.all(jnp.asarray(achieved_goal) == jnp.asarray(desired_goal), axis=-1)
    return success.astype(jnp.float32) - 1.0


class BitFlip(DiscreteEnv):
    """Goal-conditioned bit flipping with n bits (n = 1 ... hundreds; the paper uses up to 50)."""

    terminates_on_success = True

    def __init__(self, n: int = 10):
        super().__init__()
        if int(n) < 1:
            raise ValueError(f"BitFlip needs n >= 1 bits (got n={n}).")
        self.n = int(n)

    # The goal-conditioned protocol (jaxcredit.envs.goals).
    @property
    def goal_size(self) -> int:
        return self.n

    def desired_goal(self, obs: Array) -> Array:
        return obs[..., self.n:]

    def achieved_goal(self, obs: Array) -> Array:
        return obs[..., :self.n]

    def replace_goal(self, obs: Array, goal: Array) -> Array:
        return jnp.concatenate([obs[..., :self.n], goal.astype(obs.dtype)], axis=-1)

    def compute_reward(self, achieved: Array, desired: Array) -> Array:
        return goal_reward(achieved, desired)

    def success(self, achieved: Array, desired: Array) -> Array:
        return jnp.all(achieved == desired, axis=-1)

    @property
    def obs_size(self) -> int:
        return 2 * self.n

    @property
    def default_params(self) -> BitFlipParams:
        return BitFlipParams(max_steps_in_episode=self.n)

    def step_env(self, key, state, action, params):
        flip = jnp.arange(self.n) == action
        bits = jnp.logical_xor(state.bits, flip)
        state = BitFlipState(bits=bits, goal=state.goal, time=state.time + 1)
        info = {
            "achieved_goal": bits.astype(jnp.float32),
            "desired_goal": state.goal.astype(jnp.float32),
            "is_success": self.is_terminated(state, params),
        }
        reward = goal_reward(bits, state.goal)
        return self.get_obs(state), state, reward, self.is_terminated(state, params), info

    def reset_env(self, key, params):
        bits_key, mask_key = jax.random.split(key)
        bits = jax.random.bernoulli(bits_key, 0.5, (self.n,))

        def draw(carry):
            k, _ = carry
            k, sub = jax.random.split(k)
            return k, jax.random.bernoulli(sub, 0.5, (self.n,))

        # Rejection sampling of a non-zero difference mask: uniform over goals g != s_0.
        _, mask = jax.lax.while_loop(lambda c: ~jnp.any(c[1]), draw,
                                     (mask_key, jnp.zeros(self.n, bool)))
        state = BitFlipState(bits=bits, goal=jnp.logical_xor(bits, mask), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        return jnp.concatenate([state.bits, state.goal]).astype(jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return jnp.all(state.bits == state.goal)

    @property
    def name(self) -> str:
        return f"BitFlip-{self.n}"

    @property
    def num_actions(self) -> int:
        return self.n

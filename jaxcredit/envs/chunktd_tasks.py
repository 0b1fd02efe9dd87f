"""Chunked-TD's other two tasks (Ramesh et al., ICML 2024, arXiv 2405.03878): Accumulated-Charge
and the key-to-door with distractor features.

Both are the official environments of ``Aditya-Ramesh-10/chunktd`` (``environments/rl_envs.py``:
``AccumulatedChargeChoice``, ``SimpleKeytoDoorWithDistractors``) as gymnax environments, with the
defaults of the paper's scripts (``scripts/train_acc_charge.py``, ``scripts/train_keytodoor.py``).
Their observations are vectors of small integers, which the paper's models predict feature by
feature; here they are scaled into [0, 1] for the networks, and each environment says how a
transition reads as one category per feature (``transition_code``, ``transition_categories``:
what ``chunked model=features`` predicts). The key-to-door's reward is a sum over its features
(``reward_components``), which the vector λ of ``chunked lambda=vector`` follows.

Neither has a tabular MDP at the paper's sizes (Accumulated-Charge has 2 × 201 × 202 (plus,
charge, time) triples, the key-to-door about 3,200 states): the metric is the paper's regret, as
``eval/success_rate`` (``episode_success``): the share of episodes whose choice was not
regretful.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from jaxcredit.envs.base import DiscreteEnv

Array = jax.Array


@struct.dataclass
class AccumulatedChargeState(environment.EnvState):
    plus: Array  # the first action's sign, 1 for c_0 = +1 (0 before it is taken)
    charge: Array  # the charge accumulated so far
    time: int  # steps taken


@struct.dataclass
class AccumulatedChargeParams(environment.EnvParams):
    bonus: float = 0.1
    max_steps_in_episode: int = 201


class AccumulatedCharge(DiscreteEnv):
    """A choice of sign, then a long stretch of random charge that the choice multiplies.

    * Step 0: action 1 sets c_0 = +1 (``plus``), action 0 sets c_0 = −1. Later actions do nothing.
    * At ``points`` fixed times in 1 .. horizon − 1 (drawn once from ``points_seed``, as the
      official environment draws them from its seed), a Binomial(horizon / points, p_charged)
      charge is added; between them nothing happens.
    * Step ``horizon`` ends the episode and pays bonus·plus + ½·c_0·(charge − horizon·p_charged).

    Q(s_0, plus) − Q(s_0, minus) = bonus (γ = 1): the charge's term has mean 0 and, at the
    defaults, a standard deviation of 3.5 against the bonus of 0.1. Between the accumulation
    times the process is deterministic, which Chunked-TD exploits; a Monte-Carlo return carries
    the whole charge noise to s_0. Defaults are ``train_acc_charge.py``'s: horizon 200, 10
    points, p_charged 0.5, bonus 0.1, points seed 45 (its seed 44 + 1). Observation: (plus,
    charge / horizon, time / (horizon + 1)); episodes last horizon + 1 steps. Success: the first
    action was plus (the paper's regretful choice is the other one).
    """

    def __init__(self, horizon: int = 200, points: int = 10, p_charged: float = 0.5,
                 points_seed: int = 45):
        if horizon < 2 or not 1 <= points <= horizon - 1 or horizon % points:
            raise ValueError(f"AccumulatedCharge needs horizon >= 2 and 1 <= points <= horizon - "
                             f"1 with points dividing horizon, got horizon={horizon}, "
                             f"points={points}")
        if not 0.0 <= p_charged <= 1.0:
            raise ValueError(f"AccumulatedCharge needs 0 <= p_charged <= 1, got {p_charged}")
        super().__init__()
        self.horizon, self.points, self.p_charged = horizon, points, p_charged
        self.per_point = horizon // points
        times = np.random.RandomState(points_seed).choice(np.arange(1, horizon), size=points,
                                                          replace=False)
        self.point_times = np.sort(times)
        self._is_point = jnp.zeros(horizon + 1, bool).at[self.point_times].set(True)
        # What chunked model=features predicts: the change of each feature (the official
        # CategoricalStateDeltaDynamicsModel), plus 0/1, charge 0 .. per_point, time always 1.
        self.transition_categories = (2, self.per_point + 1, 2)

    num_actions = 2
    obs_size = 3

    @property
    def default_params(self) -> AccumulatedChargeParams:
        return AccumulatedChargeParams(max_steps_in_episode=self.horizon + 1)

    def step_env(self, key, state, action, params):
        t = state.time
        plus = jnp.where(t == 0, jnp.asarray(action == 1, jnp.int32), state.plus)
        charge_here = jnp.sum(jax.random.bernoulli(key, self.p_charged, (self.per_point,)))
        charge = state.charge + jnp.where(self._is_point[jnp.minimum(t, self.horizon)],
                                          charge_here, 0).astype(jnp.int32)
        sign = 2.0 * plus.astype(jnp.float32) - 1.0
        final = (params.bonus * plus + 0.5 * sign * charge
                 - 0.5 * sign * self.horizon * self.p_charged)
        reward = jnp.where(t == self.horizon, final, 0.0)
        state = AccumulatedChargeState(plus=plus, charge=charge, time=t + 1)
        return (self.get_obs(state), state, jnp.asarray(reward, jnp.float32),
                self.is_terminated(state, params), {})

    def reset_env(self, key, params):
        state = AccumulatedChargeState(plus=jnp.int32(0), charge=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        return jnp.stack([state.plus.astype(jnp.float32), state.charge / self.horizon,
                          jnp.asarray(state.time, jnp.float32) / (self.horizon + 1)]
                         ).astype(jnp.float32)

    def is_terminated(self, state, params) -> Array:
        return jnp.asarray(state.time > self.horizon)

    def features(self, obs: Array) -> Array:
        """The observation's integers (plus, charge, time)."""
        scale = jnp.asarray([1.0, self.horizon, self.horizon + 1.0])
        return jnp.round(obs * scale).astype(jnp.int32)

    def transition_code(self, obs: Array, next_obs: Array) -> Array:
        """The change of each feature, clipped into its categories (``transition_categories``)."""
        delta = self.features(next_obs) - self.features(obs)
        return jnp.clip(delta, 0, jnp.asarray(self.transition_categories) - 1)

    def transition_law(self, obs: Array, action: Array) -> Array:
        """``[..., 3, C]``: the exact law of each feature's change given (s, a), C =
        ``max(transition_categories)``: plus moves only at step 0 (to the action), the charge
        by a Binomial(horizon / points, p_charged) at the accumulation times, time by 1."""
        width = max(self.transition_categories)
        t = self.features(obs)[..., 2]
        first = (t == 0)[..., None]
        plus = jnp.where(first, jax.nn.one_hot((action == 1).astype(jnp.int32), width),
                         jax.nn.one_hot(0, width))
        k = jnp.arange(width)
        n, p = self.per_point, self.p_charged
        log_pmf = (jax.scipy.special.gammaln(n + 1.0) - jax.scipy.special.gammaln(k + 1.0)
                   - jax.scipy.special.gammaln(jnp.maximum(n - k, 0) + 1.0)
                   + k * jnp.log(p) + (n - k) * jnp.log1p(-p))
        binomial = jnp.where(k <= n, jnp.exp(log_pmf), 0.0)
        at_point = self._is_point[jnp.clip(t, 0, self.horizon)][..., None]
        charge = jnp.where(at_point, binomial, jax.nn.one_hot(0, width))
        time = jnp.broadcast_to(jax.nn.one_hot(1, width), charge.shape)
        return jnp.stack([plus, charge, time], axis=-2)

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The first action was plus (obs at time 0, plus set after it)."""
        del reward
        return (self.features(obs)[..., 2] == 0) & (self.features(next_obs)[..., 0] == 1)


@struct.dataclass
class KeyToDoorDistractorsState(environment.EnvState):
    has_key: Array
    distractors: Array  # [num_distractors] 0/1
    treasure: Array
    time: int  # steps taken


@struct.dataclass
class KeyToDoorDistractorsParams(environment.EnvParams):
    max_steps_in_episode: int = 100


class KeyToDoorDistractors(DiscreteEnv):
    """Take the key at the first step, open the door at the last; coins flip in between.

    * Step 0: action 0 takes the key (action 1 leaves it).
    * Every step draws ``num_distractors`` fair coins (the distractor features); the door
      feature is 1 on the last step's observation.
    * Step ``num_steps`` − 1 ends the episode: with the key and action 1 (open) the treasure
      feature is 1; the coins are 0.

    The reward is a sum over the features of the observation after the step: each coin pays
    1/(num_distractors·num_steps), the treasure 1/num_steps (``reward_components``). At the
    defaults (``train_keytodoor.py``: 100 steps, 4 coins) the treasure is worth 0.01 and the
    coins sum to 0.5 ± 0.025 per episode: their noise is 2.5 times the key's value, but it is
    noise of features the key does not touch, which a vector λ (one per reward feature) can cut
    off while following the treasure's feature through the episode. Observation: (has_key,
    door, coins…, step / num_steps, treasure). Success: the treasure (the paper's regretful
    choices are the episodes without it).
    """

    def __init__(self, num_steps: int = 100, num_distractors: int = 4):
        if num_steps < 2 or num_distractors < 0:
            raise ValueError(f"KeyToDoorDistractors needs num_steps >= 2 and num_distractors >= "
                             f"0, got {num_steps}, {num_distractors}")
        super().__init__()
        self.num_steps, self.num_distractors = num_steps, num_distractors
        self.obs_size = num_distractors + 4
        # What chunked model=features predicts: the next value of every feature.
        self.transition_categories = (2, 2) + (2,) * num_distractors + (num_steps + 1, 2)
        weights = np.zeros(self.obs_size, np.float32)
        weights[2:2 + num_distractors] = 1.0 / (max(num_distractors, 1) * num_steps)
        weights[-1] = 1.0 / num_steps
        self.reward_weights = weights

    num_actions = 2

    @property
    def default_params(self) -> KeyToDoorDistractorsParams:
        return KeyToDoorDistractorsParams(max_steps_in_episode=self.num_steps)

    def step_env(self, key, state, action, params):
        t = state.time
        has_key = jnp.where(t == 0, jnp.asarray(action == 0, jnp.int32), state.has_key)
        last = t + 1 == self.num_steps
        coins = jax.random.bernoulli(key, 0.5, (self.num_distractors,)).astype(jnp.int32)
        coins = jnp.where(last, 0, coins)
        treasure = (last & (has_key == 1) & (action == 1)).astype(jnp.int32)
        state = KeyToDoorDistractorsState(has_key=has_key, distractors=coins, treasure=treasure,
                                          time=t + 1)
        obs = self.get_obs(state)
        reward = jnp.sum(self.reward_components(obs, obs))
        return obs, state, reward, self.is_terminated(state, params), {}

    def reset_env(self, key, params):
        state = KeyToDoorDistractorsState(
            has_key=jnp.int32(0), distractors=jnp.zeros(self.num_distractors, jnp.int32),
            treasure=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> Array:
        door = jnp.asarray(state.time == self.num_steps - 1, jnp.float32)
        return jnp.concatenate([
            jnp.stack([state.has_key.astype(jnp.float32), door]),
            state.distractors.astype(jnp.float32),
            jnp.stack([jnp.asarray(state.time, jnp.float32) / self.num_steps,
                       state.treasure.astype(jnp.float32)])])

    def is_terminated(self, state, params) -> Array:
        return jnp.asarray(state.time >= self.num_steps)

    def features(self, obs: Array) -> Array:
        """The observation's integers (has_key, door, coins…, step, treasure)."""
        scale = jnp.ones(self.obs_size).at[-2].set(self.num_steps)
        return jnp.round(obs * scale).astype(jnp.int32)

    def transition_code(self, obs: Array, next_obs: Array) -> Array:
        """The next value of every feature."""
        del obs
        return self.features(next_obs)

    def transition_law(self, obs: Array, action: Array) -> Array:
        """``[..., obs_size, C]``: the exact law of each feature's next value given (s, a), C =
        ``num_steps + 1``: the coins fair except on the last step (0), the rest deterministic."""
        width = max(self.transition_categories)
        f = self.features(obs)
        t = f[..., -2]
        last = t + 1 == self.num_steps
        key = jnp.where(t == 0, (action == 0).astype(jnp.int32), f[..., 0])
        door = (t + 1 == self.num_steps - 1).astype(jnp.int32)
        treasure = (last & (key == 1) & (action == 1)).astype(jnp.int32)
        sure = lambda v: jax.nn.one_hot(v, width)  # noqa: E731
        coin = jnp.where(last[..., None], sure(0), jnp.zeros(width).at[:2].set(0.5))
        coins = jnp.broadcast_to(coin[..., None, :], coin.shape[:-1] + (self.num_distractors,
                                                                        width))
        return jnp.concatenate([sure(key)[..., None, :], sure(door)[..., None, :], coins,
                                sure(t + 1)[..., None, :], sure(treasure)[..., None, :]], axis=-2)

    def reward_components(self, obs: Array, next_obs: Array) -> Array:
        """``[..., obs_size]``: the reward of the step, feature by feature (it sums to the
        reward): the official ``next_obs * reward_weights``."""
        del obs
        return self.features(next_obs).astype(jnp.float32) * jnp.asarray(self.reward_weights)

    def episode_success(self, obs: Array, next_obs: Array, reward: Array) -> Array:
        """The treasure was found."""
        del obs, reward
        return self.features(next_obs)[..., -1] == 1

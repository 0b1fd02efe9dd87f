"""Task interleaving (COCOA's ``interleaving_stochastic``) as a gymnax environment.

Meulemans, Schug, Kobayashi, Daw & Wayne, "Would I have gotten that reward? Long-term credit
assignment by counterfactual contribution analysis", NeurIPS 2023 (arXiv 2306.16803), and its
code ``seijin-kobayashi/cocoa`` (``ccoa/envs/interleaving.py`` with
``configs/interleaving_stochastic_performance.py``).
"""

from __future__ import annotations

import itertools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.tabular_env import TabularEnv

PICK_LEFT, PICK_RIGHT = 0, 1
NUM_ACTIONS = 2
# Context status codes: closed; open without its key; open with its key.
CLOSED, OPEN, OPEN_WITH_KEY = 0, 1, 2
# Refuse to enumerate tabular MDPs beyond this many states (the dense [S, A, S] tensor).
MAX_TABULAR_STATES = 20_000


@struct.dataclass
class TaskInterleavingState(environment.EnvState):
    """Where the agent is and what each context is waiting for.

    Attributes:
      status: int32 [num_contexts]: 0 closed, 1 open without key, 2 open with key.
      context: int32 context of the current room.
      answer_room: bool, the current room is the context's answer room (else its query room).
      objects: int32 [2]: (unrewarded, rewarded) object shown, as indices into the context's
        ``num_objects`` unrewarded and rewarded objects; zeros in answer rooms.
      flip: int32, 1 when the rewarded object is on the right; zero in answer rooms.
      terminated: bool, the episode ended (probability ``die_prob`` per step).
      time: int32 steps taken in this episode.
    """

    status: jax.Array
    context: jax.Array
    answer_room: jax.Array
    objects: jax.Array
    flip: jax.Array
    terminated: jax.Array
    time: jax.Array


@struct.dataclass
class TaskInterleavingParams(environment.EnvParams):
    """Attributes:
    die_prob: probability that any step ends the episode (a true termination).
    max_steps_in_episode: time limit, reported as truncation.
    """

    die_prob: float = 0.05
    max_steps_in_episode: int = 100


class TaskInterleaving(TabularEnv, DiscreteEnv):
    """COCOA's stochastic task interleaving: keys from query rooms pay off in answer rooms.

    There are ``num_contexts`` contexts (default 5), each with ``2 * num_objects`` objects split
    once (from ``seed``) into ``num_objects`` rewarded and ``num_objects`` unrewarded ones. A
    context is opened by its *query room*: one unrewarded and one rewarded object are shown, on
    random sides; picking the rewarded side (action 0 = left, 1 = right) takes the context's key.
    The context stays open until its *answer room* comes up, which pays the context's reward
    ``linspace(0.2, 1, num_contexts)[c]`` if its key was taken (the action there is irrelevant) and
    closes it. After every step, with n open contexts the next room is an answer room of a
    uniformly chosen open context with probability n / ``max_open`` (default 3), else the query
    room of a uniformly chosen closed context with fresh random objects and sides. So at most
    ``max_open`` contexts are open, and a key's reward arrives an unpredictable number of steps
    later, interleaved with other contexts' rewards. The first room is a uniformly random query
    room. Every step ends the episode with probability ``die_prob`` (0.05); the reward of that
    step is still paid.

    Observation (``3 C + 1 + 4 num_objects`` floats; 24 for the defaults):
    ``[one-hot(context, C), answer_room, left object one-hot(2 n_obj), right object
    one-hot(2 n_obj), open (C), has key (C)]``; object slots are zero in answer rooms, and the
    whole observation is zero in the terminal state (both as in COCOA).

    Choices where the reference is silent or implementation-defined:

    * Length 100 is a *time limit* (``max_steps_in_episode``, reported as truncation), while the
      ``die_prob`` ending is a termination. COCOA's DP ground truth also ignores the time limit;
      the untruncated process reaches step 100 with probability 0.95^100 ~ 0.6%. (COCOA's own
      check ``timestep >= length`` before the step lets an episode run 101 steps.)
    * The rewarded/unrewarded object split is drawn with ``numpy.random.default_rng(seed)``
      (COCOA draws it with ``jax.random``; only the arbitrary object identities differ).

    Returns (exact, from the tabular MDP, defaults): always picking the rewarded object earns
    5.5610 in expectation (5.5255 with the time limit of 100); a uniform random policy takes each
    key with probability 1/2 and earns exactly half, 2.7805 (2.7627 with the time limit).

    Ground truth (a :class:`~jaxcredit.envs.tabular_env.TabularEnv`): ``tabular_mdp(params)``
    enumerates every reachable configuration, as COCOA does: (context, room, objects, side, status
    of the other contexts) plus one terminal state, 1651 states for the defaults. Rewards are
    deterministic given (state, action). The tabular MDP is the untruncated process;
    ``tabular.finite_horizon_values(mdp, pi, 100)`` gives values under the default time limit.
    """

    def __init__(
        self,
        num_contexts: int = 5,
        max_open: int = 3,
        num_objects: int = 2,
        seed: int = 2020,
    ):
        super().__init__()
        if num_contexts < 2:
            raise ValueError(f"TaskInterleaving needs num_contexts >= 2, got {num_contexts}")
        if not 1 <= max_open < num_contexts:
            raise ValueError(
                f"TaskInterleaving needs 1 <= max_open < num_contexts, got max_open={max_open} "
                f"with num_contexts={num_contexts}"
            )
        if num_objects < 1:
            raise ValueError(f"TaskInterleaving needs num_objects >= 1, got {num_objects}")
        self.num_contexts = int(num_contexts)
        self.max_open = int(max_open)
        self.num_objects = int(num_objects)
        self.seed = int(seed)
        self.context_rewards = np.linspace(0.2, 1.0, self.num_contexts).astype(np.float32)
        rng = np.random.default_rng(self.seed)
        permutations = np.stack(
            [rng.permutation(2 * self.num_objects) for _ in range(self.num_contexts)]
        )
        # object_ids[c, 0] are context c's unrewarded objects, object_ids[c, 1] its rewarded ones.
        self.object_ids = permutations.reshape(self.num_contexts, 2, self.num_objects)
        # A query room shows one of num_objects**2 object pairs on one of 2 sides.
        self.num_query_variants = 2 * self.num_objects**2
        self._tabular_cache: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------------ gymnax API

    num_actions = NUM_ACTIONS

    @property
    def obs_size(self) -> int:
        return 3 * self.num_contexts + 1 + 4 * self.num_objects

    @property
    def default_params(self) -> TaskInterleavingParams:
        return TaskInterleavingParams()

    def step_env(
        self,
        key: chex.PRNGKey,
        state: TaskInterleavingState,
        action: int | jax.Array,
        params: TaskInterleavingParams,
    ) -> tuple[jax.Array, TaskInterleavingState, jax.Array, jax.Array, dict[str, Any]]:
        # One draw of uniforms for every random choice of the step (to answer room, next context,
        # unrewarded object, rewarded object, side, death): fewer PRNG calls compile faster.
        u = jax.random.uniform(key, (6,))
        context = state.context
        in_query = ~state.answer_room
        took_key = in_query & (action == state.flip)
        paid = state.answer_room & (state.status[context] == OPEN_WITH_KEY)
        reward = jnp.where(paid, jnp.asarray(self.context_rewards)[context], 0.0)
        # Leaving a query room opens its context (with or without key); an answer room closes it.
        new_status = jnp.where(in_query, OPEN + took_key.astype(jnp.int32), CLOSED)
        status = state.status.at[context].set(new_status)

        is_open = status > CLOSED
        num_open = jnp.sum(is_open)
        to_answer = u[0] < num_open / self.max_open
        candidates = jnp.where(to_answer, is_open, ~is_open)
        next_context = _uniform_choice(u[1], candidates)
        objects, flip = self._query_room_from_uniforms(u[2:5])
        terminated = u[5] < params.die_prob
        next_state = TaskInterleavingState(
            status=status,
            context=next_context,
            answer_room=to_answer,
            objects=jnp.where(to_answer, 0, objects),
            flip=jnp.where(to_answer, 0, flip),
            terminated=terminated,
            time=state.time + 1,
        )
        info = {
            "discount": 1.0 - terminated.astype(jnp.float32),
            "key_taken": took_key,
            "key_missed": in_query & ~took_key,
        }
        obs = self.get_obs(next_state, params)
        obs, next_state = self._apply_transition_gradient_policy(obs, next_state)
        return obs, next_state, reward.astype(jnp.float32), terminated, info

    def reset_env(
        self, key: chex.PRNGKey, params: TaskInterleavingParams
    ) -> tuple[jax.Array, TaskInterleavingState]:
        u = jax.random.uniform(key, (4,))  # (context, unrewarded, rewarded, side)
        objects, flip = self._query_room_from_uniforms(u[1:])
        state = TaskInterleavingState(
            status=jnp.zeros((self.num_contexts,), jnp.int32),
            context=_uniform_choice(u[0], jnp.ones((self.num_contexts,), bool)),
            answer_room=jnp.bool_(False),
            objects=objects,
            flip=flip,
            terminated=jnp.bool_(False),
            time=jnp.int32(0),
        )
        return self.get_obs(state, params), state

    def get_obs(self, state: TaskInterleavingState, params=None, key=None) -> jax.Array:
        ids = jnp.asarray(self.object_ids)[state.context]  # [2, num_objects]
        width = 2 * self.num_objects
        unrewarded = jax.nn.one_hot(ids[0, state.objects[0]], width)
        rewarded = jax.nn.one_hot(ids[1, state.objects[1]], width)
        flipped = state.flip == 1
        left = jnp.where(flipped, unrewarded, rewarded)
        right = jnp.where(flipped, rewarded, unrewarded)
        objects = jnp.concatenate([left, right]) * ~state.answer_room
        obs = jnp.concatenate(
            [
                jax.nn.one_hot(state.context, self.num_contexts),
                jnp.reshape(state.answer_room, (1,)).astype(jnp.float32),
                objects,
                (state.status > CLOSED).astype(jnp.float32),
                (state.status == OPEN_WITH_KEY).astype(jnp.float32),
            ]
        )
        return (obs * ~state.terminated).astype(jnp.float32)

    def is_terminated(
        self, state: TaskInterleavingState, params: TaskInterleavingParams
    ) -> jax.Array:
        return state.terminated

    def state_space(self, params: TaskInterleavingParams | None = None) -> spaces.Dict:
        params = self.default_params if params is None else params
        return spaces.Dict(
            {
                "status": spaces.Box(0, 2, (self.num_contexts,), jnp.int32),
                "context": spaces.Discrete(self.num_contexts),
                "answer_room": spaces.Discrete(2),
                "objects": spaces.Box(0, self.num_objects - 1, (2,), jnp.int32),
                "flip": spaces.Discrete(2),
                "terminated": spaces.Discrete(2),
                "time": spaces.Discrete(params.max_steps_in_episode + 1),
            }
        )

    # ------------------------------------------------------------------ tabular ground truth

    @property
    def num_states(self) -> int:
        return int(self._tabular_structure()["num_states"])

    def state_index(self, state: TaskInterleavingState) -> jax.Array:
        """Tabular index of a state (jittable, elementwise over batch dimensions).

        A mixed-radix code of (status of all contexts, context, room variant) is looked up in a
        dense table of the reachable states; the terminal state is the last index. The first call
        enumerates (and caches) the tabular structure, about 0.2 s for the defaults.
        """
        structure = self._tabular_structure()
        lookup = jnp.asarray(structure["lookup"])
        powers = jnp.asarray(3 ** np.arange(self.num_contexts), jnp.int32)
        code = self._raw_code(
            jnp.sum(state.status * powers, axis=-1),
            state.context,
            state.answer_room.astype(jnp.int32),
            state.objects[..., 0],
            state.objects[..., 1],
            state.flip,
        )
        index = lookup[code]
        return jnp.where(state.terminated, structure["num_states"] - 1, index).astype(jnp.int32)

    def _tabular_arrays(self, params: TaskInterleavingParams | None = None) -> dict[str, jax.Array]:
        """Arguments of ``jaxcredit.exact.tabular.make_tabular_mdp``, jittable in params.

        The transition structure is enumerated with plain numpy loops, independently of
        ``step_env``; ``die_prob`` is mixed in here so that it may be a traced value.
        """
        params = self.default_params if params is None else params
        structure = self._tabular_structure()
        num_states = int(structure["num_states"])
        terminal = np.zeros((num_states,), bool)
        terminal[-1] = True
        die = jnp.asarray(params.die_prob, jnp.float32)
        survive = jnp.asarray(structure["transition"], jnp.float32)  # terminal row: self-loop
        to_terminal = jax.nn.one_hot(num_states - 1, num_states, dtype=jnp.float32)
        live = jnp.asarray(~terminal, jnp.float32)[:, None, None]
        transition = live * ((1.0 - die) * survive + die * to_terminal) + (1.0 - live) * survive
        states = self._states_from_columns(structure)
        return {
            "transition": transition,
            "transition_reward": jnp.asarray(structure["reward"], jnp.float32),
            "initial": jnp.asarray(structure["initial"], jnp.float32),
            "terminal": jnp.asarray(terminal),
            "observation": jax.vmap(self.get_obs)(states),
        }

    def reward_distribution(
        self, params: TaskInterleavingParams | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Exact reward law given (s, a), for reward-conditioned hindsight (COCOA-reward).

        Returns:
          (values ``[C + 1]`` = (0, context rewards...), probs ``[S, A, C + 1]``, one-hot).
        """
        del params  # rewards are fixed by the constructor
        reward = self._tabular_structure()["reward"]
        values = np.concatenate([[0.0], self.context_rewards]).astype(np.float32)
        probs = np.isclose(reward[..., None], values).astype(np.float32)
        return jnp.asarray(values), jnp.asarray(probs)

    # ------------------------------------------------------------------ helpers

    def _query_room_from_uniforms(self, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(objects [2], side) of a fresh query room from three uniforms in [0, 1)."""
        objects = jnp.minimum(jnp.floor(u[:2] * self.num_objects), self.num_objects - 1)
        flip = (u[2] < 0.5).astype(jnp.int32)
        return objects.astype(jnp.int32), flip

    def _raw_code(self, trits, context, answer_room, unrewarded, rewarded, flip):
        """Mixed-radix code over (status trits, context, room variant); works on numpy or jnp."""
        variants = self.num_query_variants
        query_variant = (unrewarded * self.num_objects + rewarded) * 2 + flip
        variant = answer_room * variants + (1 - answer_room) * query_variant
        return (trits * self.num_contexts + context) * (variants + 1) + variant

    def _tabular_structure(self) -> dict[str, np.ndarray]:
        """Enumerates reachable states and their death-free transitions (cached, numpy)."""
        if self._tabular_cache is not None:
            return self._tabular_cache
        num_contexts, max_open, n_obj = self.num_contexts, self.max_open, self.num_objects
        variants = self.num_query_variants
        powers = 3 ** np.arange(num_contexts)
        raw_size = 3**num_contexts * num_contexts * (variants + 1)

        # Reachable: a query room's context is closed and at most max_open - 1 others are open
        # (with max_open open the next room is surely an answer room); an answer room's context
        # is open and at most max_open are open in total.
        rows = []  # (status tuple, context, answer_room, unrewarded, rewarded, flip)
        for status in itertools.product(range(3), repeat=num_contexts):
            num_open = sum(s > CLOSED for s in status)
            for c in range(num_contexts):
                if status[c] == CLOSED and num_open <= max_open - 1:
                    for u, r, f in itertools.product(range(n_obj), range(n_obj), range(2)):
                        rows.append((status, c, 0, u, r, f))
                elif status[c] != CLOSED and num_open <= max_open:
                    rows.append((status, c, 1, 0, 0, 0))
        num_states = len(rows) + 1
        if num_states > MAX_TABULAR_STATES or raw_size > 50 * MAX_TABULAR_STATES:
            raise ValueError(
                f"TaskInterleaving with {num_states} states is too large for a tabular MDP "
                f"(limit {MAX_TABULAR_STATES}); use fewer contexts or objects"
            )
        lookup = np.full((raw_size,), -1, np.int32)
        codes = [
            self._raw_code(int(np.dot(st, powers)), c, ans, u, r, f) for st, c, ans, u, r, f in rows
        ]
        lookup[np.asarray(codes)] = np.arange(len(rows), dtype=np.int32)

        def index_of(status, c, ans, u=0, r=0, f=0):
            return lookup[self._raw_code(int(np.dot(status, powers)), c, ans, u, r, f)]

        transition = np.zeros((num_states, NUM_ACTIONS, num_states), np.float64)
        reward = np.zeros((num_states, NUM_ACTIONS), np.float64)
        for s, (status, c, ans, _, _, f) in enumerate(rows):
            for a in range(NUM_ACTIONS):
                nxt = list(status)
                if ans:
                    reward[s, a] = self.context_rewards[c] if status[c] == OPEN_WITH_KEY else 0.0
                    nxt[c] = CLOSED
                else:
                    nxt[c] = OPEN_WITH_KEY if a == f else OPEN
                open_ids = [j for j in range(num_contexts) if nxt[j] != CLOSED]
                closed_ids = [j for j in range(num_contexts) if nxt[j] == CLOSED]
                p_answer = len(open_ids) / max_open
                for j in open_ids:
                    transition[s, a, index_of(nxt, j, 1)] += p_answer / len(open_ids)
                if p_answer < 1.0:
                    p_each = (1.0 - p_answer) / (len(closed_ids) * n_obj * n_obj * 2)
                    for j in closed_ids:
                        for u2, r2, f2 in itertools.product(range(n_obj), range(n_obj), range(2)):
                            transition[s, a, index_of(nxt, j, 0, u2, r2, f2)] += p_each
        transition[-1, :, -1] = 1.0
        if np.any(lookup[np.asarray(codes)] < 0) or not np.allclose(transition.sum(-1), 1.0):
            raise AssertionError("TaskInterleaving tabular enumeration is inconsistent")

        initial = np.zeros((num_states,), np.float64)
        empty = (0,) * num_contexts
        for c in range(num_contexts):
            for u, r, f in itertools.product(range(n_obj), range(n_obj), range(2)):
                initial[index_of(empty, c, 0, u, r, f)] += 1.0 / (num_contexts * variants)

        columns = list(zip(*rows, strict=True))
        self._tabular_cache = {
            "num_states": np.int64(num_states),
            "lookup": lookup,
            "transition": transition.astype(np.float32),
            "reward": reward,
            "initial": initial,
            "status": np.asarray(columns[0], np.int32),
            "context": np.asarray(columns[1], np.int32),
            "answer_room": np.asarray(columns[2], bool),
            "objects": np.stack([columns[3], columns[4]], axis=-1).astype(np.int32),
            "flip": np.asarray(columns[5], np.int32),
        }
        return self._tabular_cache

    def _states_from_columns(self, structure: dict[str, np.ndarray]) -> TaskInterleavingState:
        """Every tabular state as a batched env state, the terminal one last."""

        def with_terminal(column, fill=0):
            extra = np.full((1, *column.shape[1:]), fill, column.dtype)
            return jnp.asarray(np.concatenate([column, extra]))

        num_states = int(structure["num_states"])
        terminated = np.zeros((num_states,), bool)
        terminated[-1] = True
        return TaskInterleavingState(
            status=with_terminal(structure["status"]),
            context=with_terminal(structure["context"]),
            answer_room=with_terminal(structure["answer_room"]),
            objects=with_terminal(structure["objects"]),
            flip=with_terminal(structure["flip"]),
            terminated=jnp.asarray(terminated),
            time=jnp.zeros((num_states,), jnp.int32),
        )


def _uniform_choice(u: jax.Array, mask: jax.Array) -> jax.Array:
    """Index of a uniformly chosen True entry of ``mask`` (at least one), from u ~ U[0, 1)."""
    count = jnp.sum(mask)
    rank = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask) > rank).astype(jnp.int32)

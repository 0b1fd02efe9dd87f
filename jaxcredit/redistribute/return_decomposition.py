"""Return decomposition by a per-step reward model: RRD and IRCR.

Both stages fit a reward model R̂_θ(s_t, a_t) (an MLP) to the returns of whole episodes kept in a
buffer, and give every step of a window the reward r̃_t = R̂_θ(s_t, a_t) (a constant for every
gradient). Neither is return-equivalent like RUDDER's: an episode's new rewards sum to its return
only as far as the model fits. docs/return_decomposition.md has the equations, the settings and
their sources, and how the two relate.

``rrd``: Randomized Return Decomposition (Ren, Guo, Zhou & Peng, ICLR 2022). For a stored episode
τ of T steps with return R(τ) and a subset I of K of its steps drawn at random::

    L_Rand-RD(θ) = E_τ E_I [ (R(τ) − (T/K) Σ_{t∈I} R̂_θ(s_t, a_t))² ]          (units="return")

The (T/K)-scaled sum is an unbiased estimate of Σ_t R̂_θ(s_t, a_t), so L_Rand-RD is the full
least-squares return decomposition L_RD = E_τ (R(τ) − Σ_t R̂_θ)² plus the variance of that
estimate (an upper bound of L_RD; K = T is L_RD itself). The authors' code regresses the *mean*
of the sampled rewards onto R(τ)/T, which is the loss above divided by T² (``units="step"``, the
default: no T² growth of the loss and of its gradient with the episode's length), and draws the
episode in proportion to its length (a uniformly drawn step's episode). ``bias_correction``
subtracts the unbiased estimate of that variance, (1 − K/T) s²_I / K with s²_I the sample
variance of the K predictions (factor 1 when K > T and the steps are drawn with replacement),
which makes the loss an unbiased estimate of L_RD (the paper's "RRD-L_RD" variant).

``ircr``: Iterative Relative Credit Refinement (Gangwani, Zhou & Peng, NeurIPS 2020). The guidance
reward of (s, a) is the expected normalised return of the stored episodes that contain it,
``r_g(s, a) = E[g(τ) | (s, a) ∈ τ]`` with ``g(τ) = (c(τ) − c_min) / (c_max − c_min)``: the credit
c(τ) of an episode is its mean reward R(τ)/T (the official code; ``credit="return"``: R(τ)), min
and max over the buffers. Off-policy, the official code puts g(τ) on every replayed transition of
τ and lets the Q-regression average; an on-policy window holds steps whose episode has not ended,
so here R̂_θ(s, a) is fitted to g(τ) by least squares on transitions drawn uniformly from the
buffer (half from a first-in first-out buffer, half from the ``best`` episodes by return), whose
minimiser is r_g.

Memory (:class:`DecompositionMemory`, in the train state): each environment's running episode and
a first-in first-out buffer of ``lessons`` finished episodes (``jaxcredit.redistribute.lessons``,
the arrival order as the priority), for ircr also the ``best`` episodes by return. A window's
finished episodes are fitted from the next update on. Actions are read through
``jaxcredit.policies.action_features``: discrete int ``[T, B]`` and continuous float
``[T, B, D]`` actions alike.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from jaxcredit.policies import action_features
from jaxcredit.redistribute import Redistributor
from jaxcredit.redistribute import lessons as lessons_lib
from jaxcredit.types import Trajectory

Array = jax.Array

UNITS = ("step", "return")
CREDITS = ("mean", "return")
# Episodes kept when the environment states no time limit (as RUDDER's buffer).
DEFAULT_MAX_EPISODE_STEPS = 1000


class RewardModel(nn.Module):
    """R̂_θ: ReLU layers of ``hidden`` widths and a linear output, Glorot-uniform kernels and
    zero biases (the RRD code's ``mlp_rrd``: two layers of 256, ``xavier_initializer``)."""

    hidden: Sequence[int]

    @nn.compact
    def __call__(self, x: Array) -> Array:
        init = nn.initializers.xavier_uniform()
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=init)(x))
        return nn.Dense(1, kernel_init=init)(x)[..., 0]


def step_features(obs: Array, action: Array, next_obs: Optional[Array], num_actions: int,
                  batch_shape: tuple) -> Array:
    """``[*batch, F]`` the model's input: the flat observation, the action's features (one-hot,
    or a continuous action itself) and, with ``next_obs``, the change o_t − o_{t+1} (the RRD
    code's input for vector observations)."""
    batch_shape = tuple(batch_shape)
    flat = obs.reshape(batch_shape + (-1,)).astype(jnp.float32)
    parts = [flat, action_features(action, num_actions).reshape(batch_shape + (-1,))]
    if next_obs is not None:
        parts.append(flat - next_obs.reshape(batch_shape + (-1,)).astype(jnp.float32))
    return jnp.concatenate(parts, axis=-1)


def subset_loss(predicted: Array, length: Array, episode_return: Array,
                weight: Optional[Array] = None, units: str = "step",
                bias_correction: bool = False) -> tuple[Array, dict]:
    """RRD's loss on sampled subsets (module docstring), the weighted mean over episodes.

    Args:
      predicted: ``[E, K]`` R̂_θ at the K sampled steps of each of E episodes.
      length: ``[E]`` T, each episode's length.
      episode_return: ``[E]`` R(τ).
      weight: ``[E]`` weight of each episode (0 for an invalid draw), or None for 1.
      units: ``return``: (R − (T/K) Σ_I R̂)²; ``step``: (R/T − (1/K) Σ_I R̂)², the same / T².
      bias_correction: subtract the unbiased estimate of the variance of the subset estimate
        (in the same units): (1 − K/T) s²_I / K for K <= T, s²_I / K for K > T (drawn with
        replacement), 0 for T = 1.

    Returns:
      ``(loss, metrics)``: ``subset_loss`` (the squared error alone) and, with the correction,
      ``variance`` (the term subtracted).
    """
    chex.assert_rank(predicted, 2)
    chex.assert_equal_shape((predicted[:, 0], length, episode_return))
    if units not in UNITS:
        raise ValueError(f"units must be one of {', '.join(UNITS)}, got {units!r}")
    k = predicted.shape[1]
    steps = length.astype(jnp.float32)
    mean = predicted.mean(axis=1)
    if units == "return":
        error = jnp.square(episode_return - steps * mean)
        scale = jnp.square(steps)
    else:
        error = jnp.square(episode_return / jnp.maximum(steps, 1.0) - mean)
        scale = jnp.ones_like(steps)
    weight = jnp.ones_like(steps) if weight is None else weight.astype(jnp.float32)
    count = jnp.maximum(weight.sum(), 1.0)
    metrics = {"subset_loss": jnp.sum(weight * error) / count}
    if not bias_correction:
        return metrics["subset_loss"], metrics
    if k < 2:
        raise ValueError("the bias correction needs at least 2 sampled steps per episode")
    spread = jnp.sum(jnp.square(predicted - mean[:, None]), axis=1) / (k - 1)
    factor = jnp.where(steps > 1, jnp.where(k <= steps, 1.0 - k / jnp.maximum(steps, 1.0), 1.0),
                       0.0)
    variance = scale * factor * spread / k
    metrics["variance"] = jnp.sum(weight * variance) / count
    return jnp.sum(weight * (error - variance)) / count, metrics


def guidance(credit: Array, low: Array, high: Array) -> Array:
    """IRCR's normalised credit g = (c − c_min) / (c_max − c_min); 0 while c_max = c_min."""
    spread = high - low
    return jnp.where(spread > 0, (credit - low) / jnp.where(spread > 0, spread, 1.0), 0.0)


def episode_credit(episodes: lessons_lib.Episodes, credit: str) -> Array:
    """``[B]`` each stored episode's credit: its mean reward R/T (``mean``) or its return."""
    if credit == "mean":
        return episodes.returns / jnp.maximum(episodes.length, 1)
    return episodes.returns


def draw_slots(key: Array, length: Array, filled: Array, size: int) -> tuple[Array, Array]:
    """``size`` buffer slots drawn with replacement in proportion to their episode's length
    (the episode of a uniformly drawn stored step), and whether each draw is a filled slot
    (all False while the buffer is empty)."""
    usable = filled & (length > 0)
    logits = jnp.where(usable, jnp.log(jnp.maximum(length, 1).astype(jnp.float32)), -jnp.inf)
    slot = jnp.clip(jax.random.categorical(key, logits, shape=(size,)), 0, length.shape[0] - 1)
    return slot, usable[slot]


def draw_subsets(key: Array, length: Array, horizon: int, size: int) -> Array:
    """``[E, size]`` step indices per episode of ``length [E]`` steps: a uniformly random subset
    of ``size`` distinct steps when ``size <= T``, else ``size`` steps drawn with replacement
    (the RRD code's ``np.random.choice(T, K, replace=K > T)``)."""
    subset_key, repeat_key = jax.random.split(key)
    count = length.shape[0]
    if size <= horizon:
        scores = jax.random.uniform(subset_key, (count, horizon))
        scores = jnp.where(jnp.arange(horizon)[None, :] < length[:, None], scores, 2.0)
        subset = jax.lax.top_k(-scores, size)[1]
    else:  # no stored episode is that long
        subset = jnp.zeros((count, size), jnp.int32)
    repeated = jax.random.randint(repeat_key, (count, size), 0,
                                  jnp.maximum(length, 1)[:, None])
    return jnp.where((size <= length)[:, None], subset, repeated)


@struct.dataclass
class SubsetBatch:
    """RRD's fitting batch: E episodes, K sampled steps each.

    Attributes:
      x: ``[E, K, F]`` the model's inputs at the sampled steps.
      length, episode_return: ``[E]`` T and R(τ).
      valid: ``[E]`` the draw is a stored episode (False while the buffer is empty).
      slot, index: ``[E]`` the buffer slots and ``[E, K]`` the steps drawn.
    """

    x: Array
    length: Array
    episode_return: Array
    valid: Array
    slot: Array
    index: Array


@struct.dataclass
class StepBatch:
    """IRCR's fitting batch: transitions drawn from the buffers.

    Attributes:
      x: ``[B, F]`` the model's inputs; target: ``[B]`` g(τ) of each transition's episode.
      valid: ``[B]`` the draw is a stored transition.
      slot, step: ``[B]`` where each was drawn from: the first ``batch_size`` from the first-in
        first-out buffer, the rest from the best episodes.
    """

    x: Array
    target: Array
    valid: Array
    slot: Array
    step: Array


@struct.dataclass
class DecompositionMemory:
    """What the stage keeps between updates (part of the train state).

    Attributes:
      episodes: the running episodes and the first-in first-out buffer of finished ones.
      best, best_priority: ircr's buffer of the best episodes and their returns (−inf: empty),
        or None.
      num_actions: the number of discrete actions (0 for continuous ones).
    """

    episodes: lessons_lib.EpisodeMemory
    best: Optional[lessons_lib.Episodes] = None
    best_priority: Optional[Array] = None
    num_actions: int = struct.field(pytree_node=False, default=0)


def record_window(memory: DecompositionMemory, traj: Trajectory) -> DecompositionMemory:
    """The memory after the window's steps: episodes appended, the finished ones stored (into
    the first-in first-out buffer in order of arrival; into ``best`` if their return beats the
    lowest there). The rewards stored are the window's (the environment's) rewards."""
    keep_next = memory.episodes.running.next_obs is not None

    def step(mem: DecompositionMemory, t):
        obs, action, reward, next_obs, done = t
        episodes = mem.episodes
        running = lessons_lib.append_step(episodes.running, obs, action, reward,
                                          next_obs if keep_next else None)
        fits = running.length <= running.action.shape[1]
        keep = jnp.logical_and(done, fits)
        arrival = jnp.broadcast_to(episodes.stored.astype(jnp.float32), keep.shape)
        stored, priority = lessons_lib.store(episodes.lessons, episodes.priority, running,
                                             arrival, keep)
        best, best_priority = mem.best, mem.best_priority
        if best is not None:
            best, best_priority = lessons_lib.store(best, best_priority, running,
                                                    running.returns, keep, best_only=True)
        running = running.replace(length=jnp.where(done, 0, running.length))
        episodes = lessons_lib.EpisodeMemory(
            running=running, lessons=stored, priority=priority,
            stored=episodes.stored + keep.sum(),
            too_long=episodes.too_long + jnp.logical_and(done, ~fits).sum())
        return mem.replace(episodes=episodes, best=best, best_priority=best_priority), None

    steps = (traj.obs, traj.action, traj.reward, traj.next_obs, traj.done)
    memory, _ = jax.lax.scan(step, memory, steps)
    return memory


def _widths(value: Any, name: str, stage: str) -> tuple[int, ...]:
    """Layer widths from a sequence, a number or a comma-separated string (``hidden=64,64``)."""
    try:
        if isinstance(value, str):
            widths = tuple(int(v) for v in value.split(",") if v.strip())
        elif isinstance(value, (int, float)):
            widths = (int(value),)
        else:
            widths = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{stage}: {name} must be integers separated by commas, got "
                         f"{value!r}") from None
    if any(w < 1 for w in widths):
        raise ValueError(f"{stage}: {name} must be positive, got {widths}")
    return widths


def _integer(stage: str, name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value \
            or int(value) < least:
        raise ValueError(f"{stage}: {name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _positive(stage: str, **values: Any) -> list[int]:
    return [_integer(stage, name, value, 1) for name, value in values.items()]


def _stage(name: str, hidden: Sequence[int], next_obs: bool, lessons: int, best: int,
           horizon: int, loss, make_sample) -> Redistributor:
    """The parts rrd and ircr share: the model, the memory and the redistribution."""
    model = RewardModel(tuple(hidden))

    def num_actions_of(example: Trajectory) -> int:
        discrete = jnp.issubdtype(example.action.dtype, jnp.integer)
        return int(example.logits.shape[-1]) if discrete and example.logits is not None else 0

    def features(obs, action, following, num_actions, batch_shape):
        return step_features(obs, action, following if next_obs else None, num_actions,
                             batch_shape)

    def init(key: Array, example: Trajectory):
        x = features(example.obs[0], example.action[0], example.next_obs[0],
                     num_actions_of(example), example.reward.shape[1:])
        return model.init(key, x)

    def init_memory(example: Trajectory) -> DecompositionMemory:
        num_envs = example.reward.shape[1]
        shapes = dict(obs_shape=example.obs.shape[2:], obs_dtype=example.obs.dtype,
                      action_shape=example.action.shape[2:], action_dtype=example.action.dtype,
                      keep_next_obs=next_obs)
        episodes = lessons_lib.init_memory(num_envs, lessons, horizon, **shapes)
        if not best:
            return DecompositionMemory(episodes=episodes, num_actions=num_actions_of(example))
        return DecompositionMemory(
            episodes=episodes, best=lessons_lib.empty_episodes(best, horizon, **shapes),
            best_priority=jnp.full((best,), -jnp.inf, jnp.float32),
            num_actions=num_actions_of(example))

    def redistribute(params, traj: Trajectory, key: Array, memory: DecompositionMemory):
        del key
        x = features(traj.obs, traj.action, traj.next_obs, memory.num_actions,
                     traj.reward.shape)
        reward = jax.lax.stop_gradient(model.apply(params, x))
        memory = record_window(memory, traj)
        metrics = {"reward_mean": reward.mean(),
                   "lessons_filled": jnp.isfinite(memory.episodes.priority).mean(),
                   "episodes_too_long": memory.episodes.too_long.astype(jnp.float32)}
        if memory.best is not None:
            metrics["best_filled"] = jnp.isfinite(memory.best_priority).mean()
        return traj.replace(reward=reward), memory, metrics

    def model_loss(params, batch, hparams, key):
        del hparams, key
        return loss(lambda x: model.apply(params, x), batch)

    return Redistributor(name=name, redistribute=redistribute, init=init, loss=model_loss,
                         learned=True, init_memory=init_memory,
                         sample=make_sample(features), continuous_actions=True)


def _horizon(stage: str, max_episode_steps: Optional[int], horizon: Optional[int]) -> int:
    steps = int(max_episode_steps or horizon or DEFAULT_MAX_EPISODE_STEPS)
    if steps < 1:
        raise ValueError(f"{stage}: max_episode_steps must be positive, got {steps}")
    return steps


def make_rrd(sample_size: int = 64, batch_size: int = 256, units: str = "step",
             bias_correction: bool = False, hidden: Sequence[int] | str = (256, 256),
             next_obs: bool = True, lessons: int = 256, max_episode_steps: Optional[int] = None,
             horizon: Optional[int] = None) -> Redistributor:
    """Randomized Return Decomposition (Ren et al. 2022): R̂(s, a) fitted to episode returns
    from random subsets of their steps.

    Args:
      sample_size: K, the steps sampled per episode (RRD code, MuJoCo: 64).
      batch_size: steps per fitting step; ``batch_size // sample_size`` episodes (at least 1)
        are drawn, each in proportion to its length (RRD code, MuJoCo: 256, so 4 episodes).
      units: ``step`` (the RRD code's per-step regression, (R/T − mean_I R̂)²) or ``return``
        (the paper's equation, (R − (T/K) Σ_I R̂)², T² times larger).
      bias_correction: subtract the variance estimate, an unbiased estimate of L_RD (RRD code:
        off by default; ``--rrd_bias_correction=True`` is the paper's RRD-L_RD).
      hidden: the reward model's hidden widths (RRD code: 256, 256).
      next_obs: also read o_t − o_{t+1} (the RRD code's MLP input); False: R̂(s_t, a_t) only.
      lessons: finished episodes kept, first in first out (jaxcredit's choice: 256).
      max_episode_steps: longest episode stored (H); default the environment's time limit
        (``horizon``, passed by the engine), else 1000.
    """
    stage = "rrd"
    sample_size, batch_size, lessons = _positive(stage, sample_size=sample_size,
                                                 batch_size=batch_size, lessons=lessons)
    if units not in UNITS:
        raise ValueError(f"{stage}: units must be one of {', '.join(UNITS)}, got {units!r}")
    if bias_correction and sample_size < 2:
        raise ValueError(f"{stage}: bias_correction needs sample_size >= 2, got {sample_size}")
    hidden = _widths(hidden, "hidden", stage)
    steps = _horizon(stage, max_episode_steps, horizon)
    num_episodes = max(batch_size // sample_size, 1)
    correct = bool(bias_correction)

    def make_sample(features):
        def sample(memory: DecompositionMemory, key: Array):
            slot_key, subset_key = jax.random.split(key)
            buffer = memory.episodes.lessons
            slot, valid = draw_slots(slot_key, buffer.length, jnp.isfinite(
                memory.episodes.priority), num_episodes)
            length = buffer.length[slot]
            index = draw_subsets(subset_key, length, steps, sample_size)
            rows = slot[:, None]
            x = features(buffer.obs[rows, index], buffer.action[rows, index],
                         None if buffer.next_obs is None else buffer.next_obs[rows, index],
                         memory.num_actions, index.shape)
            return SubsetBatch(x=x, length=length, episode_return=buffer.returns[slot],
                               valid=valid, slot=slot, index=index)
        return sample

    def loss(model, batch: SubsetBatch):
        return subset_loss(model(batch.x), batch.length, batch.episode_return, batch.valid,
                           units, correct)

    return _stage(stage, hidden, bool(next_obs), lessons, 0, steps, loss, make_sample)


def make_ircr(batch_size: int = 512, best: int = 10, credit: str = "mean",
              hidden: Sequence[int] | str = (256, 256), next_obs: bool = False,
              lessons: int = 256, max_episode_steps: Optional[int] = None,
              horizon: Optional[int] = None) -> Redistributor:
    """IRCR's guidance rewards (Gangwani et al. 2020): each step regressed on its episode's
    normalised credit, half the batch from the best episodes.

    Args:
      batch_size: transitions drawn per fitting step from the first-in first-out buffer, and as
        many again from the best episodes (IRCR code: 512 and 512).
      best: the highest-return episodes kept besides (IRCR code's min-heap: 10); 0: none.
      credit: an episode's credit before normalising: ``mean`` (R/T, the IRCR code) or
        ``return`` (R, the RRD authors' re-implementation).
      hidden: the reward model's hidden widths (jaxcredit's choice, the width of IRCR's critic:
        256, 256).
      next_obs: also read o_t − o_{t+1}; False (default): r_g(s, a) as the paper defines it.
      lessons: finished episodes kept, first in first out (jaxcredit's choice: 256; the IRCR
        code keeps 300 000 transitions).
      max_episode_steps: longest episode stored (H); default the environment's time limit,
        else 1000.
    """
    stage = "ircr"
    batch_size, lessons = _positive(stage, batch_size=batch_size, lessons=lessons)
    best = _integer(stage, "best", best, 0)
    if credit not in CREDITS:
        raise ValueError(f"{stage}: credit must be one of {', '.join(CREDITS)}, got {credit!r}")
    hidden = _widths(hidden, "hidden", stage)
    steps = _horizon(stage, max_episode_steps, horizon)

    def make_sample(features):
        def draw(key, buffer, filled, credits):
            slot_key, step_key = jax.random.split(key)
            slot, valid = draw_slots(slot_key, buffer.length, filled, batch_size)
            t = jax.random.randint(step_key, (batch_size,), 0,
                                   jnp.maximum(buffer.length[slot], 1))
            following = None if buffer.next_obs is None else buffer.next_obs[slot, t]
            inputs = (buffer.obs[slot, t], buffer.action[slot, t], following)
            return inputs, credits[slot], valid, slot, t

        def sample(memory: DecompositionMemory, key: Array):
            sources = [(memory.episodes.lessons, jnp.isfinite(memory.episodes.priority))]
            if memory.best is not None:
                sources.append((memory.best, jnp.isfinite(memory.best_priority)))
            credits = [episode_credit(buffer, credit) for buffer, _ in sources]
            filled = jnp.concatenate([f for _, f in sources])
            every = jnp.concatenate(credits)
            low = jnp.min(jnp.where(filled, every, jnp.inf))
            high = jnp.max(jnp.where(filled, every, -jnp.inf))
            draws = [draw(k, buffer, filled, c) for k, (buffer, filled), c in
                     zip(jax.random.split(key, len(sources)), sources, credits)]
            inputs = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[d[0] for d in draws])
            x = features(*inputs, memory.num_actions, inputs[0].shape[:1])
            slot, step, valid = (jnp.concatenate([d[i] for d in draws]) for i in (3, 4, 2))
            return StepBatch(x=x, target=guidance(jnp.concatenate([d[1] for d in draws]), low,
                                                  high), valid=valid, slot=slot, step=step)
        return sample

    def loss(model, batch: StepBatch):
        weight = batch.valid.astype(jnp.float32)
        value = (jnp.sum(weight * jnp.square(model(batch.x) - batch.target))
                 / jnp.maximum(weight.sum(), 1.0))
        return value, {"regression_loss": value}

    return _stage(stage, hidden, bool(next_obs), lessons, best, steps, loss, make_sample)

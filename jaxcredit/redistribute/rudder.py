"""RUDDER: return decomposition by an LSTM return predictor (Arjona-Medina et al., NeurIPS 2019).

An LSTM reads the episode step by step and predicts, after every step, the episode's return G
(the undiscounted sum of the environment's rewards). The redistributed reward is the change of the
prediction ("differences of predictions", the paper's practical redistribution)::

    r̃_t = g_t − g_{t−1}                 (g_{−1} = 0, g_t = the prediction after reading step t)
    r̃_T = G − g_{T−1}                   at the episode's last step T (termination or time-out)

so Σ_t r̃_t = G for every episode and every model (return-equivalence, the paper's Theorem 1,
with the whole prediction error put on the last step: the window may not hold the episode's
start, so the paper's alternative of spreading the error over all steps is not available). A
model that predicts G from step k on puts all reward on step k; a perfect model of the expected
return makes r̃_t = q̃(s_t, a_t) − q̃(s_{t−1}, a_{t−1}): the reward lands where the return's
expectation changes, on the decisive actions.

Model (``jaxcredit.redistribute.rudder_model.ReturnModel``): input at step t is
``[obs_t, features(a_t), r_{t−1} / scale]`` (the previous reward lets the model add up rewards
that are not delayed; the current reward is not an input, or the last step's prediction would
read the delayed return off its input), an LSTM cell, a linear output. Two cells:

* ``cell="lstm"``: flax's LSTM cell;
* ``cell="rudder"``: the paper's cell without forget and output gates: the cell input sees only
  the step's input, the input gate only the recurrent state, and the output is the cell state
  itself (identity activation), so the cell can count pieces of reward:
  ``c_t = c_{t−1} + σ(R h_{t−1} + b_i) ⊙ tanh(W x_t + b_z)``, ``h_t = c_t``.

Loss, on whole episodes from the lessons buffer (``jaxcredit.redistribute.lessons``)::

    L = (g_T − G)²  +  aux_weight · mean_t (g_t − G)²

(the main loss at the last step and the auxiliary "continuous prediction" loss at every step,
weight 0.5 as in the paper's demonstration code), with G and g in units of ``scale``: a fixed
``return_scale``, or (``return_scale=0``, the default) the root mean square of the returns in the
lessons buffer, recomputed every update.

Episodes span windows. The memory keeps, per environment, the LSTM carry, the last prediction
and the return so far at the window's start, so the prediction continues across windows (the
carry was computed with the parameters of its time: the model is refitted every update, and the
telescoping sum above holds whatever the parameters). The memory also assembles finished
episodes into the lessons buffer, from which the model is fitted (``sample``); a window's
finished episodes are fitted from the next update on.

Oracle ablation (``model="oracle"``): on environments with ground truth (``DelayedReward-`` over
one included), the prediction is the exact expected return of the current policy given the
history, ``g_t = Σ_{k<t} r̄(s_k, a_k, s_{k+1}) + Q^π(s_t, a_t)`` (γ = 1, exact dynamic
programming inside the step), which is the paper's optimal redistribution. If the oracle learns
and the fitted model does not, the shortfall is the model's.

The official code's regime, as options: Δ-observation inputs (``inputs="delta"``), the cell's
input-gate bias, a warm-up before the model is fitted or used (``warmup_episodes``), a quality
gate that passes the original reward on while the prediction is poor (``quality_threshold``),
and, in the engine, fitting until a running loss threshold (``redistribute_fit_until_loss``).
Either fallback keeps return-equivalence: with the gate closed the prediction used is the return
so far, so r̃_t = r_t plus, at a window's first step, what a running episode is still owed.

On a partially observed task, ``inputs="agent_state"`` makes the model read the recurrent
agent's state (``Trajectory.agent_state``: the core's output after reading o_t; needs a
recurrent ``--policy``) in place of the observation. The LSTM still has its own memory; the
agent's state adds what the agent has learned to keep. The lessons buffer then stores the
states the agent had when it played the episode: as the agent's network changes, an old lesson
describes states it no longer produces (the staleness of R2D2's stored recurrent states), and
the priorities' decay bounds how long such a lesson stays.

Not implemented from the paper: the Atari version's extra auxiliary outputs (mean reward over the
next 10 steps, return still to come), integrated-gradients contribution analysis, and the Atari
mix of redistributed reward and value.
"""

from __future__ import annotations

from typing import Any, Optional

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxcredit.redistribute import Redistributor
from jaxcredit.redistribute import lessons as lessons_lib
from jaxcredit.redistribute.rudder_model import CELLS, ReturnModel, step_inputs
from jaxcredit.types import Trajectory

Array = jax.Array

INPUTS = ("obs", "delta", "agent_state")
QUALITY_DECAY = 0.9  # per window with finished episodes: the running MSE behind the quality
# Episodes kept when the environment states no time limit.
DEFAULT_MAX_EPISODE_STEPS = 1000


@struct.dataclass
class RudderMemory:
    """What RUDDER keeps between updates (part of the train state, so checkpoints include it).

    Attributes:
      carry: ``([N, F], [N, F])`` LSTM carry of each environment's running episode.
      prediction: ``[N]`` g_{t−1} in return units (0 at an episode's start).
      return_so_far: ``[N]`` the running episode's return before the next step.
      prev_reward: ``[N]`` r_{t−1} (0 at an episode's start), the next step's input.
      prev_obs: ``[N, ...]`` o_{t−1} (0 at an episode's start), for Δ-observation inputs.
      scale: the return scale of the model's targets and outputs.
      episodes: running episodes and the lessons buffer.
      squared_error: running mean of (G − g_T)² over finished episodes (return units; NaN
        before the first), the numerator of the prediction quality.
      return_moments: running means of G and G² over the same episodes (its denominator: the
        lessons buffer keeps the episodes with the largest errors, so its returns' spread is
        not the policy's).
    """

    carry: Any
    prediction: Array
    return_so_far: Array
    prev_reward: Array
    prev_obs: Array
    scale: Array
    episodes: lessons_lib.EpisodeMemory
    squared_error: Array
    return_moments: Array
    num_actions: int = struct.field(pytree_node=False, default=0)


def prediction_differences(prediction: Array, reward: Array, done: Array,
                           initial_prediction: Array, initial_return: Array):
    """RUDDER's redistributed reward from the return predictions of a window (module docstring).

    With g_t the prediction after step t, p_t the prediction before it (g_{t−1}, or 0 at an
    episode's first step) and R_t the episode's return before step t::

        r̃_t = g_t − p_t                      if the episode goes on after t
        r̃_t = (R_t + r_t) − p_t              if it ends at t (terminated or truncated)

    so the redistributed rewards of an episode sum to its return exactly, whatever g is.

    Args:
      prediction: ``[T, *batch]`` g_t, in return units.
      reward, done: ``[T, *batch]`` the environment's rewards and episode ends.
      initial_prediction, initial_return: ``[*batch]`` p_0 and R_0, carried from the previous
        window (0 where an episode starts with the window).

    Returns:
      ``(r̃ [T, *batch], G [T, *batch] = R_t + r_t, p_T, R_T)``: the new rewards, the return so
      far after each step, and the prediction and return to carry into the next window.
    """
    chex.assert_equal_shape((prediction, reward, done))
    chex.assert_equal_shape((initial_prediction, initial_return, prediction[0]))

    def step(carry, t):
        before, so_far = carry
        g, r, d = t
        total = so_far + r
        new = jnp.where(d, total, g) - before
        return (jnp.where(d, 0.0, g), jnp.where(d, 0.0, total)), (new, total)

    (last_prediction, last_return), (new_reward, episode_return) = jax.lax.scan(
        step, (initial_prediction, initial_return), (prediction, reward, done))
    return new_reward, episode_return, last_prediction, last_return


def prediction_error(prediction: Array, episode_return: Array, done: Array) -> Array:
    """RMS of G − g_T over the episodes that end in the window (NaN if none ends)."""
    ended = done.sum()
    errors = jnp.where(done, jnp.square(episode_return - prediction), 0.0)
    return jnp.where(ended > 0, jnp.sqrt(errors.sum() / jnp.maximum(ended, 1)), jnp.nan)


@struct.dataclass
class OracleMemory:
    """What the oracle keeps between windows, per environment: p, R (as ``RudderMemory``), the
    expected return collected so far C, and the previous step's state and action."""

    prediction: Array
    return_so_far: Array
    expected_so_far: Array
    prev_state: Array
    prev_action: Array
    started: Array  # the running episode has a previous step


def exact_predictions(q: Array, transition_reward: Array, state: Array, action: Array,
                      done: Array, memory: OracleMemory):
    """The exact expected return given the history, ``[T, *batch]``::

        g_t = C_t + Q^π(s_t, a_t),   C_t = Σ_{k<t} r̄(s_k, a_k, s_{k+1})

    with r̄ the mean reward of a transition (``TabularMDP.transition_reward``). Returns
    ``(g, memory)`` with C and the previous step carried into the next window.
    """
    def step(carry, t):
        so_far, prev_s, prev_a, started = carry
        s, a, d = t
        so_far = jnp.where(started, so_far + transition_reward[prev_s, prev_a, s], 0.0)
        g = so_far + q[s, a]
        return (so_far, s, a, jnp.logical_not(d)), g

    (so_far, prev_s, prev_a, started), g = jax.lax.scan(
        step, (memory.expected_so_far, memory.prev_state, memory.prev_action, memory.started),
        (state, action, done))
    return g, memory.replace(expected_so_far=so_far, prev_state=prev_s, prev_action=prev_a,
                             started=started)


def make_rudder_oracle() -> Redistributor:
    """RUDDER with the exact return prediction of the current policy (module docstring)."""

    def init_memory(example: Trajectory) -> OracleMemory:
        zeros = jnp.zeros(example.action.shape[1:], jnp.float32)
        ints = jnp.zeros(example.action.shape[1:], jnp.int32)
        return OracleMemory(prediction=zeros, return_so_far=zeros, expected_so_far=zeros,
                            prev_state=ints, prev_action=ints,
                            started=jnp.zeros(example.action.shape[1:], bool))

    def redistribute(params, traj: Trajectory, key: Array, memory: OracleMemory):
        del key
        if traj.state is None:
            raise ValueError("rudder with model=oracle needs the tabular state of every step")
        g, memory = exact_predictions(params["q"], params["transition_reward"], traj.state,
                                      traj.action, traj.done, memory)
        new_reward, episode_return, prediction, return_so_far = prediction_differences(
            g, traj.reward, traj.done, memory.prediction, memory.return_so_far)
        metrics = {"prediction_error": prediction_error(g, episode_return, traj.done)}
        memory = memory.replace(prediction=prediction, return_so_far=return_so_far)
        return traj.replace(reward=new_reward), memory, metrics

    return Redistributor(name="rudder", redistribute=redistribute, init_memory=init_memory,
                         exact_model="action_values")


def make_rudder(features: int = 16, cell: str = "lstm", aux_weight: float = 0.5,
                return_scale: float = 0.0, lessons: int = 256, batch_episodes: int = 16,
                priority_decay: float = 0.99, max_episode_steps: Optional[int] = None,
                horizon: Optional[int] = None, model: str = "fitted", inputs: str = "obs",
                input_gate_bias: float = 0.0, warmup_episodes: int = 0,
                quality_threshold: Optional[float] = None) -> Redistributor:
    """RUDDER (Arjona-Medina et al. 2019): an LSTM return decomposition with a lessons buffer
    (module docstring).

    Args:
      model: ``fitted`` (the LSTM) or ``oracle`` (the exact return prediction; the other
        options do not apply).
      features: LSTM units.
      cell: ``lstm`` (flax's cell) or ``rudder`` (no forget or output gate).
      aux_weight: weight of the continuous-prediction loss.
      return_scale: targets are G / return_scale; 0: the RMS return of the lessons buffer.
      lessons: episodes in the lessons buffer (at least the number of environments).
      batch_episodes: episodes per fitting step (each fitting step of
        ``redistribute_fit_steps`` draws its own).
      priority_decay: per-update decay of the stored episodes' priorities.
      max_episode_steps: longest episode stored (H); default: the environment's time limit
        (``horizon``, passed by the engine), else 1000.
      horizon: the environment's time limit (the engine passes it).
      inputs: ``obs`` (the observation o_t), ``delta`` (Δ_t = o_t − o_{t−1}, o_{−1} = 0:
        the demonstration code's state differences, so the last state alone cannot give the
        return away) or ``agent_state`` (the recurrent agent's state after reading o_t,
        ``Trajectory.agent_state``: what the agent remembers, for partially observed tasks;
        the lessons buffer stores the states the agent had when it played the episode).
      input_gate_bias: initial bias of the ``rudder`` cell's input gate (demonstration code:
        −3, so the cell starts by writing little).
      warmup_episodes: the model is fitted and its redistribution used only once the lessons
        buffer has stored more than this many episodes and holds two distinct returns (the
        demonstration code: 256); before, the original reward is passed on. 0: from the start.
      quality_threshold: None, or redistribute only while the prediction quality
        q = 1 − MSE(g_T, G) / Var(G) (running MSE of the finished episodes' final prediction
        and running variance of their returns) is at least this value, and pass the original
        reward on otherwise (the Atari code's gate: 0.2). Either fallback keeps every episode's
        rewards summing to its return.
    """
    if model == "oracle":
        if inputs != "obs":
            raise ValueError(f"rudder: model=oracle computes its prediction from the tabular "
                             f"state; inputs={inputs!r} does not apply")
        return make_rudder_oracle()
    if model != "fitted":
        raise ValueError(f"rudder: model must be fitted or oracle, got {model!r}")
    if cell not in CELLS:
        raise ValueError(f"rudder: cell must be one of {', '.join(CELLS)}, got {cell!r}")
    if inputs not in INPUTS:
        raise ValueError(f"rudder: inputs must be one of {', '.join(INPUTS)}, got {inputs!r}")
    if int(warmup_episodes) < 0:
        raise ValueError(f"rudder: warmup_episodes must be >= 0, got {warmup_episodes}")
    if quality_threshold is not None and not isinstance(quality_threshold, (int, float)):
        raise ValueError(f"rudder: quality_threshold must be a number or none, got "
                         f"{quality_threshold!r}")
    features, lessons, batch_episodes = int(features), int(lessons), int(batch_episodes)
    for name, value in (("features", features), ("lessons", lessons),
                        ("batch_episodes", batch_episodes)):
        if value < 1:
            raise ValueError(f"rudder: {name} must be a positive integer, got {value}")
    if float(return_scale) < 0:
        raise ValueError(f"rudder: return_scale must be >= 0 (0: automatic), got {return_scale}")
    if not 0.0 < float(priority_decay) <= 1.0:
        raise ValueError(f"rudder: priority_decay must be in (0, 1], got {priority_decay}")
    steps = int(max_episode_steps or horizon or DEFAULT_MAX_EPISODE_STEPS)
    if steps < 1:
        raise ValueError(f"rudder: max_episode_steps must be positive, got {steps}")
    network = ReturnModel(features, cell, float(input_gate_bias))
    aux_weight, fixed_scale = float(aux_weight), float(return_scale)
    delta, warmup = inputs == "delta", int(warmup_episodes)

    def seen(traj: Trajectory) -> Array:
        """``[T, N, ...]`` what the model reads of each step besides action and reward."""
        if inputs != "agent_state":
            return traj.obs
        if traj.agent_state is None:
            raise ValueError("rudder with inputs=agent_state reads the agent's recurrent state: "
                             "train it with a recurrent --policy")
        return traj.agent_state

    def zero_carry(batch: int):
        zeros = jnp.zeros((batch, features), jnp.float32)
        return (zeros, zeros)

    def init(key: Array, example: Trajectory):
        num_actions = example.logits.shape[-1]
        x = step_inputs(seen(example)[0], example.action[0], example.reward[0], num_actions,
                    jnp.float32(1.0))
        return network.init(key, zero_carry(x.shape[0]), x)

    def init_memory(example: Trajectory) -> RudderMemory:
        num_envs = example.action.shape[1]
        zeros = jnp.zeros((num_envs,), jnp.float32)
        stored = seen(example)
        episodes = lessons_lib.init_memory(num_envs, lessons, steps, stored.shape[2:],
                                           stored.dtype, example.action.shape[2:],
                                           example.action.dtype)
        return RudderMemory(carry=zero_carry(num_envs), prediction=zeros, return_so_far=zeros,
                            prev_reward=zeros, prev_obs=jnp.zeros_like(stored[0]),
                            scale=jnp.float32(max(fixed_scale, 1.0)), episodes=episodes,
                            squared_error=jnp.float32(jnp.nan),
                            return_moments=jnp.full((2,), jnp.nan, jnp.float32),
                            num_actions=int(example.logits.shape[-1]))

    def ready(episodes: lessons_lib.EpisodeMemory) -> Array:
        """Past the warm-up: enough episodes stored, and two distinct returns among them."""
        if not warmup:
            return jnp.bool_(True)
        filled = jnp.isfinite(episodes.priority)
        returns = episodes.lessons.returns
        spread = (jnp.max(jnp.where(filled, returns, -jnp.inf))
                  - jnp.min(jnp.where(filled, returns, jnp.inf)))
        return jnp.logical_and(episodes.stored > warmup, spread > 0)

    def quality(squared_error: Array, moments: Array) -> Array:
        """q = 1 − running MSE of g_T / running variance of G (NaN while unknown)."""
        variance = moments[1] - moments[0] ** 2
        return jnp.where(variance > 0, 1.0 - squared_error / jnp.maximum(variance, 1e-12),
                         jnp.nan)

    def buffer_scale(episodes: lessons_lib.EpisodeMemory) -> Array:
        if fixed_scale > 0:
            return jnp.float32(fixed_scale)
        filled = jnp.isfinite(episodes.priority)
        returns = episodes.lessons.returns
        mean_square = jnp.sum(jnp.where(filled, returns ** 2, 0.0)) / jnp.maximum(filled.sum(), 1)
        return jnp.maximum(jnp.sqrt(mean_square), 1.0)

    def redistribute(params, traj: Trajectory, key: Array, memory: RudderMemory):
        """``(trajectory with r̃, memory after the window, metrics)``."""
        del key
        num_actions = traj.logits.shape[-1]
        scale = memory.scale

        def model_step(carry_prev, t):
            carry, prev_reward, prev_obs = carry_prev
            obs, action, reward, done = t
            x = step_inputs(obs, action, prev_reward, num_actions, scale,
                        prev_obs if delta else None)
            carry, g = network.apply(params, carry, x)
            reset = lambda x: jnp.where(  # noqa: E731
                done.reshape(done.shape + (1,) * (x.ndim - 1)), jnp.zeros_like(x), x)
            return (jax.tree.map(reset, carry), reset(reward), reset(obs)), g * scale

        steps = (seen(traj), traj.action, traj.reward, traj.done)
        (carry, prev_reward, prev_obs), g = jax.lax.scan(
            model_step, (memory.carry, memory.prev_reward, memory.prev_obs), steps)
        _, episode_return, _, _ = prediction_differences(
            g, traj.reward, traj.done, memory.prediction, memory.return_so_far)
        errors = jnp.where(traj.done, jnp.square(episode_return - g), 0.0)
        # The prediction quality, from the finished episodes' errors before this window's.
        q = quality(memory.squared_error, memory.return_moments)
        use = ready(memory.episodes)
        if quality_threshold is not None:
            use = jnp.logical_and(use, q >= quality_threshold)
        # Gate closed: predicting the return so far (R_t + r_t) gives r̃_t = r_t, plus at the
        # window's first step the difference R_0 − p_0 still owed to a running episode, so every
        # episode's new rewards still sum to its return.
        used = jnp.where(use, g, episode_return)
        new_reward, _, prediction, return_so_far = prediction_differences(
            used, traj.reward, traj.done, memory.prediction, memory.return_so_far)
        ended = traj.done.sum()

        def running(old, new):  # a running mean over windows in which episodes ended
            return jnp.where(ended > 0, jnp.where(jnp.isnan(old), new, QUALITY_DECAY * old
                                                  + (1 - QUALITY_DECAY) * new), old)

        def window_mean(x):
            return jnp.where(traj.done, x, 0.0).sum() / jnp.maximum(ended, 1)

        squared_error = running(memory.squared_error, window_mean(errors))
        return_moments = running(memory.return_moments, jnp.stack(
            [window_mean(episode_return), window_mean(episode_return ** 2)]))

        def record(episodes, t):
            obs, action, reward, done, error = t
            return lessons_lib.record_step(episodes, obs, action, reward, done,
                                           error / jnp.square(scale)), None

        episodes = lessons_lib.decay(memory.episodes, priority_decay)
        episodes, _ = jax.lax.scan(record, episodes, steps + (errors,))
        memory = memory.replace(carry=carry, prediction=prediction, return_so_far=return_so_far,
                                prev_reward=prev_reward, prev_obs=prev_obs, episodes=episodes,
                                scale=buffer_scale(episodes), squared_error=squared_error,
                                return_moments=return_moments)
        metrics = {
            "prediction_error": prediction_error(g, episode_return, traj.done),
            "quality": q,
            "redistributing": use.astype(jnp.float32),
            "lessons_filled": jnp.isfinite(memory.episodes.priority).mean(),
            "episodes_too_long": memory.episodes.too_long.astype(jnp.float32),
            "return_scale": memory.scale,
        }
        return traj.replace(reward=new_reward), memory, metrics

    def sample(memory: RudderMemory, key: Array):
        episodes, valid = lessons_lib.sample(memory.episodes, key, batch_episodes)
        # Nothing is fitted before the warm-up ends (the loss then weighs no episode).
        valid = jnp.logical_and(valid, ready(memory.episodes))
        return episodes, valid, memory.scale, memory.num_actions

    def predictions(params, episodes: lessons_lib.Episodes, scale: Array,
                    num_actions: int) -> Array:
        """``[H, B]`` g_t of stored episodes, read from their start (units of ``scale``)."""
        reward = jnp.swapaxes(episodes.reward, 0, 1)
        prev = jnp.concatenate([jnp.zeros_like(reward[:1]), reward[:-1]])
        obs, action = jnp.swapaxes(episodes.obs, 0, 1), jnp.swapaxes(episodes.action, 0, 1)
        prev_obs = jnp.concatenate([jnp.zeros_like(obs[:1]), obs[:-1]]) if delta else None
        x = step_inputs(obs, action, prev, num_actions, scale, prev_obs)
        _, g = jax.lax.scan(lambda c, xt: network.apply(params, c, xt),
                            zero_carry(action.shape[1]), x)
        return g

    def loss(params, batch, hparams, key):
        del hparams, key
        episodes, valid, scale, num_actions = batch
        g = predictions(params, episodes, scale, num_actions)
        mask = episodes.mask.T
        target = episodes.returns / scale
        last = jnp.take_along_axis(g, jnp.maximum(episodes.length - 1, 0)[None, :], axis=0)[0]
        weight = valid.astype(jnp.float32)
        count = jnp.maximum(weight.sum(), 1.0)
        main = jnp.sum(weight * jnp.square(last - target)) / count
        per_step = jnp.where(mask, jnp.square(g - target[None, :]), 0.0)
        aux_each = per_step.sum(axis=0) / jnp.maximum(episodes.length, 1)
        aux = jnp.sum(weight * aux_each) / count
        return main + aux_weight * aux, {"main_loss": main, "aux_loss": aux}

    return Redistributor(name="rudder", redistribute=redistribute, init=init,
                         loss=loss, learned=True, init_memory=init_memory, sample=sample,
                         continuous_actions=True, reads_agent_state=inputs == "agent_state")

"""Return-conditioned hindsight credit: ``hca_return`` (HCA, Theorem 2) and ``c2a2c``.

References:
  * Harutyunyan et al., "Hindsight Credit Assignment", NeurIPS 2019 (arXiv 1912.02503).
  * Alipov et al., "Towards Practical Credit Assignment for Deep RL" (arXiv 2106.04499): C2A2C,
    the credit-constrained advantage actor-critic. Its full text was not available: ``c2a2c`` is a
    reconstruction from the abstract and the HCA theory; docs/hca.md lists every choice.
  * Meulemans et al., "Would I have gotten that reward?" (COCOA), NeurIPS 2023 (arXiv 2306.16803):
    policy-modulated hindsight logits.

Both estimators share one model h_φ(a | s, Z) of the action given the return that followed,
fitted by cross-entropy on the rollout (``loss``). With ``model="oracle"`` the model is the exact
h(a | s, Z) of the current policy, computed by the engine from the tabular MDP every update
(only where the environment has ground truth, and for the undiscounted Monte-Carlo return).

The MLP reads Z through ``model_input``: the batch-``"standardised"`` Z (default), the
``"centred"`` Z − V(s_t), or ``"grid"``, the
:func:`~jaxcredit.estimators.hindsight_models.two_hot` encoding of Z on a grid fixed for the run
(given, or read from the environment's return range), as the official HCA code bins the return.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import returns
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.hca import (
    FORMS, GATES, RETURN_KINDS, credit_gate, credit_ratio, mixed_hindsight, return_hca_all_action,
    return_hca_sampled)
from jaxcredit.types import Credit, Trajectory

Array = jax.Array

MODEL_INPUTS = ("standardised", "centred", "grid")
# What the model reads of the step besides Z: the observation, or the recurrent agent's state.
STATE_INPUTS = ("observation", "agent_state")
# Bins of a grid derived from a range (z_range or the environment's); docs/hca.md has the
# measurements behind 16 (finer grids fit the model more slowly and learned more slowly).
DEFAULT_BINS = 16


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_unit(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")


def obs_ndim(trajectory: Trajectory) -> int:
    return trajectory.obs.ndim - trajectory.action.ndim


def behaviour_policy(trajectory: Trajectory) -> tuple[Array, Array]:
    """π(·|s_t) and π(a_t|s_t) from the behaviour logits."""
    pi = jax.nn.softmax(trajectory.logits)
    pi_a = jnp.take_along_axis(pi, trajectory.action[..., None], axis=-1)[..., 0]
    return pi, pi_a


def value_target(trajectory: Trajectory, hparams: Any) -> Array:
    """The critic's target: the episode-aware λ-return."""
    return returns.episode_aware_lambda_returns(
        trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
        hparams.gamma, hparams.lambda_)


def conditioning_return(trajectory: Trajectory, hparams: Any, kind: str) -> Array:
    """Z_t: Monte-Carlo (λ = 1) or λ-return, both episode-aware (no leak across episode ends).

    Both bootstrap from V at time-outs and at the end of the window; a window that covers whole
    episodes gives the plain Monte-Carlo return for ``"mc"``.
    """
    lam = 1.0 if kind == "mc" else hparams.lambda_
    z = returns.episode_aware_lambda_returns(
        trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
        hparams.gamma, lam)
    return jax.lax.stop_gradient(z)


def model_feature(z: Array, trajectory: Trajectory, kind: str,
                  grid: Optional[Sequence[float]] = None) -> Array:
    """What the MLP reads besides the observation, under stop-gradient.

    ``"grid"``: the two-hot encoding of Z on the fixed grid g (``[*batch, K]``),
    x(Z) = (1 − f)·e_i + f·e_{i+1} for g_i ≤ Z ≤ g_{i+1}, f = (Z − g_i)/(g_{i+1} − g_i): a function
    of Z alone. ``"standardised"``: (Z − mean Z) / std Z over the batch, so the same Z is a
    different input whenever the batch's returns move. ``"centred"``: Z − V(s_t), the return's
    surprise under the critic; it carries the same information about the action given s_t
    (V(s_t) is a function of s_t) and does not move with the batch's composition, but moves with
    the critic.
    """
    if kind == "grid":
        if grid is None:
            raise ValueError("model_input='grid' needs a grid of returns")
        return jax.lax.stop_gradient(hm.two_hot(z, jnp.asarray(grid, jnp.float32)))
    if kind == "centred":
        return jax.lax.stop_gradient(z - trajectory.value)
    return jax.lax.stop_gradient((z - z.mean()) / (z.std() + 1e-6))


def _numbers(name: str, value: Any) -> np.ndarray:
    """A list of numbers given as a sequence, an array or "a,b,c" (the command line)."""
    if isinstance(value, str):
        try:
            value = [float(v) for v in value.replace(";", ",").split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"{name} must be numbers separated by commas, got {value!r}") from None
    try:
        out = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of numbers, got {value!r}") from None
    if out.ndim != 1 or not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be a flat list of finite numbers, got {value!r}")
    return out


def check_grid(z_grid: Any) -> tuple:
    """``z_grid`` as a tuple of floats: at least 2 points, strictly increasing."""
    grid = _numbers("z_grid", z_grid)
    if grid.size < 2 or np.any(np.diff(grid) <= 0):
        raise ValueError(f"z_grid must hold at least 2 strictly increasing returns, got {z_grid!r}")
    return tuple(float(g) for g in grid)


def environment_return_range(env: Any, env_params: Any) -> Optional[tuple]:
    """The support of the environment's return grid, or None where it has none.

    The grid on which the engine computes the exact return law (``return_grid.plan_return_grid``,
    also used by ``estimator/kl_to_exact`` and the oracle): it covers every undiscounted return the
    tabular MDP can produce within its time limit, widened by 6 standard deviations of the summed
    Gaussian reward noise, and its step divides every deterministic reward (so each such return is
    a grid point). None for environments without a tabular MDP or whose grid cannot be planned.
    """
    from jaxcredit.exact import return_grid  # noqa: PLC0415 (numpy planning, only when asked)
    from jaxcredit.exact.tabular import has_ground_truth  # noqa: PLC0415

    if env is None or not has_ground_truth(env):
        return None
    params = env.default_params if env_params is None else env_params
    try:
        mdp = env.tabular_mdp(params)
        law_fn = getattr(env, "reward_law", None)
        law = law_fn(params) if callable(law_fn) else None
        horizon = int(getattr(params, "max_steps_in_episode", 0) or 0)
        plan = return_grid.plan_return_grid(mdp, horizon, law)
    except (ValueError, TypeError, jax.errors.ConcretizationTypeError):
        return None
    return tuple(float(g) for g in np.asarray(plan.support))


def resolve_grid(z_grid: Any = None, z_range: Any = None, z_bins: Optional[int] = None,
                 env: Any = None, env_params: Any = None) -> Optional[tuple]:
    """The fixed grid of returns of the run, or None where none is known.

    In this order: ``z_grid`` as given; ``z_bins`` (default 16) uniform points over
    ``z_range = (low, high)``; the environment's return grid
    (:func:`environment_return_range`), as it is when it has at most ``z_bins`` (default 16)
    points (deterministic rewards: every return is a grid point), else ``z_bins`` uniform points
    over its range.
    """
    if z_bins is not None and (isinstance(z_bins, bool) or not isinstance(z_bins, int)
                               or z_bins < 2):
        raise ValueError(f"z_bins must be an integer >= 2, got {z_bins!r}")
    if z_grid is not None:
        if z_range is not None or z_bins is not None:
            raise ValueError("give z_grid, or z_range and z_bins, not both")
        return check_grid(z_grid)
    bins = DEFAULT_BINS if z_bins is None else z_bins
    if z_range is not None:
        bounds = _numbers("z_range", z_range)
        if bounds.size != 2 or not bounds[0] < bounds[1]:
            raise ValueError(f"z_range must be (low, high) with low < high, got {z_range!r}")
        return tuple(float(g) for g in np.linspace(bounds[0], bounds[1], bins))
    support = environment_return_range(env, env_params)
    if support is None:
        return None
    if len(support) <= bins and z_bins is None:
        return support
    return tuple(float(g) for g in np.linspace(support[0], support[-1], bins))


@dataclasses.dataclass(frozen=True)
class ReturnHindsight:
    """What ``hca_return`` and ``c2a2c`` share: the model h_φ(a|s, Z), its ``init``, its
    cross-entropy ``loss``, the mixed hindsight h_λ at the actions taken, and the model at the
    conditioning points (``hindsight``, for the KL to the exact model)."""

    model: Any
    hidden: tuple
    policy_modulated: bool
    num_states: Optional[int]
    z_grid: Optional[tuple]
    return_kind: str
    mix: float
    model_input: str
    state_input: str = "observation"

    @property
    def oracle(self) -> bool:
        return self.model == "oracle"

    def build(self, trajectory: Trajectory) -> hm.ReturnHindsightModel:
        if isinstance(self.model, hm.ReturnHindsightModel):
            return self.model
        if self.model == "oracle":
            return hm.return_oracle()
        if self.model == "mlp":
            width = len(self.z_grid) if self.model_input == "grid" else 1
            ndim = 1 if self.state_input == "agent_state" else obs_ndim(trajectory)
            return hm.return_mlp(ndim, self.hidden, self.policy_modulated, width)
        return hm.return_tabular(self.num_states, self.z_grid, self.policy_modulated)

    def step_inputs(self, trajectory: Trajectory) -> Array:
        """What the model reads of each step: the tabular state (oracle), the recurrent
        agent's state (``state_input="agent_state"``), or the observation."""
        if self.oracle:
            return trajectory.state
        if self.state_input == "agent_state":
            if trajectory.agent_state is None:
                raise ValueError("state_input=agent_state reads the agent's recurrent state, "
                                 "and the trajectory has none")
            return trajectory.agent_state
        return trajectory.obs

    def init(self, key, example: Trajectory):
        return self.build(example).init(key, self.step_inputs(example), example.logits.shape[-1])

    def log_h(self, params, trajectory: Trajectory, z: Array) -> Array:
        """log h_φ(·|s_t, Z_t) for every step: ``[T, *batch, A]``."""
        inputs = self.step_inputs(trajectory)
        feature = model_feature(z, trajectory, self.model_input, self.z_grid)
        logits = self.build(trajectory).logits(params, inputs, z, feature, trajectory.logits)
        return jax.nn.log_softmax(logits)

    def hindsight(self, params, trajectory: Trajectory, hparams, key=None):
        """``(log h [T, *batch, A], weight [T, *batch])`` at every step (s_t, Z_t)."""
        del key
        z = conditioning_return(trajectory, hparams, self.return_kind)
        log_h = self.log_h(params, trajectory, z)
        return log_h, jnp.ones(log_h.shape[:-1], jnp.float32)

    def mixed(self, params, trajectory: Trajectory, hparams):
        """(Z, π, π(a_t), h_λ, h_λ(a_t)) for every step of the window."""
        z = conditioning_return(trajectory, hparams, self.return_kind)
        h = jnp.exp(self.log_h(params, trajectory, z))
        pi, pi_a = behaviour_policy(trajectory)
        h = mixed_hindsight(h, pi, self.mix)
        h_a = jnp.take_along_axis(h, trajectory.action[..., None], axis=-1)[..., 0]
        return z, pi, pi_a, h, h_a

    def loss(self, params, trajectory: Trajectory, hparams, key=None):
        """Cross-entropy −log h_φ(a_t | s_t, Z_t), averaged over the batch."""
        log_h, _ = self.hindsight(params, trajectory, hparams, key)
        ce = -jnp.take_along_axis(log_h, trajectory.action[..., None], axis=-1)[..., 0]
        value = ce.mean()
        return value, {"hindsight_loss": value}


def _check_model(model, num_states, z_grid, return_kind):
    if isinstance(model, hm.ReturnHindsightModel):
        return
    check_choice("model", model, ("mlp", "tabular", "oracle"))
    if model == "tabular" and (num_states is None or z_grid is None):
        raise ValueError("model='tabular' needs num_states and a grid of returns (z_grid, "
                         "z_range, or an environment with a tabular MDP)")
    if model == "oracle" and return_kind != "mc":
        raise ValueError("model='oracle' needs return_kind='mc': the exact hindsight is that of "
                         "the Monte-Carlo return")


def input_grid(model_input: str, needs_grid: bool, z_grid: Any, z_range: Any,
               z_bins: Optional[int], env: Any, env_params: Any) -> Optional[tuple]:
    """The run's grid of returns (:func:`resolve_grid`), reading the environment only where
    the input (``model_input="grid"``) or the model (``needs_grid``) uses it; a one-line error
    for the grid input without any grid."""
    check_choice("model_input", model_input, MODEL_INPUTS)
    needs_grid = needs_grid or model_input == "grid"
    grid = resolve_grid(z_grid, z_range, z_bins, *((env, env_params) if needs_grid else ()))
    if model_input == "grid" and grid is None:
        raise ValueError("model_input='grid' needs z_grid, z_range, or an environment with a "
                         "tabular MDP to read the return range from")
    return grid


def _parts(model, hidden, policy_modulated, num_states, z_grid, z_range, z_bins, env,
           env_params, return_kind, mix, model_input, state_input="observation"
           ) -> ReturnHindsight:
    """Checks the model options and resolves the grid of returns (once, at build; the
    environment is read only when the grid input or the tabular model needs it)."""
    grid = input_grid(model_input, model == "tabular", z_grid, z_range, z_bins, env, env_params)
    _check_model(model, num_states, grid, return_kind)
    check_choice("state_input", state_input, STATE_INPUTS)
    if state_input == "agent_state" and model != "mlp":
        raise ValueError(f"state_input=agent_state is for the mlp model, got model={model!r}")
    return ReturnHindsight(model, tuple(hidden), policy_modulated, num_states, grid, return_kind,
                           mix, model_input, state_input)


def _record(name, parts: ReturnHindsight, assign, all_action: bool, twin) -> Estimator:
    """The Estimator record of a return-hindsight estimator (learned, or its oracle twin)."""
    exact = "return_hindsight" if parts.return_kind == "mc" else None

    def ratio(params, trajectory: Trajectory, hparams) -> Array:
        _, _, pi_a, _, h_a = parts.mixed(params, trajectory, hparams)
        return credit_ratio(pi_a, h_a)

    return Estimator(
        name=name, init=parts.init, assign=assign, loss=parts.loss, all_action=all_action,
        learned=not parts.oracle, exact_model=exact, is_oracle=parts.oracle,
        reads_agent_state=parts.state_input == "agent_state",
        oracle=None if (parts.oracle or exact is None) else twin,
        hindsight=parts.hindsight, credit_ratio=ratio)


def hca_return(
    form: str = "sampled",
    mix: float = 1.0,
    clip: Optional[float] = None,
    baseline: bool = False,
    return_kind: str = "mc",
    model: Union[str, hm.ReturnHindsightModel] = "mlp",
    model_input: str = "standardised",
    state_input: str = "observation",
    hidden: tuple = (64,),
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    z_grid: Optional[Any] = None,
    z_range: Optional[Any] = None,
    z_bins: Optional[int] = None,
    env: Any = None,
    env_params: Any = None,
) -> Estimator:
    """Return-conditioned HCA (Harutyunyan et al. 2019, Theorem 2) with a fitted h_φ(a|s,Z).

    With h(a|s,z) = P(A_0 = a | S_0 = s, Z = z) and any return Z with E[Z|s,a] = Q^π(s,a), Bayes'
    rule gives

        A^π(s,a) = E_{Z|s,a}[(1 − π(a|s)/h(a|s,Z)) (Z − b(s))]      (sampled form, a = a_t)
        A^π(s,a) = E_{Z|s}  [(h(a|s,Z)/π(a|s) − 1) Z]               (all-action form, every a)

    for any baseline b(s), since E_{Z|s,a}[π(a|s)/h(a|s,Z)] = 1. The estimator uses the mixed
    hindsight h_λ = mix·h_φ + (1 − mix)·π. Without ``baseline`` b = 0 (the (1 − c) factor is the
    only baseline, as in the official HCA code); with ``baseline`` b = V(s_t), the critic. The
    critic is trained on the λ-return (``value_target``) and bootstraps Z at window ends.

    Args:
      form: "sampled" (per-step credit) or "all_action" (``[T, *batch, A]``).
      mix: λ of the mixture h_λ, in (0, 1]; 1 is plain HCA.
      clip: clip (1 − c) to [−clip, clip] in the sampled form (None: off).
      baseline: subtract V(s_t) from Z in the sampled form.
      return_kind: Z is the Monte-Carlo return ("mc") or the λ-return with ``hparams.lambda_``.
      model: "mlp", "tabular" (one-hot or index state observations), "oracle" (the exact model,
        supplied by the engine on environments with ground truth), or a ReturnHindsightModel.
      model_input: what the MLP reads of Z: the batch-"standardised" Z (default), the "centred"
        Z − V(s_t), or "grid", the two-hot encoding of Z on the fixed grid of returns
        (``hindsight_models.two_hot``), the same input for the same Z in every batch.
      state_input: what the model reads of the step besides Z: the ``"observation"``, or the
        recurrent policy's state (``"agent_state"``, ``Trajectory.agent_state``; needs
        ``--policy gru|lstm|lru|rma``), for tasks where the observation hides what the agent
        knows (the key taken, in key-to-door).
      hidden: MLP widths.
      policy_modulated: logits = stop_gradient(log π) + f_φ, h = π at initialisation.
      num_states: for the tabular model.
      z_grid: the grid of returns (increasing; a sequence or "a,b,c"): the bin centres of
        ``model_input="grid"`` and the tabular model's bins.
      z_range, z_bins: instead of ``z_grid``, ``z_bins`` (default 16) uniform points over
        ``(low, high)`` (a pair or "low,high"). Without either, the environment's return range
        (``resolve_grid``).
      env, env_params: supplied by the engine and the diagnostics (the return range).
    """
    check_choice("form", form, FORMS)
    check_choice("return_kind", return_kind, RETURN_KINDS)
    check_unit("mix", mix)
    if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip must be a positive number or None, got {clip!r}")
    parts = _parts(model, hidden, policy_modulated, num_states, z_grid, z_range, z_bins, env,
                   env_params, return_kind, mix, model_input, state_input)

    def assign(params, trajectory: Trajectory, hparams, key=None) -> Credit:
        del key
        z, pi, pi_a, h, h_a = parts.mixed(params, trajectory, hparams)
        if form == "sampled":
            advantage = return_hca_sampled(pi_a, h_a, z - trajectory.value if baseline else z,
                                           clip)
        else:
            advantage = return_hca_all_action(pi, h, z)
        c = credit_ratio(pi_a, h_a)
        return Credit(
            advantage=jax.lax.stop_gradient(advantage),
            value_target=value_target(trajectory, hparams),
            diagnostics={"credit_ratio_mean": c.mean(), "credit_ratio_max": c.max(),
                         "advantage_std": advantage.std()},
        )

    options = dict(form=form, mix=mix, clip=clip, baseline=baseline, return_kind=return_kind,
                   model_input=parts.model_input, z_grid=parts.z_grid)
    return _record("hca_return", parts, assign, form == "all_action",
                   lambda: hca_return(**options, model="oracle"))


def c2a2c(
    gate: str = "hard",
    threshold: float = 0.1,
    mix: float = 1.0,
    return_kind: str = "mc",
    model: Union[str, hm.ReturnHindsightModel] = "mlp",
    model_input: str = "standardised",
    state_input: str = "observation",
    hidden: tuple = (64,),
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
    z_grid: Optional[Any] = None,
    z_range: Optional[Any] = None,
    z_bins: Optional[int] = None,
    env: Any = None,
    env_params: Any = None,
) -> Estimator:
    """Credit-constrained advantage actor-critic (Alipov et al. 2021, C2A2C), reconstructed.

    The abstract: C2A2C "ignores policy updates for actions which don't affect future outcomes
    based on credit in hindsight, while updating the policy as normal for those that do". Read
    literally (docs/hca.md lists every choice):

        Â_t = m_t · Â_t^{GAE(γ, λ)},   m_t = gate(c_t),   c_t = π(a_t|s_t) / h_λ(a_t|s_t, Z_t)

    with the hard gate m = 1[|1 − c| ≥ δ] or the soft gate m = min(1, |1 − c|/δ), computed under
    stop-gradient. The critic, its λ-return targets and the entropy bonus are A2C's, unchanged.
    The hindsight model is the same as :func:`hca_return`'s and is fitted the same way.

    Args:
      gate: "hard" or "soft".
      threshold: δ > 0.
      mix, return_kind, model, model_input, state_input, hidden, policy_modulated, num_states,
        z_grid, z_range, z_bins, env, env_params: as in :func:`hca_return`.
    """
    check_choice("gate", gate, GATES)
    if not (isinstance(threshold, (int, float)) and threshold > 0):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")
    check_choice("return_kind", return_kind, RETURN_KINDS)
    check_unit("mix", mix)
    parts = _parts(model, hidden, policy_modulated, num_states, z_grid, z_range, z_bins, env,
                   env_params, return_kind, mix, model_input, state_input)

    def assign(params, trajectory: Trajectory, hparams, key=None) -> Credit:
        del key
        _, _, pi_a, _, h_a = parts.mixed(params, trajectory, hparams)
        c = credit_ratio(pi_a, h_a)
        m = credit_gate(c, threshold, gate)
        advantage, targets = returns.gae(
            trajectory.reward, trajectory.value, trajectory.next_value, trajectory.terminated,
            trajectory.truncated, hparams.gamma, hparams.lambda_)
        return Credit(
            advantage=jax.lax.stop_gradient(m * advantage),
            value_target=targets,
            diagnostics={"gate_open": m.mean(), "credit_evidence": jnp.abs(1.0 - c).mean(),
                         "credit_ratio_mean": c.mean()},
        )

    options = dict(gate=gate, threshold=threshold, mix=mix, return_kind=return_kind,
                   model_input=parts.model_input, z_grid=parts.z_grid)
    return _record("c2a2c", parts, assign, False, lambda: c2a2c(**options, model="oracle"))

"""A process reward model as the redistribute stage: step rewards from a grader of every step.

On a task whose steps can be checked (ArithmeticChain), a process reward model (PRM,
:mod:`jaxcredit.reward_models.models`) gives each step t the probability p_t that it is right. The
stage turns the scores into step rewards::

    r̃_t = (p_t − 1) / K            (+ r_t, the environment's outcome reward, with ``outcome=keep``)

so a right step costs nothing, a wrong one costs up to 1/K, and an episode's step rewards sum to
mean_t p_t − 1 = −(1 − mean_t p_t) ∈ [−1, 0]: the grader's mean step score, shifted, is the
*proxy* reward the policy is trained on (``redistribute/step_score`` reports mean_t p_t). Any
constant offset would do; this one makes the oracle's reward −1/K exactly on the steps its
labeller judges inconsistent.

Models (``model=``):

* ``fitted``: the PRM network. Before training it is fitted on ``pretrain_problems`` problems ×
  ``pretrain_samples`` solutions of the noisy solver (:func:`~jaxcredit.envs.arithmetic_chain.
  noisy_solver`, slip rates ``slip``) for ``pretrain_steps`` Adam steps inside the stage's
  ``init`` (so inside the compiled program, one grader per seed); with ``refit=true`` (the
  default) the engine refits it every update on the agent's own steps, labelled by the same
  labeller (a labeller in the loop), with ``redistribute_fit_*`` and ``redistributor_lr``;
  ``refit=false`` keeps the pre-trained grader fixed.
* ``oracle``: p_t is the labeller's own judgement (1 or 0): what a perfect PRM of that labeller
  would say.

``labeller=`` chooses whose labels the PRM imitates: ``exact`` (the ground truth), or a
miscalibrated one that errs in a stated way (``mul_as_add``: reads × as +; ``trust_mul``: never
checks a × step; :func:`~jaxcredit.envs.arithmetic_chain.step_consistent`). A policy trained on a
miscalibrated grader's step rewards learns the grader's bias.

A step is judged as a PRM judges it: right if it follows from the previous written value. Up to
the first error that is exactly its correctness; after an error the labeller (and a PRM trained on
labels that stop at the first error) still judges each step locally, so the agent keeps learning
arithmetic from episodes that went wrong early.

Reported every update (``redistribute/*``): ``step_score`` (mean p_t over the window's steps),
``correct_step_rate`` (share of the agent's steps that are correct: every step up to and
including it right, the ground-truth label), ``consistent_step_rate`` (share that follow from the
value before them, the exact labeller's judgement), ``grader_accuracy`` (share of steps where the
grader, thresholded at 1/2, agrees with the exact consistency check), and with ``refit`` the
fitting loss.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp

from jaxcredit.redistribute import Redistributor
from jaxcredit.reward_models import models
from jaxcredit.types import Trajectory

Array = jax.Array

OUTCOMES = ("drop", "keep")
# What the stage reads of a step-checked task (``step_checker``).
STEP_CHECKED = ("step_judgement", "step_label", "slip_rates", "graded_solutions",
                "miscalibrations", "correct_label")


def step_checker(env: Any) -> Any:
    """The step-checked task inside ``env`` (through wrappers), or a ValueError: an environment
    that judges each step of a solution and samples graded solutions of its own
    (``STEP_CHECKED``: ``jaxcredit.envs.arithmetic_chain.ArithmeticChain``)."""
    inner, seen = env, 0
    while inner is not None and seen < 16:
        if all(hasattr(type(inner), name) for name in STEP_CHECKED):
            return inner
        inner, seen = getattr(inner, "_env", None), seen + 1
    name = getattr(env, "name", type(env).__name__)
    raise ValueError(f"redistribute stage prm needs an environment whose steps can be checked "
                     f"(ArithmeticChain); {name} has none")


def _numbers(value: Any, name: str) -> tuple[float, ...]:
    """A tuple of numbers from a number, a sequence or a comma-separated string (the command
    line gives ``hidden=128,128``)."""
    if isinstance(value, str):
        try:
            return tuple(float(v) for v in value.split(",") if v.strip())
        except ValueError:
            raise ValueError(f"prm: {name} must be numbers separated by commas, got {value!r}"
                             ) from None
    if isinstance(value, (int, float)):
        return (value,)
    return tuple(value)


def step_rewards(step_probs: Array, reward: Array, steps: int, outcome: str) -> Array:
    """r̃_t = (p_t − 1) / K, plus the outcome reward r_t with ``outcome="keep"`` (module doc)."""
    extra = reward if outcome == "keep" else jnp.zeros_like(reward)
    return (step_probs - 1.0) / steps + extra


def make_prm(model: str = "fitted", labeller: str = "exact", outcome: str = "drop",
             refit: bool = True, hidden: Sequence[int] = (256, 256),
             pretrain_problems: int = 4096, pretrain_samples: int = 4, pretrain_steps: int = 1000,
             pretrain_batch: int = 256, pretrain_lr: float = 1e-3,
             slip: Sequence[float] = (0.1, 0.1, 0.55), env: Any = None) -> Redistributor:
    """Step rewards from a process reward model's score of each step, fitted or exact (module
    docstring).

    Args:
      model: ``fitted`` or ``oracle``.
      labeller: ``none``/``exact``, ``mul_as_add`` or ``trust_mul``: whose step labels the PRM
        imitates (the oracle *is* that labeller).
      outcome: ``drop`` (step rewards only) or ``keep`` (step rewards plus the outcome reward).
      refit: refit the fitted PRM every update on the agent's steps.
      hidden: the PRM's hidden layer widths.
      pretrain_problems, pretrain_samples, pretrain_steps, pretrain_batch, pretrain_lr: the
        pre-training data (noisy-solver solutions) and its Adam schedule (0 steps: start from
        a fresh initialisation).
      slip: the noisy solver's slip rate for +, − and ×.
      env: the environment (the engine passes it).
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"prm: outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    if model not in ("fitted", "oracle"):
        raise ValueError(f"prm: model must be fitted or oracle, got {model!r}")
    if env is None:
        raise ValueError("prm: needs the environment (the engine passes env=)")
    task = step_checker(env)
    miscalibration = "none" if labeller == "exact" else labeller
    if miscalibration not in task.miscalibrations:
        raise ValueError(f"prm: labeller must be one of exact, "
                         f"{', '.join(task.miscalibrations[1:])}, got {labeller!r}")
    hidden = tuple(int(h) for h in _numbers(hidden, "hidden"))
    slip = _numbers(slip, "slip")
    counts = dict(pretrain_problems=int(pretrain_problems), pretrain_samples=int(pretrain_samples),
                  pretrain_batch=int(pretrain_batch))
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"prm: {name} must be a positive integer, got {value}")
    if int(pretrain_steps) < 0:
        raise ValueError(f"prm: pretrain_steps must be >= 0, got {pretrain_steps}")
    slip_rates = task.slip_rates(slip)
    scorer = models.StepScorer(task.num_actions, hidden)
    refit = str(refit).lower() in ("true", "1", "yes")
    oracle = model == "oracle"

    def judge(obs: Array, action: Array, which: str = miscalibration):
        return task.step_judgement(obs, action, which)

    def init(key: Array, example: Trajectory):
        if int(pretrain_steps) == 0:
            return scorer.init(key, example.obs[0, :1], example.action[0, :1])
        data_key, fit_key = jax.random.split(key)
        data = task.graded_solutions(data_key, slip_rates, counts["pretrain_problems"],
                                     counts["pretrain_samples"], miscalibration)
        params, _ = models.fit(fit_key, scorer, "prm", data, int(pretrain_steps),
                               counts["pretrain_batch"], float(pretrain_lr))
        return params

    def probabilities(params, traj: Trajectory) -> Array:
        if oracle:
            return judge(traj.obs, traj.action)[0].astype(jnp.float32)
        return jax.nn.sigmoid(scorer.apply(params, traj.obs, traj.action))

    def redistribute(params, traj: Trajectory, key: Array, memory: None):
        del key
        p = probabilities(params, traj)
        exact, _ = judge(traj.obs, traj.action, "none")
        correct = task.step_label(traj.obs, traj.action) == task.correct_label
        metrics = {
            "step_score": p.mean(),
            "correct_step_rate": correct.mean(),
            "consistent_step_rate": exact.mean(),
            "grader_accuracy": ((p > 0.5) == exact).mean(),
        }
        new = step_rewards(p, traj.reward, task.steps, outcome)
        return traj.replace(reward=new), memory, metrics

    def loss(params, traj: Trajectory, hparams, key):
        del hparams, key
        consistent, labelled = judge(traj.obs, traj.action)
        logits = scorer.apply(params, traj.obs, traj.action)
        bce = models.masked_bce(logits, consistent.astype(jnp.float32),
                                labelled.astype(jnp.float32))
        return bce, {"labelled_share": labelled.mean()}

    if oracle:
        return Redistributor(name="prm", redistribute=redistribute)
    return Redistributor(name="prm", redistribute=redistribute, init=init, loss=loss,
                         learned=refit)


"""The credit pipeline of one configuration, built from the registries in one way.

Every stage (relabel, redistribute, estimate, objective; docs/design.md) is built by name through
its registry's ``Registry.make(name, context, **options)``: the options are the stage's own
(``--estimator-option k=v`` and the like, strict: an unknown one is an error), and the *context*
is what the engine knows and any stage may read. Each context entry reaches a factory that takes
a keyword of that name (or ``**kwargs``):

    env, env_params   the environment (COCOA-reward reads its reward values, prm its checker)
    horizon           the episode time limit (HER's replay window, RUDDER's episode length)
    group_size        episodes per task instance (the group baselines)
    action_distribution  the policy's law of actions (``jaxcredit.policies``): the objective
                      reads log π and the entropy through it

and the objective's also holds its settings from the config (``critic``,
``normalize_advantage``, ``clip_value_loss``).

``make_stages`` also makes the checks that need more than one stage or the environment (a
whole-episode estimator needs windows of one episode; a pretrain schedule needs a part to
pretrain). The stages then make one credit transform (``jaxcredit.credit.pipeline``), which
checks what needs the exact models.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.runs import episode_horizon
from jaxcredit.credit.named import stage_context as credit_stage_context
from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.base import Estimator
from jaxcredit.objectives import Objective, make_objective
from jaxcredit.policies import ActionDistribution
from jaxcredit.redistribute import Redistributor, make_redistributor
from jaxcredit.relabel import Relabeller, make_relabeller


@dataclasses.dataclass(frozen=True)
class Stages:
    """The pipeline of one configuration (None: the optional stage is not set)."""

    objective: Objective
    estimator: Estimator
    relabeller: Optional[Relabeller]
    redistributor: Optional[Redistributor]


def stage_context(config: TrainConfig, env: Any, env_params: Any,
                  distribution: Optional[ActionDistribution] = None) -> dict[str, Any]:
    """What the engine hands every stage factory that takes it (module docstring)."""
    return credit_stage_context(env, env_params, config.group_size, distribution)


def objective_context(config: TrainConfig, context: dict[str, Any]) -> dict[str, Any]:
    """The stage context plus the objective's settings from the config."""
    return {**context, "critic": config.critic,
            "normalize_advantage": config.normalize_advantage,
            "clip_value_loss": config.clip_value_loss}


def make_stages(config: TrainConfig, env: Any, env_params: Any,
                distribution: Optional[ActionDistribution] = None) -> Stages:
    """Builds the on-policy pipeline of a resolved ``config`` on ``env`` for a policy with the
    law of actions ``distribution`` (None: categorical); a one-line ValueError for a bad name,
    option or combination."""
    context = stage_context(config, env, env_params, distribution)
    objective = make_objective(config.objective, objective_context(config, context))
    estimator = make_estimator(config.estimator.name, context, **dict(config.estimator.options))
    if estimator.episode_windows or config.group_size > 1:
        check_episode_windows(config, env, env_params, estimator)
    relabeller = None
    if config.relabel.name:
        relabeller = make_relabeller(config.relabel.name, context, **dict(config.relabel.options))
        if relabeller.needs_replay:
            raise ValueError(f"relabel stage {config.relabel.name!r} relabels replayed transitions "
                             f"and needs the off-policy learner (--algo dqn): a policy gradient "
                             f"on relabelled goals would be off-policy")
    redistributor = (make_redistributor(config.redistribute.name, context,
                                        **dict(config.redistribute.options))
                     if config.redistribute.name else None)
    if config.estimator.pretrain_steps and (not estimator.learned
                                            or estimator.pretrain_loss is None):
        raise ValueError(f"estimator {config.estimator.name!r} has no part to pretrain "
                         f"(estimator_pretrain_steps={config.estimator.pretrain_steps}); "
                         f"cocoa_feature with features=pretrain has")
    if distribution is not None and distribution.continuous:
        check_continuous_actions(config, estimator, redistributor)
    check_agent_state(config, estimator, redistributor)
    return Stages(objective, estimator, relabeller, redistributor)


def check_continuous_actions(config: TrainConfig, estimator: Estimator,
                             redistributor: Optional[Redistributor]) -> None:
    """A stage that reads actions as indices (hindsight models over A actions, COCOA, the exact
    models) declares nothing; one that reads no actions, or reads them through
    ``jaxcredit.policies.action_features``, sets ``continuous_actions``."""
    for kind, name, stage in (("estimator", config.estimator.name, estimator),
                              ("redistribute stage", config.redistribute.name, redistributor)):
        if stage is not None and not getattr(stage, "continuous_actions", False):
            raise ValueError(f"{kind} {name!r} needs discrete actions; {config.env!r} has "
                             f"continuous ones")


def check_agent_state(config: TrainConfig, estimator: Estimator,
                      redistributor: Optional[Redistributor]) -> None:
    """A stage that reads the agent's state (``Trajectory.agent_state``) needs a policy that
    has one: a recurrent core."""
    for kind, name, stage in (("estimator", config.estimator.name, estimator),
                              ("redistribute stage", config.redistribute.name, redistributor)):
        if stage is not None and stage.reads_agent_state and config.policy == "mlp":
            raise ValueError(f"{kind} {name!r} reads the agent's recurrent state; a memoryless "
                             f"policy has none: use --policy gru, lstm, lru or rma")
        if getattr(stage, "reads_memory", False) and config.policy != "rma":
            raise ValueError(f"{kind} {name!r} reads how the agent read its external memory; "
                             f"--policy {config.policy} has none: use --policy rma")


def reads_agent_state(stages: Stages) -> bool:
    """Whether any stage of the pipeline reads ``Trajectory.agent_state``."""
    return any(stage is not None and stage.reads_agent_state
               for stage in (stages.estimator, stages.redistributor))


def check_episode_windows(config: TrainConfig, env: Any, env_params: Any,
                          estimator: Estimator) -> None:
    """Episodic credit (group baselines, belief credit) needs every window to be one whole
    episode: a fixed episode length equal to num_steps, and instances to share for groups."""
    horizon = episode_horizon(env_params)
    what = (f"estimator {config.estimator.name!r}" if estimator.episode_windows
            else f"group_size={config.group_size}")
    if horizon is None:
        raise ValueError(f"{what} reads each window as one whole episode and "
                         f"{config.env!r} states no episode length")
    if horizon != config.num_steps:
        raise ValueError(f"{what} reads each window as one whole episode: set --num-steps "
                         f"{horizon} (the episode length), got {config.num_steps}")
    if config.group_size > 1 and not hasattr(env, "reset_to_instance"):
        raise ValueError(f"group_size={config.group_size} needs an environment with task "
                         f"instances to share (sample_instance / reset_to_instance, e.g. "
                         f"CommandChain); {config.env!r} has none")

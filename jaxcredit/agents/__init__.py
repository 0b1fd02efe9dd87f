"""Training engines: ``make_train(config) -> train(key, hparams) -> (final_state, metrics)``.

PPO, A2C and REINFORCE are presets of one on-policy engine (``train``): one rollout
(``rollout``), the credit pipeline (relabel → redistribute → estimate → objective) and one update
step; they differ only in the objective, the default estimator and loop counts (``config``).

The engine's names are imported on first use (PEP 562), not with the package: the engine
imports the environments, and some of their libraries create JAX arrays when imported, which
starts JAX's backends. ``jaxcredit.cli`` reads its flags from ``agents.config`` and must be able
to start JAX's distributed runtime after that (``jaxcredit.distributed``).
"""

import importlib

from jaxcredit.agents.config import ALGO_PRESETS, ALGOS, Hparams, TrainConfig, stack_hparams
from jaxcredit.agents.stage_config import (EstimatorConfig, EvalConfig, FittedStageConfig,
                                           OffPolicyConfig, StageConfig)

_LAZY = {
    "EnvRunner": "rollout", "EpisodeSummary": "rollout",
    "reset_runner": "rollout", "rollout": "rollout",
    "AgentState": "state", "TrainState": "state", "Window": "state",
    "Engine": "runs", "make_engine": "train", "make_train": "train",
}

__all__ = [
    "ALGOS", "ALGO_PRESETS", "AgentState", "Engine", "EnvRunner", "EpisodeSummary",
    "EstimatorConfig", "EvalConfig", "FittedStageConfig", "Hparams", "OffPolicyConfig",
    "StageConfig", "TrainConfig", "TrainState", "Window", "make_engine", "make_train",
    "reset_runner", "rollout", "stack_hparams",
]


def __getattr__(name: str):
    """Imports the engine's modules on first use and binds all their exported names at once
    (so ``agents.rollout`` is the function, as with an eager import, not the submodule)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for attr, module in _LAZY.items():
        globals()[attr] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))

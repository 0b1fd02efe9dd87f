"""Training engines: ``make_train(config) -> train(key, hparams) -> (final_state, metrics)``.

PPO, A2C and REINFORCE share one rollout (``rollout``), one loss path (``losses``) and one update
step (``train``); they differ only in the policy surrogate and in loop counts (``config``).
"""

from jaxcredit.agents.config import ALGOS, Hparams, TrainConfig, stack_hparams
from jaxcredit.agents.rollout import EnvRunner, EpisodeSummary, Transitions, reset_runner, rollout
from jaxcredit.agents.state import Batch, TrainState
from jaxcredit.agents.train import Engine, make_engine, make_train

__all__ = [
    "ALGOS", "Batch", "Engine", "EnvRunner", "EpisodeSummary", "Hparams", "TrainConfig",
    "TrainState",
    "Transitions", "make_engine", "make_train", "reset_runner", "rollout", "stack_hparams",
]

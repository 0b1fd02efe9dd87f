"""Training engines: ``make_train(config) -> train(key, hparams) -> (final_state, metrics)``.

PPO, A2C and REINFORCE are presets of one on-policy engine (``train``): one rollout
(``rollout``), the credit pipeline (relabel → redistribute → estimate → objective) and one update
step; they differ only in the objective, the default estimator and loop counts (``config``).
"""

from jaxcredit.agents.config import ALGO_PRESETS, ALGOS, Hparams, TrainConfig, stack_hparams
from jaxcredit.agents.rollout import EnvRunner, EpisodeSummary, Transitions, reset_runner, rollout
from jaxcredit.agents.state import AgentState, TrainState, Window
from jaxcredit.agents.train import Engine, make_engine, make_train

__all__ = [
    "ALGOS", "ALGO_PRESETS", "AgentState", "Engine", "EnvRunner", "EpisodeSummary", "Hparams",
    "TrainConfig", "TrainState", "Transitions", "Window", "make_engine", "make_train",
    "reset_runner", "rollout", "stack_hparams",
]

"""Credit-assignment environments (gymnax >= 1.0 API), wrappers and exact tabular ground truth.

``make(name, **kwargs) -> (env, env_params)`` creates any registered environment (gymnax's and
jaxcredit's); ``registered()`` lists the names. Environments with exact ground truth are
:class:`TabularEnv` s (``has_ground_truth(env)``); ``return_law`` computes the law of their return.
See docs/envs.md for the table of environments.
"""

from jaxcredit.envs import return_law, tabular
from jaxcredit.envs.registry import make, register, registered
from jaxcredit.envs.tabular import TabularMDP
from jaxcredit.envs.tabular_env import TabularEnv, has_ground_truth
from jaxcredit.envs.wrappers import DelayedReward, EpisodeStats, FlattenObservation, TimeLimit

__all__ = [
    "DelayedReward",
    "EpisodeStats",
    "FlattenObservation",
    "TabularEnv",
    "TabularMDP",
    "TimeLimit",
    "has_ground_truth",
    "make",
    "register",
    "registered",
    "return_law",
    "tabular",
]

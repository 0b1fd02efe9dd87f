"""Credit-assignment environments (gymnax >= 1.0 API), wrappers and exact tabular ground truth.

``make(name, **kwargs) -> (env, env_params)`` creates any registered environment (gymnax's and
jaxcredit's); ``registered()`` lists the names. See docs/envs.md for the table of environments.
"""

from jaxcredit.envs import tabular
from jaxcredit.envs.registry import make, registered
from jaxcredit.envs.tabular import TabularMDP
from jaxcredit.envs.wrappers import DelayedReward, EpisodeStats, FlattenObservation, TimeLimit

__all__ = [
    "DelayedReward",
    "EpisodeStats",
    "FlattenObservation",
    "TabularMDP",
    "TimeLimit",
    "make",
    "registered",
    "tabular",
]

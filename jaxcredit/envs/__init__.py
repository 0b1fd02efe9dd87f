"""Credit-assignment environments (gymnax >= 1.0 API), wrappers and exact tabular ground truth.

``make(name, **kwargs) -> (env, env_params)`` creates any registered environment (gymnax's and
jaxcredit's); ``registered()`` lists the names. Environments with exact ground truth are
:class:`TabularEnv` s (``has_ground_truth(env)``); :mod:`jaxcredit.exact` computes their exact
quantities (dynamic programming, hindsight distributions, the law of the return).
See docs/envs.md for the table of environments.
"""

from jaxcredit.envs.base import DiscreteEnv
from jaxcredit.envs.registry import make, register, registered
from jaxcredit.envs.tabular_env import TabularEnv
from jaxcredit.exact.tabular import TabularMDP, has_ground_truth
from jaxcredit.envs.wrappers import DelayedReward, EpisodeStats, FlattenObservation, TimeLimit

__all__ = [
    "DelayedReward",
    "DiscreteEnv",
    "EpisodeStats",
    "FlattenObservation",
    "TabularEnv",
    "TabularMDP",
    "TimeLimit",
    "has_ground_truth",
    "make",
    "register",
    "registered",
]

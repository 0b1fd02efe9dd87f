"""Credit estimators: pure time-major functions, and init / assign / loss records built on them."""

from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.registry import make_estimator, register, registered
from jaxcredit.estimators.returns import (
    METHODS,
    affine_reverse_recursion,
    default_method,
    discounted_returns,
    episode_aware_lambda_returns,
    episode_aware_n_step_returns,
    gae,
    lambda_returns,
    n_step_bootstrapped_returns,
    truncated_generalized_advantage_estimation,
    vtrace,
)
from jaxcredit.estimators.value_learning import (
    cut_at_time_outs,
    double_q_learning,
    q_lambda,
    q_learning,
    retrace,
    sarsa_lambda,
    td_lambda,
    watkins_lambda,
)

__all__ = [
    "Estimator",
    "METHODS",
    "affine_reverse_recursion",
    "cut_at_time_outs",
    "default_method",
    "discounted_returns",
    "double_q_learning",
    "episode_aware_lambda_returns",
    "episode_aware_n_step_returns",
    "gae",
    "lambda_returns",
    "make_estimator",
    "n_step_bootstrapped_returns",
    "q_lambda",
    "q_learning",
    "register",
    "registered",
    "retrace",
    "sarsa_lambda",
    "td_lambda",
    "truncated_generalized_advantage_estimation",
    "vtrace",
    "watkins_lambda",
]

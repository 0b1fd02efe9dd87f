"""How good is the credit? Estimator quality against exact ground truth on tabular environments.

On an environment with an exact tabular MDP and a softmax-tabular policy, every credit estimator
turns each sampled episode into a policy-gradient estimate; the diagnostics compare these with the
exact gradient ∇J and the credit with the exact advantage A^π, both from dynamic programming:

* :mod:`.gradients`: per-episode gradients of the tabular softmax policy and their bias,
  variance and SNR in dB and cosine to ∇J (``gradient_statistics``);
* :mod:`.credit_map`: credit per step and action against A^π, and its RMSE;
* :mod:`.specs`: estimator specs such as ``hca_return:form=all_action`` or
  ``hca_return:model=oracle``;
* :mod:`.program`: ``DiagnoseConfig`` and ``make_diagnose`` / ``diagnose``, the one compiled call
  (episodes, fitting, credit, metrics) with exact models through the engine's oracle twins;
* :mod:`.report`: table, figure and JSON;
* :mod:`.cli`: the ``jaxcredit diagnose`` command.

    from jaxcredit import diagnostics as D
    results = D.diagnose(D.DiagnoseConfig(env="DelayedEffect", hindsight="exact"))
    print(D.format_table(results))
"""

from jaxcredit.diagnostics.credit_map import credit_map
from jaxcredit.diagnostics.gradients import gradient_statistics, per_trajectory_gradients
from jaxcredit.diagnostics.program import (
    DEFAULT_ESTIMATORS,
    DEFAULT_POLICY_SCALE,
    DiagnoseConfig,
    diagnose,
    episodes_to_trajectory,
    fit_hindsight,
    make_diagnose,
    random_policy,
)
from jaxcredit.diagnostics.report import format_table, plot
from jaxcredit.diagnostics.specs import EstimatorSpec, parse_spec, parse_specs

__all__ = [
    "DEFAULT_ESTIMATORS",
    "DEFAULT_POLICY_SCALE",
    "DiagnoseConfig",
    "EstimatorSpec",
    "credit_map",
    "diagnose",
    "episodes_to_trajectory",
    "fit_hindsight",
    "format_table",
    "gradient_statistics",
    "make_diagnose",
    "parse_spec",
    "parse_specs",
    "per_trajectory_gradients",
    "plot",
    "random_policy",
]

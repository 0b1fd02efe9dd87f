"""Credit as a library: the credit pipeline as a transform any training loop calls.

::

    import jaxcredit.credit as jc

    transform = jc.make("gae")                                   # or "hca_return", model="oracle"
    state = transform.init(key, example_trajectory)
    credit, trajectory, state, metrics = transform.update(state, trajectory, key, hparams,
                                                          jc.Context(policy_params=params,
                                                                     policy_logits=fn))

* :mod:`jaxcredit.credit.transform`: :class:`CreditTransform`, :class:`CreditState`,
  :class:`Context`, :func:`pipeline` (a transform from stages);
* :mod:`jaxcredit.credit.named`: :func:`make` (a transform by name, from the registries);
* :mod:`jaxcredit.credit.exact`: :class:`ExactCredit`, the exact models of the current policy;
* :mod:`jaxcredit.credit.error`: the credit error of fitted against exact credit, a function any
  loop can call (:func:`credit_error`);
* :mod:`jaxcredit.credit.scores`: the credit's sign against an environment's step labels;
* :mod:`jaxcredit.credit.trajectory`: :func:`trajectory`, the window from a loop's arrays, and
  :func:`rollout`, a window acted in fresh environments by any policy function.
"""

from jaxcredit.credit.error import credit_error, decisive_states
from jaxcredit.credit.exact import ExactCredit, make_exact_credit
from jaxcredit.credit.named import make, stage_context
from jaxcredit.credit.scores import step_label_scores
from jaxcredit.credit.trajectory import rollout, trajectory
from jaxcredit.credit.transform import (Context, CreditHparams, CreditState, CreditTransform,
                                        check_gammas, pipeline)

__all__ = [
    "Context", "CreditHparams", "CreditState", "CreditTransform", "ExactCredit", "check_gammas",
    "credit_error",
    "decisive_states", "make", "make_exact_credit", "pipeline", "rollout", "stage_context",
    "step_label_scores", "trajectory",
]

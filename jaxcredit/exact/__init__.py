"""The exact layer: what dynamic programming knows about a small environment and a policy.

Environments with ground truth (:class:`jaxcredit.envs.TabularEnv`) expose their MDP as a
:class:`tabular.TabularMDP`. On it:

* :mod:`tabular`: the MDP record, values, advantages, occupancies, the exact policy gradient,
  episode sampling;
* :mod:`hindsight`: the exact hindsight distributions the credit models learn (state-, reward-
  and return-conditioned);
* :mod:`return_grid` and :mod:`return_law`: the law of the return on a planned grid, fast enough
  for every training update;
* :mod:`models`: the kinds of exact model an oracle stage reads (one record each: how it is
  planned and computed; a new kind is one record and one registry line);
* :mod:`ground_truth`: the same quantities for the engine's *current* policy inside the compiled
  step (the oracle models, the exact return, the redistribution quality).

Nothing here imports the environments, the estimators or the engines: they import it.
"""

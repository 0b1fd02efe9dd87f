"""Reward models that grade solutions step by step or by their outcome (Lightman et al., 2023).

* :mod:`jaxcredit.reward_models.models`: the outcome reward model (ORM, trained on final-answer
  labels) and the process reward model (PRM, trained on step labels up to the first error), one
  network shape for both, the aggregation of step scores into a solution score (product or
  minimum), and their fitting loop.
* :mod:`jaxcredit.reward_models.best_of_n`: best-of-N selection by a score or by majority vote,
  with accuracy curves over N and bootstrap confidence intervals over problems.

The PRM as the redistribute stage of the credit pipeline is :mod:`jaxcredit.redistribute.prm`;
the reasoning task with exact step labels is :mod:`jaxcredit.envs.arithmetic_chain`.
"""

"""Benchmarks of jaxcredit, each one a race of compiled calls in a single process.

* ``jaxcredit bench train`` (:mod:`.train`): training throughput of the engine against PureJaxRL
  (:mod:`.purejaxrl`, from the user's checkout), against the engine of an earlier git revision
  (:mod:`.baseline`), and the cost of the fitted credit models relative to A2C+GAE and of the
  redistributors (RUDDER) relative to PPO+GAE (its cases and races in :mod:`.races`);
* ``jaxcredit bench estimators`` (:mod:`.estimators`): the multistep estimators against rlax.

:mod:`.timing` holds the protocol (ahead-of-time compile, alternating calls, medians) and
:mod:`.cli` the command.
"""

"""jaxcredit: credit assignment for reinforcement learning in JAX.

Importing jaxcredit sets the XLA:CPU flags of :mod:`jaxcredit.xla_flags` (unless jax has already
started a backend, or ``JAXCREDIT_SAFE_XLA_CPU=0``): without them large vmapped programs can
freeze on small CPU machines.
"""

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()

__version__ = "0.1.0"

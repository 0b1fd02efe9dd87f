"""jaxcredit: credit assignment for reinforcement learning in JAX.

Importing jaxcredit adds the XLA:CPU flags of :mod:`jaxcredit.xla_flags` when
``JAXCREDIT_SAFE_XLA_CPU=1`` (before jax starts a backend); by default XLA's own flags apply.
"""

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()

__version__ = "0.1.0"

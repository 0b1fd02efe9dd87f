"""Shared test setup: XLA:CPU flags that avoid a rare scheduler deadlock (see jaxcredit.xla_flags).

pytest imports this file before the test modules, so the flags are in place before jax starts.
"""

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()

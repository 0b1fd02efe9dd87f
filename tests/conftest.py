"""Shared test setup: the XLA:CPU flags as a jaxcredit command sets them (jaxcredit.xla_flags: XLA's
defaults unless JAXCREDIT_SAFE_XLA_CPU=1), and no compilation cache.

pytest imports this file before the test modules, so the flags are in place before jax starts.
"""

import os

from jaxcredit.xla_flags import configure_cpu_flags

# Commands run in-process by the tests do not share a compilation cache with the user's
# (tests/test_compile_cache.py turns it on in a folder of its own).
os.environ.setdefault("JAXCREDIT_COMPILE_CACHE", "0")

configure_cpu_flags()

"""Shared test setup: the XLA:CPU flags as a jaxcredit command sets them (jaxcredit.xla_flags: XLA's
defaults unless JAXCREDIT_SAFE_XLA_CPU=1), and one compilation cache for the whole test session.

pytest imports this file before the test modules, so the flags are in place before jax starts.
"""

import os
import shutil
import tempfile

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()

# The suite compiles many programs more than once: the same engine in several test files (each
# xdist worker is its own process), and again in every command a test starts as a subprocess.
# A persistent compilation cache shared by the session's processes compiles each program once.
# It lives in a fresh folder per session (never the user's cache; removed at the end), and the
# controller creates it before the workers start so that they, and their subprocesses, inherit
# its path. tests/test_compile_cache.py checks the cache itself in folders of its own.
_SESSION_CACHE = "JAXCREDIT_TEST_SESSION_CACHE"


def pytest_configure(config):
    if not hasattr(config, "workerinput") and _SESSION_CACHE not in os.environ:
        os.environ[_SESSION_CACHE] = tempfile.mkdtemp(prefix="jaxcredit-test-xla-")
        config._jaxcredit_cache_owner = True
    folder = os.environ[_SESSION_CACHE]
    os.environ.setdefault("JAXCREDIT_COMPILE_CACHE", folder)
    import jax  # noqa: PLC0415

    from jaxcredit import compile_cache  # noqa: PLC0415

    if compile_cache.enable() is not None:
        # Small programs too, unlike a jaxcredit command: the suite compiles thousands of them
        # (each eager jnp call on a new shape is one, at 50-500 ms on XLA:CPU), many of them
        # again in the other xdist worker, and a cache read takes milliseconds. The CLI
        # subprocesses read them as well (only writing is limited to slow compiles).
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_unconfigure(config):
    if getattr(config, "_jaxcredit_cache_owner", False):
        shutil.rmtree(os.environ.pop(_SESSION_CACHE), ignore_errors=True)

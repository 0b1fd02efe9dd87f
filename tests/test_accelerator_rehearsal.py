"""The GPU script's rehearsal and the other end of the supported range (accelerator/rehearse.sh).

One test: ``bash accelerator/rehearse.sh`` in a Python 3.12 venv holding only the GPU image's
stack (JAX 0.11), where it runs every accelerator table at a smoke size, resumes, refuses, and
runs the public API, a command-line train, sweep and resume (the steps are listed in the
script). It runs inside the suite rather than after it because the rehearsal is one process
that mostly compiles on one core: scheduled first on one xdist worker, it overlaps the rest of
the suite on the other (measured on 2 cores: about 95 s of rehearsal and 60 s of venv building
that used to follow the suite). Skipped where no Python 3.12 is found, unless
REQUIRE_OTHER_END=1 (.ci/run), when that fails.
"""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script_env() -> dict:
    """The user's environment for the script: without the suite's XLA flags (JAX 0.11 aborts on
    one of them; the script sets its own), its compilation cache or its crash re-run."""
    from conftest import TEST_XLA_FLAGS  # noqa: PLC0415

    env = {k: v for k, v in os.environ.items()
           if k not in ("JAXCREDIT_COMPILE_CACHE", "JAXCREDIT_TEST_SESSION_CACHE",
                        "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                        "PYTEST_CURRENT_TEST")}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env


def test_the_accelerator_script_rehearses_under_python_312_and_jax_011():
    proc = subprocess.run(["bash", "accelerator/rehearse.sh"], cwd=ROOT, env=_script_env(),
                          capture_output=True, text=True, timeout=1200)
    output = proc.stdout + proc.stderr
    if proc.returncode == 0 and "rehearse.sh: skipped" in proc.stdout:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, output[-6000:]
    assert "rehearse.sh: passed." in proc.stdout, output[-6000:]
    print(proc.stdout.strip().splitlines()[-1])  # the timings, for --durations readers

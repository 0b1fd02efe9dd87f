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
import sys

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


def _tables():
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("accelerator_tables",
                                                  ROOT / "accelerator" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_gpu_tables_go_into_results_md_between_its_markers(tmp_path):
    """``tables.py --render DIR --into RESULTS.md`` replaces only RESULTS.md's GPU section, its
    headings one level down, and a second write of the same tables changes nothing."""
    tables = _tables()
    document = (ROOT / "RESULTS.md").read_text()
    written = tables.into_section(document, tables.render(tmp_path))  # no table run yet
    start, end = written.index(tables.START), written.index(tables.END)
    before, after = document.index(tables.START), document.index(tables.END)
    assert written[:start] == document[:before] and written[end:] == document[after:]
    section = written[start:end]
    assert "### 1. Estimator speed" in section and "Not run yet." in section
    assert "\n# " not in section and "\n## " not in section
    assert tables.into_section(written, tables.render(tmp_path)) == written
    with pytest.raises(ValueError, match="markers"):
        tables.into_section("# no markers\n", tables.render(tmp_path))

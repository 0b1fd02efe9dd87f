"""The persistent compilation cache of the command line (jaxcredit.compile_cache)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from jaxcredit import compile_cache

# No evaluation: smaller programs for the first run to compile (the cache is what is checked).
COMMAND = ["train", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "2", "--num-steps",
           "8", "--total-timesteps", "160", "--num-chunks", "1", "--eval-every", "0"]


def _train(out: pathlib.Path, cache: str) -> int:
    """Runs the command with the cache at ``cache``; returns how many programs it read from it.

    JAX logs each persistent-cache hit at debug level in ``jax._src.compiler``: counting those
    lines is exact, where comparing two compile times (rounded to 0.1 s) is not.
    """
    script = pathlib.Path(sys.executable).parent / "jaxcredit"
    env = dict(os.environ, JAXCREDIT_COMPILE_CACHE=cache, JAX_DEBUG_LOG_MODULES="jax._src.compiler")
    done = subprocess.run([str(script), *COMMAND, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.search(r"compiled 1 chunk program\(s\)", done.stdout + done.stderr)
    return len(re.findall(r"[Pp]ersistent compilation cache hit", done.stdout + done.stderr))


def test_the_second_run_reads_its_program_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    assert _train(tmp_path / "a", str(cache)) == 0, "an empty cache cannot be read"
    entries = list(cache.iterdir())
    assert entries, "the first run wrote nothing into the cache"
    assert _train(tmp_path / "b", str(cache)) > 0, "the second run compiled everything again"


def test_cache_location_and_off_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    default = tmp_path / "jaxcredit" / "xla"
    monkeypatch.setenv("JAXCREDIT_COMPILE_CACHE", "off")
    assert compile_cache.cache_dir("gpu") is None
    monkeypatch.setenv("JAXCREDIT_COMPILE_CACHE", str(tmp_path / "x"))
    assert compile_cache.cache_dir("cpu") == tmp_path / "x"
    monkeypatch.setenv("JAXCREDIT_COMPILE_CACHE", "on")
    assert compile_cache.cache_dir("cpu") == default
    monkeypatch.delenv("JAXCREDIT_COMPILE_CACHE")
    # Unset: on for accelerators, off on CPU (XLA:CPU crashes in serialisation, module docstring).
    assert compile_cache.cache_dir("gpu") == default
    assert compile_cache.cache_dir("tpu") == default
    assert compile_cache.cache_dir("cpu") is None


def test_a_cpu_command_writes_no_cache_by_default(tmp_path):
    """``jaxcredit train`` on CPU with no cache setting leaves the default folder empty."""
    script = pathlib.Path(sys.executable).parent / "jaxcredit"
    env = {k: v for k, v in os.environ.items() if k != "JAXCREDIT_COMPILE_CACHE"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_PLATFORMS="cpu")
    done = subprocess.run([str(script), *COMMAND, "--out", str(tmp_path / "run")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "xdg" / "jaxcredit").exists()


def test_train_turns_the_cache_on_by_default_on_an_accelerator(tmp_path):
    """The other half of the default: where the backend is not the CPU, ``train``'s host loop
    (``cli._host_loop``, after the distributed runtime) points JAX at the default folder."""
    code = ("import jax; jax.default_backend = lambda: 'gpu'\n"
            "from jaxcredit import cli; cli._host_loop(None, False)\n"
            "print(jax.config.jax_compilation_cache_dir)")
    env = {k: v for k, v in os.environ.items() if k != "JAXCREDIT_COMPILE_CACHE"}
    env.update(XDG_CACHE_HOME=str(tmp_path), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(tmp_path / "jaxcredit" / "xla")

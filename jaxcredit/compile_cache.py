"""JAX's persistent compilation cache for jaxcredit's commands: on for accelerators, opt-in on CPU.

Every ``jaxcredit train``, ``sweep``, ``run`` and ``diagnose`` compiles its programs (3-9 s each
for a training chunk on a 2-core CPU). With the cache on, a program compiled once is read back
from disk by every later command with the same program, jax version and machine: a PPO CartPole
``train`` program compiled in 6.3 s the first time and loaded in 1.1 s the second
(``docs/engine.md``, "Compile once"). Benchmarks (``jaxcredit bench``) leave it off, since they
report compile times.

**Off by default on CPU.** XLA:CPU sometimes dies in native code while it serialises a program
into the cache or reads one back (``executable.serialize()`` / ``deserialize``; jaxlib 0.10.2
and 0.11.2 both; counts in ``experiments/compile_cache/README.md``). JAX cannot catch a crash in
native code, so the command dies with it and the run is lost. A CPU command therefore compiles
every program afresh unless the user asks for the cache; on a GPU or TPU backend the cache stays
on by default.

``JAXCREDIT_COMPILE_CACHE`` chooses: unset, the default (the folder below on an accelerator,
none on CPU); ``1`` / ``on``, the default folder on every backend
(``$XDG_CACHE_HOME/jaxcredit/xla`` or ``~/.cache/jaxcredit/xla``); a path, that folder on every
backend; ``0`` / ``off``, no cache. A cache set up by the caller (``jax_compilation_cache_dir``
already configured) is left alone.
"""

from __future__ import annotations

import os
import pathlib
from typing import Optional

ENV = "JAXCREDIT_COMPILE_CACHE"
OFF = ("0", "off", "false", "no", "")
ON = ("1", "on", "true", "yes")
# Programs that compile faster than this are not worth a disk round trip.
MIN_COMPILE_SECONDS = 0.5


def default_folder() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "jaxcredit" / "xla"


def cache_dir(platform: Optional[str]) -> Optional[pathlib.Path]:
    """The folder the cache would use for programs of ``platform`` ("cpu", "gpu", "tpu", ...),
    or None when it is off there (module docstring)."""
    setting = os.environ.get(ENV)
    if setting is None:
        return None if platform == "cpu" else default_folder()
    if setting.strip().lower() in OFF:
        return None
    if setting.strip().lower() in ON:
        return default_folder()
    return pathlib.Path(setting).expanduser()


def enable(platform: Optional[str] = None) -> Optional[pathlib.Path]:
    """Turns the cache on where it is on (module docstring); returns its folder, or None if off.

    Args:
      platform: the backend the programs compile for; None asks ``jax.default_backend()``
        when the default applies, which starts JAX's backends, so in a multi-process run call
        this after ``jax.distributed.initialize``.
    """
    import jax  # noqa: PLC0415

    if jax.config.jax_compilation_cache_dir:
        return pathlib.Path(jax.config.jax_compilation_cache_dir)
    if platform is None and os.environ.get(ENV) is None:  # only the default needs the backend
        platform = jax.default_backend()
    folder = cache_dir(platform)
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache location must not stop a run
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder

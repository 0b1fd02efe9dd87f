"""JAX's persistent compilation cache for jaxcredit's commands.

Every ``jaxcredit train``, ``sweep``, ``run`` and ``diagnose`` compiles its programs (3-9 s each
for a training chunk on a 2-core CPU). With the cache on, a program compiled once is read back
from disk by every later command with the same program, jax version and machine: a PPO CartPole
``train`` program compiled in 6.3 s the first time and loaded in 1.1 s the second
(``docs/engine.md``, "Compile once"). Benchmarks (``jaxcredit bench``) leave it off, since they
report compile times.

``JAXCREDIT_COMPILE_CACHE`` chooses: unset, the default folder (``$XDG_CACHE_HOME/jaxcredit/xla``
or ``~/.cache/jaxcredit/xla``); a path, that folder; ``0`` / ``off``, no cache. A cache set up by
the caller (``jax_compilation_cache_dir`` already configured) is left alone.
"""

from __future__ import annotations

import os
import pathlib
from typing import Optional

ENV = "JAXCREDIT_COMPILE_CACHE"
OFF = ("0", "off", "false", "no", "")
# Programs that compile faster than this are not worth a disk round trip.
MIN_COMPILE_SECONDS = 0.5


def cache_dir() -> Optional[pathlib.Path]:
    """The folder the cache would use, or None when it is switched off."""
    setting = os.environ.get(ENV)
    if setting is not None:
        return None if setting.strip().lower() in OFF else pathlib.Path(setting).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "jaxcredit" / "xla"


def enable() -> Optional[pathlib.Path]:
    """Turns the cache on (module docstring); returns its folder, or None if off."""
    import jax  # noqa: PLC0415

    if jax.config.jax_compilation_cache_dir:
        return pathlib.Path(jax.config.jax_compilation_cache_dir)
    folder = cache_dir()
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

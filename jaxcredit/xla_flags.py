"""XLA:CPU flags that keep large vmapped programs from deadlocking on small machines.

On 2-core machines, vmapped training programs (tens of seeds in one program) were seen to freeze
inside ``block_until_ready`` with every XLA:CPU thread parked in a futex wait and no progress.
Turning off XLA:CPU's concurrency-optimised scheduler and multi-threaded Eigen cured it in every
run we made (``multi_thread_eigen`` alone did not). The flags only concern the CPU backend, so they
are harmless on accelerators. They must be set before jax is imported.

``JAXCREDIT_KEEP_XLA_DEFAULTS=1`` leaves ``XLA_FLAGS`` untouched; flags the user already set win.
"""

from __future__ import annotations

import os
import sys

CPU_SAFE_FLAGS = {
    "--xla_cpu_enable_concurrency_optimized_scheduler": "false",
    "--xla_cpu_multi_thread_eigen": "false",
}


def configure_cpu_flags() -> bool:
    """Adds :data:`CPU_SAFE_FLAGS` to ``XLA_FLAGS`` unless set already; True if anything changed.

    A no-op once jax has initialised a backend in this process (too late to take effect), or when
    ``JAXCREDIT_KEEP_XLA_DEFAULTS`` is set.
    """
    if os.environ.get("JAXCREDIT_KEEP_XLA_DEFAULTS"):
        return False
    if "jax" in sys.modules:
        from jax._src import xla_bridge  # noqa: PLC0415 (only consulted when jax is loaded)

        if getattr(xla_bridge, "_backends", None):
            return False
    flags = os.environ.get("XLA_FLAGS", "")
    added = [f"{name}={value}" for name, value in CPU_SAFE_FLAGS.items() if name not in flags]
    if added:
        os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    return bool(added)

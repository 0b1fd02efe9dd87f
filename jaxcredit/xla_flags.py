"""XLA:CPU flags that were jaxcredit's guard against a deadlock, now opt-in.

On 2-core machines, vmapped programs (a population of seeds in one program) froze inside XLA:CPU
with every thread parked. For a while every jaxcredit command therefore turned off XLA:CPU's
concurrency-optimised scheduler and multi-threaded Eigen, which made the freeze rare but not
impossible and cost speed (PPO on CartPole at 4 envs: 0.81x PureJaxRL with the flags against
1.16x without, same process).

The cause was found: a native stack of a frozen process showed two pool threads inside jaxlib's
*batched* LAPACK QR (``lapack_sgeqrf_ffi`` → ``ParallelBatchMap`` → ``BlockingCounter::Wait``),
each waiting for sub-tasks only the other could run; the batched QR came from the orthogonal
initialisers under ``jax.vmap`` over seed keys. jaxcredit's initialisers now run a vmapped QR as a
loop of unbatched ones (:func:`jaxcredit.networks.orthogonal`), and with XLA's default flags the
programs that used to freeze finished every time (``python experiments/xla_cpu_hang/hangs.py``:
``results/hangs_cpu_default_flags.md``; flax's batched initialiser still hangs them,
``results/hangs_cpu_flax_init.md``). So XLA's defaults are jaxcredit's defaults again, and the
flags remain available: ``JAXCREDIT_SAFE_XLA_CPU=1`` adds them (flags already in ``XLA_FLAGS``
win). They only concern the CPU backend and must be set before jax starts.
"""

from __future__ import annotations

import os
import sys

CPU_SAFE_FLAGS = {
    "--xla_cpu_enable_concurrency_optimized_scheduler": "false",
    "--xla_cpu_multi_thread_eigen": "false",
}
ENV_SWITCH = "JAXCREDIT_SAFE_XLA_CPU"


def configure_cpu_flags(default: bool = False) -> bool:
    """Adds :data:`CPU_SAFE_FLAGS` to ``XLA_FLAGS`` unless set already; True if anything changed.

    Args:
      default: whether to add them when ``JAXCREDIT_SAFE_XLA_CPU`` is not set.

    A no-op once jax has started a backend in this process (too late to take effect).
    """
    switch = os.environ.get(ENV_SWITCH)
    wanted = default if switch is None else switch.strip().lower() not in ("0", "false", "no", "")
    if not wanted:
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

"""XLA:CPU flags that keep large vmapped programs from deadlocking on small machines.

On 2-core machines, vmapped training programs (tens of seeds in one program) were seen to
freeze inside ``block_until_ready`` with every XLA:CPU thread parked in a futex wait and no
progress. Turning off XLA:CPU's concurrency-optimised scheduler (and multi-threaded Eigen) made it
rare (``multi_thread_eigen`` alone did not help), though one 16-seed program still hung with them
under heavy load, so they are a mitigation, not a proven cure.

The mitigation has a price. With the flags the PPO engine ran at 0.94x PureJaxRL's speed on
CartPole-v1 (4 envs) instead of 1.05-1.07x on a quiet 2-core machine, and at 0.60-0.65x when other
jobs loaded the cores (``jaxcredit bench train``, same process; PureJaxRL was unaffected). We still
turn them on by default on every jaxcredit command and in the test suite, because with XLA's
defaults a 16-seed vmapped PPO program also hung (in ``jaxcredit bench train``) and a hang loses
work. ``JAXCREDIT_SAFE_XLA_CPU=0`` keeps XLA's defaults (faster, at that risk); flags already in
``XLA_FLAGS`` win. They only concern the CPU backend and must be set before jax starts.
"""

from __future__ import annotations

import os
import sys

CPU_SAFE_FLAGS = {
    "--xla_cpu_enable_concurrency_optimized_scheduler": "false",
    "--xla_cpu_multi_thread_eigen": "false",
}
ENV_SWITCH = "JAXCREDIT_SAFE_XLA_CPU"


def configure_cpu_flags(default: bool = True) -> bool:
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

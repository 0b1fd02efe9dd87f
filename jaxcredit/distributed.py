"""Starting JAX's distributed runtime, so that one sweep spans several processes.

A jaxcredit run places its population on a 1-D mesh over ``jax.devices()``
(``jaxcredit.agents.sweep``). In one process that is the local devices; after
``jax.distributed.initialize`` it is the devices of every process, and the same compiled program
runs on all of them, each process holding the members of its own devices (docs/scaling.md).

The runtime must start before anything else touches JAX's backends: once a device has been
listed or an array created, the process is single-process for good. :func:`initialize` therefore
checks its input first (one-line ``ValueError``), then sets the CPU collectives (multi-process on
CPU needs them for the metrics gather and the barriers; they are ignored by GPU and TPU
backends), then starts the runtime.

Two ways to say which process is which:

* explicit: ``coordinator="host0:1234"``, ``num_processes=N``, ``process_id=i`` in every process
  (process 0 runs the coordinator service on that port);
* ``auto=True``: JAX reads them from the cluster environment (SLURM, Open MPI, Cloud TPU, ...).

Once started, the processes of a run must agree on two things before they compute: that they
were all given the same run (:func:`check_same_everywhere`), and whether process 0 could claim
the run directory (:func:`on_first_process`). A process that fails alone would leave the others
waiting in the next collective until JAX's timeouts; these helpers make every process fail
together, with the same one-line error. Both are plain calls in a single process.
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Optional, Sequence

import numpy as np

# Cross-process collectives of the CPU backend (``jax_cpu_collectives_implementation``). Without
# them a multi-process CPU program cannot gather or synchronise across processes.
CPU_COLLECTIVES = "gloo"

# The longest error message process 0 shares with the others (longer ones are cut).
_MESSAGE_BYTES = 1024

_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d+)$")


def check_address(address: str) -> str:
    """Returns ``address`` if it looks like ``HOST:PORT`` (``[IPv6]:PORT`` allowed), else raises.

    JAX would otherwise fail much later, or wait out its connection timeout, on a typo.
    """
    match = _ADDRESS.match(address or "")
    if not match or not 0 < int(match["port"]) < 65536:
        raise ValueError(f"coordinator address must look like HOST:PORT with a port in "
                         f"1-65535, got {address!r}")
    return address


def check_arguments(coordinator: Optional[str], num_processes: Optional[int],
                    process_id: Optional[int], auto: bool) -> None:
    """Raises a one-line ValueError unless the arguments name one consistent way to start."""
    explicit = {"coordinator": coordinator, "num_processes": num_processes,
                "process_id": process_id}
    given = [name for name, value in explicit.items() if value is not None]
    if auto and given:
        raise ValueError(f"auto-detection reads the cluster environment; it takes no "
                         f"{', '.join(given)}")
    if auto:
        return
    if len(given) != 3:
        missing = [name for name in explicit if name not in given]
        raise ValueError(f"a distributed run needs coordinator, num_processes and process_id "
                         f"together (missing {', '.join(missing)})")
    check_address(coordinator)
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must lie in [0, {num_processes - 1}] for {num_processes} "
                         f"processes, got {process_id}")


def initialize(coordinator: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None,
               local_device_ids: Optional[Sequence[int]] = None, auto: bool = False,
               timeout_seconds: int = 300) -> None:
    """Starts JAX's distributed runtime for this process (call it before any other JAX call).

    Args:
      coordinator: ``HOST:PORT`` of process 0's coordinator service (the same in every process).
      num_processes: number of processes in the run.
      process_id: this process, ``0 <= process_id < num_processes``.
      local_device_ids: restrict this process to these local devices (e.g. one GPU each).
      auto: read all of the above from the cluster environment instead (SLURM, Open MPI, ...).
      timeout_seconds: how long to wait for the other processes to connect.

    Raises:
      ValueError: inconsistent arguments, JAX already started in this process, or no cluster
        environment found with ``auto``.
    """
    check_arguments(coordinator, num_processes, process_id, auto)
    import jax  # noqa: PLC0415 (the checks above must not need JAX)
    from jax._src import xla_bridge  # noqa: PLC0415

    if jax.distributed.is_initialized():
        raise ValueError("JAX's distributed runtime is already running in this process")
    if xla_bridge.backends_are_initialized():
        raise ValueError("JAX's distributed runtime must start before any other JAX call in "
                         "the process (its devices are already in use)")
    if not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)
    ids = None if local_device_ids is None else list(local_device_ids)
    try:
        jax.distributed.initialize(coordinator, num_processes, process_id, local_device_ids=ids,
                                   initialization_timeout=timeout_seconds)
    except ValueError as err:
        if auto:
            raise ValueError(f"no cluster environment found ({err}); start each process with "
                             "the coordinator address, the process count and its id") from None
        raise


def check_same_everywhere(fingerprint: str, what: str) -> None:
    """Raises ValueError in every process unless all processes hold the same ``fingerprint``.

    A process started with other flags would compile another program, and the processes would
    wait for each other in its collectives, or train different populations without noticing.
    """
    import jax  # noqa: PLC0415
    from jax.experimental import multihost_utils  # noqa: PLC0415

    if jax.process_count() == 1:
        return
    digest = np.frombuffer(hashlib.sha256(fingerprint.encode()).digest()[:8], np.int64)
    everyone = np.asarray(multihost_utils.process_allgather(digest)).reshape(-1)
    differ = [i for i, value in enumerate(everyone.tolist()) if value != everyone[0]]
    if differ:
        raise ValueError(f"process(es) {differ} were given a different {what} than process 0; "
                         "start every process with the same flags")


def on_first_process(fn: Callable[[], None]) -> None:
    """Runs ``fn`` on process 0 only, then raises its ValueError / OSError in every process.

    Doubles as a barrier: no process goes on before process 0 has finished ``fn``.
    """
    import jax  # noqa: PLC0415
    from jax.experimental import multihost_utils  # noqa: PLC0415

    if jax.process_count() == 1:
        fn()
        return
    message = ""
    if jax.process_index() == 0:
        try:
            fn()
        except (ValueError, OSError) as err:
            message = " ".join(str(err).split()) or type(err).__name__
    encoded = np.zeros(_MESSAGE_BYTES, np.uint8)
    raw = message.encode()[:_MESSAGE_BYTES]
    encoded[:len(raw)] = np.frombuffer(raw, np.uint8)
    shared = np.asarray(multihost_utils.broadcast_one_to_all(encoded))
    message = bytes(shared.astype(np.uint8)).rstrip(b"\0").decode(errors="replace")
    if message:
        raise ValueError(message)

"""Fitting a sweep's chunk program into device memory.

A population program's memory per device is what XLA's memory analysis of the compiled program
says: its arguments (the members' train states and hyper-parameters) plus its outputs (the new
states and the metrics) plus its temporaries (rollout windows, activations, gradients of every
member running at once), less what outputs reuse of donated arguments. The temporaries grow with
the number of members a device runs at once, the state with the number it holds.

When the program does not fit, the members of each device run in sequential groups of
``member_batch`` inside the same compiled program (``sweep.population_jit``: a scan over groups
of vmapped members under ``shard_map``): the states stay where they are, only the temporaries
shrink. The batch divides the members per device, so that every group is whole (a remainder
group would make XLA copy every state).
Each member's computation is the same; only XLA's choice of kernels for the different batch size
can change the last bits (tests/test_device_memory.py compares split and unsplit runs).

The limit per device is, by default, the allocator's limit on an accelerator
(``memory_stats()["bytes_limit"]``) and, on the CPU, 90 % of the host memory available to the
process (the smaller of MemAvailable and the cgroup's limit) shared by the mesh's CPU devices,
since they all run at once. ``--memory-limit`` states it instead.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from typing import Any, Callable, Optional

import jax

# The share of available host memory a CPU run may plan for: the host loop needs some for the
# metrics, checkpoint copies and the Python process itself.
HOST_SHARE = 0.9

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(text: str | int) -> int:
    """A size such as ``4G``, ``512MB``, ``1.5GiB`` or ``1000000`` in bytes (binary units).

    Raises:
      ValueError: unreadable or not positive.
    """
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(I?B)?\s*", text.upper())
        if match is None:
            raise ValueError(f"cannot read the memory size {text!r}; write e.g. 4G, 512M or "
                             "1000000 (bytes)")
        value = int(float(match.group(1)) * _UNITS[match.group(2)])
    if value <= 0:
        raise ValueError(f"a memory size must be positive, got {text!r}")
    return value


def format_bytes(size: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class ProgramMemory:
    """Bytes one device needs for a compiled program (XLA's ``memory_analysis``).

    Attributes:
      arguments, outputs, temporaries, aliased: as XLA reports them; ``aliased`` outputs reuse
        donated argument buffers.
      code: the generated code's size.
    """

    arguments: int
    outputs: int
    temporaries: int
    aliased: int = 0
    code: int = 0

    @property
    def total(self) -> int:
        return self.arguments + self.outputs + self.temporaries - self.aliased + self.code

    @property
    def resident(self) -> int:
        """What the program needs whatever the member batch: its arguments and outputs."""
        return self.arguments + self.outputs - self.aliased + self.code


def program_memory(compiled: Any) -> Optional[ProgramMemory]:
    """The memory analysis of a compiled program, or None where the backend gives none."""
    try:
        stats = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError):
        return None
    if stats is None:
        return None
    return ProgramMemory(
        arguments=int(stats.argument_size_in_bytes), outputs=int(stats.output_size_in_bytes),
        temporaries=int(stats.temp_size_in_bytes), aliased=int(stats.alias_size_in_bytes),
        code=int(stats.generated_code_size_in_bytes))


def host_available_bytes() -> Optional[int]:
    """Host memory this process may still use: MemAvailable, capped by a cgroup limit."""
    available = None
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = pathlib.Path(limit_file).read_text().strip()
            usage = int(pathlib.Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max" or a huge number: no limit
            room = int(limit) - usage
            available = room if available is None else min(available, room)
        break
    return available


def device_limit(devices: list) -> Optional[int]:
    """Bytes one device of ``devices`` may use for a program (module docstring), or None if
    unknown."""
    local = [d for d in devices if d.process_index == jax.process_index()]
    if not local:
        return None
    if local[0].platform == "cpu":
        available = host_available_bytes()
        return None if available is None else int(HOST_SHARE * available / len(local))
    # The allocator's whole limit: what is in use already is mostly the population's states,
    # which the program's arguments count.
    limits = [(device.memory_stats() or {}).get("bytes_limit") for device in local]
    return None if None in limits else int(min(limits))


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The program chosen to run: ``member_batch`` members of each device at once (None: all),
    its memory per device (None if unknown) and the limit it was fitted to (None: no limit)."""

    compiled: Any
    member_batch: Optional[int]
    memory: Optional[ProgramMemory]
    limit: Optional[int]


def fit_program(compile_program: Callable[[Optional[int]], Any], members_per_device: int,
                limit: Optional[int], member_batch: Optional[int] = None) -> Fitted:
    """Compiles the population program with the largest member batch that fits ``limit``.

    Args:
      compile_program: ``member_batch -> compiled program`` (None: every member at once).
      members_per_device: members each device holds.
      limit: bytes per device (None: do not check).
      member_batch: run this many members at once instead of choosing (a divisor of
        ``members_per_device``; checked against the limit).

    Raises:
      ValueError: it does not fit even one member at a time, or ``member_batch`` does not fit;
        the message says what would.
    """
    explicit = member_batch is not None
    if explicit and (member_batch < 1 or members_per_device % member_batch):
        raise ValueError(f"--member-batch must divide the {members_per_device} members each "
                         f"device holds, got {member_batch} (divisors: "
                         f"{', '.join(map(str, _divisors(members_per_device)))})")
    if member_batch == members_per_device:
        member_batch = None
    compiled = compile_program(member_batch)
    memory = program_memory(compiled)
    if limit is None or memory is None or memory.total <= limit:
        return Fitted(compiled, member_batch, memory, limit)
    if memory.resident > limit:
        fit = _members_that_fit(memory, members_per_device, limit)
        raise ValueError(
            f"the sweep's states alone need {format_bytes(memory.resident)} per device, more than "
            f"the {format_bytes(limit)} limit; "
            + (f"about {fit} members per device would fit (fewer seeds or settings, or more "
               "devices)" if fit else "not even one member per device fits"))
    if explicit:
        batch = member_batch or members_per_device
        raise ValueError(
            f"{batch} members at once need {format_bytes(memory.total)} per device, more "
            f"than the {format_bytes(limit)} limit; try --member-batch "
            f"{_divisor_at_most(members_per_device, _batch_estimate(memory, batch, limit))} "
            "or leave it out to choose one")
    # Temporaries grow about linearly with the member batch: start from that estimate, then
    # halve until the compiled program's own analysis fits. Batches divide the members, so
    # every group is whole.
    batch = _divisor_at_most(members_per_device, min(
        _batch_estimate(memory, members_per_device, limit), members_per_device // 2))
    while batch >= 1:
        compiled = compile_program(batch)
        split = program_memory(compiled)
        if split is None or split.total <= limit:
            return Fitted(compiled, batch, split, limit)
        batch = _divisor_at_most(members_per_device, batch // 2) if batch > 1 else 0
    raise ValueError(
        f"the sweep does not fit the {format_bytes(limit)} limit per device even one member at a "
        f"time ({format_bytes(memory.resident)} of states and outputs plus one member's "
        "temporaries); use fewer members per device or more devices")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _divisor_at_most(n: int, most: int) -> int:
    """The largest divisor of ``n`` that is at most ``most`` (0 if ``most < 1``)."""
    return max((d for d in _divisors(n) if d <= most), default=0)


def _batch_estimate(memory: ProgramMemory, batch: int, limit: int) -> int:
    per_member = memory.temporaries / batch
    return max(1, math.floor((limit - memory.resident) / per_member)) if per_member else batch


def _members_that_fit(memory: ProgramMemory, members: int, limit: int) -> int:
    """How many members a device could hold: their states and outputs plus one member's
    temporaries (running one at a time)."""
    per_member, one_running = memory.resident / members, memory.temporaries / members
    return max(0, math.floor((limit - one_running) / per_member))

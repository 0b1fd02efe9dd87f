"""Seed × hyper-parameter sweeps as one program, sharded over every device.

A sweep is a *population* of P = H × S runs: H hyper-parameter settings (a grid or a random
sample) times S seeds. Member ``p = h · S + s`` trains with setting ``h`` and seed key ``s``; the
seed keys are shared across settings (common random numbers: settings are compared on the same
environment and initialisation randomness).

The population axis is the leading axis of every leaf of the keys, ``Hparams`` and ``TrainState``.
``jax.vmap`` maps the engine over it and ``jax.sharding`` splits it over devices: a 1-D ``Mesh``
named ``"sweep"`` and ``NamedSharding(mesh, P("sweep"))`` on inputs and outputs. Members never
communicate, so no collectives are compiled; each device runs P / D members.

P must be divisible by the number of devices D. ``pad=True`` instead pads the population with
copies of its last member and drops their results (the copies cost compute, nothing else).

Several processes (one per host or per GPU): ``jaxcredit.distributed.initialize`` in every
process *before* any other JAX call; ``jax.devices()`` then lists the devices of all processes and
the same mesh spans them. Every process builds the same population and runs the same program;
each holds the members of its own devices (:func:`shard` builds them from its full copy), and
``jax.experimental.multihost_utils.process_allgather`` gathers the metrics on the process that
writes them (docs/scaling.md; tests/test_distributed.py runs 2 processes × 2 CPU devices).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcredit.agents.config import FIELDS, Hparams, stack_hparams, validate_hparams

AXIS = "sweep"


def grid(**axes: Sequence[float]) -> list[dict]:
    """Cartesian product of hyper-parameter values, last axis fastest.

    >>> grid(lr=[1e-3, 3e-4], gamma=[0.99])
    [{'lr': 0.001, 'gamma': 0.99}, {'lr': 0.0003, 'gamma': 0.99}]
    """
    _check_names(axes)
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def random_search(seed: int, num: int, **ranges: tuple) -> list[dict]:
    """``num`` settings sampled independently per hyper-parameter.

    Each range is ``(low, high)`` (uniform) or ``(low, high, "log")`` (log-uniform).
    """
    _check_names(ranges)
    if num <= 0:
        raise ValueError(f"random search size must be positive, got {num}")
    rng = np.random.default_rng(seed)
    columns = {}
    for name, spec in ranges.items():
        if len(spec) not in (2, 3) or (len(spec) == 3 and spec[2] not in ("log", "linear")):
            raise ValueError(f"range for {name} must be (low, high) or (low, high, 'log'), "
                             f"got {spec!r}")
        low, high = float(spec[0]), float(spec[1])
        if not low <= high:
            raise ValueError(f"bad range for {name}: low {low:g} is above high {high:g} "
                             "(write LOW:HIGH)")
        if len(spec) == 3 and spec[2] == "log" and low <= 0:
            raise ValueError(f"bad range for {name}: a log range needs low > 0, got {low:g}")
        if len(spec) == 3 and spec[2] == "log":
            columns[name] = np.exp(rng.uniform(np.log(low), np.log(high), num))
        else:
            columns[name] = rng.uniform(low, high, num)
    return [{k: float(v[i]) for k, v in columns.items()} for i in range(num)]


def _check_names(names: Mapping) -> None:
    unknown = set(names) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {sorted(unknown)}; known: {list(FIELDS)}")


@dataclasses.dataclass(frozen=True)
class Population:
    """The members of a sweep, flattened to one leading axis of size P = H · S.

    Attributes:
      keys: ``[P]`` typed PRNG keys (seed key ``s`` for every member with seed index ``s``).
      hparams: ``Hparams`` with ``[P]`` leaves.
      hparam_index: ``[P]`` int, which setting each member uses.
      seed_index: ``[P]`` int.
      settings: the H settings as plain dicts (complete: defaults filled in).
    """

    keys: jax.Array
    hparams: Hparams
    hparam_index: np.ndarray
    seed_index: np.ndarray
    settings: tuple

    @property
    def size(self) -> int:
        return len(self.hparam_index)


def make_population(settings: Sequence[Mapping[str, float]], num_seeds: int, seed: int = 0
                    ) -> Population:
    """Builds the population of ``len(settings) × num_seeds`` members (see module docstring)."""
    if num_seeds <= 0:
        raise ValueError(f"num_seeds must be positive, got {num_seeds}")
    if not settings:
        raise ValueError("a sweep needs at least one hyper-parameter setting")
    full = [Hparams.create(**s) for s in settings]
    stacked = stack_hparams(full)
    validate_hparams(stacked)
    H = len(full)
    hparam_index = np.repeat(np.arange(H), num_seeds)
    seed_index = np.tile(np.arange(num_seeds), H)
    seed_keys = jax.random.split(jax.random.key(seed), num_seeds)
    return Population(
        keys=seed_keys[seed_index],
        hparams=jax.tree.map(lambda x: x[hparam_index], stacked),
        hparam_index=hparam_index,
        seed_index=seed_index,
        settings=tuple(h.to_dict() for h in full),
    )


def sweep_mesh(devices: Sequence[Any] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: all devices of all processes)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (AXIS,))


def member_sharding(mesh: Mesh) -> NamedSharding:
    """Splits the leading (population) axis of every leaf over the mesh."""
    return NamedSharding(mesh, P(AXIS))


def check_divisible(size: int, mesh: Mesh) -> None:
    """Raises ValueError unless the population splits evenly over the mesh's devices."""
    devices = mesh.devices.size
    if size % devices:
        lower = size - size % devices
        higher = lower + devices
        raise ValueError(
            f"sweep size {size} (settings × seeds) is not divisible by the {devices} devices; "
            f"use {lower or devices} or {higher} members, or pad=True")


def pad_leading(tree: Any, multiple: int) -> tuple[Any, int]:
    """Pads every leaf's leading axis to a multiple by repeating its last entry."""
    size = jax.tree.leaves(tree)[0].shape[0]
    target = math.ceil(size / multiple) * multiple
    if target == size:
        return tree, size
    index = np.minimum(np.arange(target), size - 1)
    return jax.tree.map(lambda x: x[index], tree), size


def shard(tree: Any, mesh: Mesh) -> Any:
    """Places a population pytree on the mesh, split along its leading axis.

    Every process passes the whole population (it is built the same way everywhere). On a mesh
    that spans processes each one keeps only the members of its own devices
    (:func:`place_global`); on a single process this is ``jax.device_put``.
    """
    check_divisible(jax.tree.leaves(tree)[0].shape[0], mesh)
    sharding = member_sharding(mesh)
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)
    return jax.tree.map(lambda x: place_global(x, sharding), tree)


def place_global(value: Any, sharding: NamedSharding) -> jax.Array:
    """A global array from a value every process holds in full, for a sharding that spans
    processes (``jax.device_put`` only places onto devices of its own process).

    Each process builds the shards of its addressable devices from its copy. Typed PRNG keys go
    as their raw key data and are wrapped again afterwards.
    """
    if jax.dtypes.issubdtype(getattr(value, "dtype", None), jax.dtypes.prng_key):
        data = place_global(jax.random.key_data(value), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(value))
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


@functools.lru_cache(maxsize=32)
def population_jit(fn: Callable, mesh: Mesh, num_args: int = 1, donate: bool = False,
                   member_batch: int | None = None):
    """``jax.jit(jax.vmap(fn))`` with every argument and output split over ``mesh``.

    ``member_batch``: each device runs its members ``member_batch`` at a time, in sequence,
    within the one program (a ``lax.scan`` over groups of ``jax.vmap``-ed members inside
    ``jax.shard_map``), so its temporaries are those of ``member_batch`` members
    (``jaxcredit.device_memory``). It must divide the members per device. None: all at once.

    Cached per (function, mesh, member batch), so repeated sweeps of one engine compile once per
    shape.
    """
    sharding = member_sharding(mesh)
    if member_batch is None:
        mapped = jax.vmap(fn)
    else:
        def run_in_groups(*members):
            # [m, ...] -> [m / G, G, ...]: a scan over groups of G vmapped members. The scan's
            # stacked outputs are the program's outputs, so no copy of the states is made (as
            # lax.map makes for a remainder group, or for G = 1).
            groups = jax.tree.map(lambda x: x.reshape((-1, member_batch) + x.shape[1:]), members)
            _, out = jax.lax.scan(lambda _, group: (None, jax.vmap(fn)(*group)), None, groups)
            return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out)

        # Members never communicate, so nothing needs shard_map's checks of varying values.
        mapped = jax.shard_map(run_in_groups, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False)
    return jax.jit(mapped, in_shardings=(sharding,) * num_args, out_shardings=sharding,
                   donate_argnums=tuple(range(num_args)) if donate else ())


def run_sweep(engine: Any, population: Population, mesh: Mesh | None = None,
              pad: bool = False, member_batch: int | None = None) -> tuple[Any, dict]:
    """Trains every member in one sharded program: ``(final_states [P], metrics [P, U])``.

    Args:
      engine: an ``agents.Engine``.
      population: from ``make_population``.
      mesh: device mesh (default: all devices).
      pad: pad the population to a multiple of the device count instead of raising.
      member_batch: members each device trains at once (default: all; see ``population_jit``).
    """
    mesh = sweep_mesh() if mesh is None else mesh
    inputs = (population.keys, population.hparams)
    size = population.size
    if pad:
        inputs, size = pad_leading(inputs, mesh.devices.size)
    train = population_jit(engine.train, mesh, num_args=2, member_batch=member_batch)
    states, metrics = train(*shard(inputs, mesh))
    if pad:
        states, metrics = jax.tree.map(lambda x: x[:size], (states, metrics))
    return states, metrics


def by_setting(metrics: Mapping[str, Any], population: Population) -> dict[str, np.ndarray]:
    """Reshapes ``[P, U]`` metrics to ``[H, S, U]`` (setting, seed, update)."""
    H = len(population.settings)
    S = population.size // H
    return {k: np.asarray(v).reshape((H, S) + np.shape(v)[1:]) for k, v in metrics.items()}


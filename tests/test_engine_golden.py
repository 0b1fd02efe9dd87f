"""The training engine reproduces its golden metrics bit for bit (tests/engine_golden.py).

Every metric of every update of each configuration in ``engine_golden.CONFIGS`` must equal the
value recorded in ``tests/goldens/engine_jaxlib-<version>.json`` for the running jaxlib: same
dtype, same bits (NaN equal to NaN, 0.0 not equal to -0.0). A configuration without a golden
for this jaxlib, or goldens recorded on a CPU with other vector features, another jax or other
XLA flags, is skipped with the reason; record them with
``python tests/engine_golden.py --record [NAME ...]``.
"""

from __future__ import annotations

import pytest

import engine_golden
from engine_golden import CONFIGS

RECORD = "python tests/engine_golden.py --record"


@pytest.fixture(scope="module")
def goldens():
    return engine_golden.load()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_reproduces_its_golden_metrics(name, goldens, no_cache_writes):
    # No writes to the session's compilation cache (no_cache_writes): these programs are
    # compiled at the bitwise level and shared with no other test, and the RMA program is one
    # XLA:CPU has crashed writing (conftest.no_cache_writes).
    version = engine_golden.jaxlib_version()
    if goldens is None:
        path = engine_golden.golden_path()
        pytest.skip(f"no engine goldens for jaxlib {version} (tests/goldens/{path.name}); "
                    f"record them with `{RECORD}`")
    if name not in goldens["configs"]:
        pytest.skip(f"no golden of {name!r} for jaxlib {version}; record it with "
                    f"`{RECORD} {name}`")
    here = engine_golden.recorded_under()
    there = {k: goldens.get(k) for k in here}
    if there != here:
        pytest.skip(f"the jaxlib {version} goldens were recorded under {there}, this run is "
                    f"under {here} (XLA:CPU rounds by the vector width it compiles for, and "
                    f"by its flags); record goldens here with `{RECORD}`")
    golden = engine_golden.decode(goldens["configs"][name]["metrics"])
    difference = engine_golden.first_difference(golden, engine_golden.run(name))
    assert difference is None, f"{name} ({'; '.join(CONFIGS[name].covers)}): {difference}"


def test_every_registered_redistributor_has_a_golden_config():
    from jaxcredit import redistribute

    covered = {case.fields.get("redistribute") for case in CONFIGS.values() if case.fields}
    missing = set(redistribute.REDISTRIBUTORS.registered("jaxcredit")) - covered
    assert not missing, f"redistributors without a golden config: {sorted(missing)}"


def test_a_changed_value_is_reported_at_its_metric_and_update():
    import numpy as np

    golden = {"loss": np.float32([1.0, np.nan, 0.0]), "episodes": np.int32([1, 2, 3])}
    assert engine_golden.first_difference(golden, dict(golden)) is None
    message = engine_golden.first_difference(golden, {**golden,
                                                      "loss": np.float32([1.0, np.nan, -0.0])})
    assert message.startswith("first difference at update 2 (0-based), in 1 metric(s) ['loss']")
    roundtrip = engine_golden.decode(engine_golden.encode(golden))
    assert engine_golden.first_difference(golden, roundtrip) is None
    only_loss = {"loss": golden["loss"]}
    assert "missing ['episodes']" in engine_golden.first_difference(golden, only_loss)

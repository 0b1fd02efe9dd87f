"""Memory-aware sweeps: reading sizes, XLA's memory analysis, choosing the member batch
(hand-checked numbers), and split runs computing what unsplit runs compute."""

import jax
import numpy as np
import pytest

from jaxcredit import device_memory as memory, runlog
from jaxcredit.agents import sweep
from jaxcredit.agents import TrainConfig
from jaxcredit.agents import host_loop
from jaxcredit.agents.host_loop import RunSpec, run_experiment

CONFIG = TrainConfig(algo="a2c", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6,
                     hidden_sizes=(16,))
SPEC = RunSpec(settings=({"lr": 1e-3}, {"lr": 3e-3}), num_seeds=2, seed=0, num_chunks=2,
               swept=("lr",))  # 4 members, two chunks of 3 updates: one program per batch


def test_parse_and_format_bytes():
    assert memory.parse_bytes("4G") == 4 * 2**30
    assert memory.parse_bytes("512MB") == 512 * 2**20
    assert memory.parse_bytes("1.5GiB") == 3 * 2**29
    assert memory.parse_bytes("2k") == 2048
    assert memory.parse_bytes("1000") == 1000
    assert memory.parse_bytes(77) == 77
    for bad in ("", "12Q", "G", "-1G", "0"):
        with pytest.raises(ValueError):
            memory.parse_bytes(bad)
    assert memory.format_bytes(100) == "100 B"
    assert memory.format_bytes(1536) == "1.5 KiB"
    assert memory.format_bytes(3 * 2**30) == "3.0 GiB"


def test_program_memory_of_a_known_program():
    compiled = jax.jit(lambda x: x * 2.0).lower(np.zeros(1000, np.float32)).compile()
    analysis = memory.program_memory(compiled)
    assert analysis.arguments == 4000 and analysis.outputs == 4000
    assert memory.ProgramMemory(100, 50, 30, aliased=20, code=5).total == 165
    assert memory.ProgramMemory(100, 50, 30, aliased=20, code=5).resident == 135


class _Stats:
    def __init__(self, temp):
        self.argument_size_in_bytes, self.output_size_in_bytes = 60, 40
        self.temp_size_in_bytes, self.alias_size_in_bytes = temp, 0
        self.generated_code_size_in_bytes = 0


class _Program:
    """A compiled program whose temporaries are 10 bytes per member running at once (plus
    ``overhead`` when the members run in groups)."""

    def __init__(self, batch, members, overhead):
        self.batch = batch
        self.temp = 10 * members if batch is None else 10 * batch + overhead

    def memory_analysis(self):
        return _Stats(self.temp)


def _fit(limit, members=16, member_batch=None, overhead=0):
    compiled = []

    def compile_program(batch):
        compiled.append(batch)
        return _Program(batch, members, overhead)

    fitted = memory.fit_program(compile_program, members, limit, member_batch)
    return fitted, compiled


def test_fit_program_chooses_the_largest_batch_that_fits():
    # 16 members: 100 bytes of states and outputs + 160 of temporaries = 260.
    fitted, compiled = _fit(None)
    assert fitted.member_batch is None and fitted.memory.total == 260 and compiled == [None]
    fitted, compiled = _fit(260)
    assert fitted.member_batch is None and compiled == [None]
    # (200 - 100) / 10 = 10 members fit; capped at half the members: 8.
    fitted, compiled = _fit(200)
    assert fitted.member_batch == 8 and fitted.memory.total == 180 and compiled == [None, 8]
    # 5 would fit; batches divide the members: 4.
    fitted, _ = _fit(150)
    assert fitted.member_batch == 4 and fitted.memory.total == 140
    fitted, _ = _fit(110)
    assert fitted.member_batch == 1
    # A compiled program over the estimate is halved (to a divisor) until it fits.
    fitted, compiled = _fit(200, overhead=30)  # 8 estimated, 210 bytes compiled; 4: 170
    assert compiled == [None, 8, 4] and fitted.member_batch == 4
    fitted, compiled = _fit(180, members=12)  # 100 + 120 = 220; 8 estimated, 6 divides 12
    assert compiled == [None, 6] and fitted.member_batch == 6
    # An explicit batch is checked, not changed.
    fitted, compiled = _fit(200, member_batch=4)
    assert fitted.member_batch == 4 and compiled == [4]
    assert _fit(None, member_batch=16)[0].member_batch is None  # all members: the plain program


def test_fit_program_refusals_say_what_would_fit():
    # The states and outputs alone are 100 bytes, 6.25 per member: (90 - 10) / 6.25 = 12.8
    # members fit with one running at a time.
    with pytest.raises(ValueError, match="states alone need 100 B .* about 12 members per"):
        _fit(90)
    with pytest.raises(ValueError, match="not even one member per device fits"):
        _fit(15)
    with pytest.raises(ValueError, match="even one member at a time"):
        _fit(105)  # one member's temporaries (10) do not fit in the 5 bytes left
    with pytest.raises(ValueError, match="16 members at once need 260 B .* try --member-batch 8"):
        _fit(200, member_batch=16)
    with pytest.raises(ValueError, match=r"must divide the 16 members .* \(divisors: 1, 2, 4, 8"):
        _fit(None, member_batch=12)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory")
    whole = run_experiment(CONFIG, SPEC, root / "whole", progress=False, plot=False, csv=False)
    pairs = run_experiment(CONFIG, SPEC, root / "pairs", progress=False, plot=False, csv=False,
                           member_batch=2)
    return root, whole, pairs


def _assert_close(a, b, atol):
    for name, column in runlog.read_metrics(a).items():
        np.testing.assert_allclose(runlog.read_metrics(b)[name], column, atol=atol, rtol=0,
                                   err_msg=name)


def test_members_in_groups_compute_what_all_at_once_computes(runs):
    root, whole, pairs = runs
    assert whole["member_batch"] is None and pairs["member_batch"] == 2
    assert pairs["memory_per_device"] < whole["memory_per_device"]
    # Same per-member math; XLA's kernels for a batch of 2 instead of 4 may change last bits.
    _assert_close(root / "whole", root / "pairs", atol=1e-5)


def test_a_memory_limit_splits_the_members(runs, tmp_path):
    root, whole, pairs = runs
    engine = host_loop._engine(CONFIG.resolved())
    mesh = sweep.sweep_mesh()
    population = sweep.make_population(SPEC.settings, SPEC.num_seeds, SPEC.seed)
    hparams = sweep.shard(population.hparams, mesh)
    state = jax.eval_shape(host_loop._init_fn(engine, mesh), sweep.shard(population.keys, mesh))
    full = memory.program_memory(host_loop._compiled_chunk(engine, 3, mesh, state, hparams))
    assert full.total == whole["memory_per_device"]
    # Exactly what the members-in-pairs program needs: less than all at once. (Half of the
    # unsplit program's temporaries is not a sound limit: under JAXCREDIT_SAFE_XLA_CPU=1's
    # scheduler one member alone needs more than that.)
    limit = pairs["memory_per_device"]
    assert limit < full.total
    split = run_experiment(CONFIG, SPEC, tmp_path / "split", progress=False, plot=False,
                           csv=False, memory_limit=limit)
    assert split["member_batch"] in (1, 2) and split["memory_limit"] == limit
    assert split["memory_per_device"] <= limit
    _assert_close(root / "whole", tmp_path / "split", atol=1e-5)
    # Too small for anything: refused before the run directory is made.
    with pytest.raises(ValueError, match="not even one member per device fits"):
        run_experiment(CONFIG, SPEC, tmp_path / "tiny", progress=False, memory_limit="1K")
    assert not (tmp_path / "tiny").exists()


def test_resume_keeps_the_member_batch_of_the_run(runs, tmp_path):
    root, _, _ = runs
    part = tmp_path / "part"
    first = run_experiment(CONFIG, SPEC, part, progress=False, plot=False, csv=False,
                           member_batch=2, max_chunks=1)
    assert first["updates"] == 3
    second = run_experiment(None, None, part, resume=True, progress=False, plot=False, csv=False)
    assert second["finished"] and second["member_batch"] == 2
    for name, column in runlog.read_metrics(root / "pairs").items():  # bitwise
        np.testing.assert_array_equal(runlog.read_metrics(part)[name], column, err_msg=name)

"""The host loop: chunks, run directory outputs, exact resume, same seed same result, and the
refusals that protect earlier results."""

import json
import pathlib

import numpy as np
import pytest

from jaxcredit import runlog
from jaxcredit.agents import TrainConfig
from jaxcredit.agents.host_loop import RunSpec, chunk_lengths, run_experiment

CONFIG = TrainConfig(algo="a2c", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 7,
                     hidden_sizes=(16,))
SPEC = RunSpec(settings=({"lr": 1e-3}, {"lr": 3e-3}), num_seeds=2, seed=0, num_chunks=3,
               swept=("lr",))


def test_chunk_lengths():
    assert chunk_lengths(7, 3) == [3, 3, 1]
    assert chunk_lengths(6, 3) == [2, 2, 2]
    assert chunk_lengths(2, 10) == [1, 1]
    assert chunk_lengths(5, 1) == [5]
    # Chunks end on evaluation blocks; the remainder of the last block joins the last chunk.
    assert chunk_lengths(22, 3, 5) == [10, 12]
    assert chunk_lengths(12, 10, 5) == [5, 7]
    assert chunk_lengths(3, 4, 5) == [3]
    assert chunk_lengths(60, 10, 3) == [6] * 10  # a divisor of the 20 blocks: one length


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "full"
    summary = run_experiment(CONFIG, SPEC, out, progress=False)
    return out, summary


def test_run_directory_outputs(full_run):
    out, summary = full_run
    assert summary["finished"] and summary["updates"] == 7 and summary["members"] == 4
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["algo"] == "a2c" and config["config"]["update_epochs"] == 1
    assert config["num_seeds"] == 2 and len(config["settings"]) == 2
    assert config["settings"][1]["lr"] == pytest.approx(3e-3)
    assert {"jax", "flax", "optax", "gymnax", "orbax-checkpoint"} <= set(config["versions"])
    columns = runlog.read_metrics(out)
    assert list(columns)[:4] == ["hparam_index", "seed", "update", "env_steps"]
    assert {"episode_return", "loss", "entropy", "explained_variance"} <= set(columns)
    assert len(columns["update"]) == 4 * 7
    np.testing.assert_array_equal(np.unique(columns["update"]), np.arange(1, 8))
    np.testing.assert_array_equal(columns["env_steps"], columns["update"] * 64)
    assert (out / "curves.png").stat().st_size > 1000
    for name, column in runlog.read_metrics(out / "metrics.csv").items():  # the CSV export
        np.testing.assert_array_equal(np.float32(column), np.float32(columns[name]))
    # One checkpoint is kept by default (the previous one goes once the new one is complete).
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.isdigit()) == ["7"]


def test_resume_reproduces_uninterrupted_run_bitwise(full_run, tmp_path):
    out, _ = full_run
    part = tmp_path / "part"
    first = run_experiment(CONFIG, SPEC, part, progress=False, max_chunks=1, plot=False)
    assert not first["finished"] and first["updates"] == 3
    # A run killed after writing a chunk's metrics but before its checkpoint leaves the chunk
    # behind, and one killed inside a write leaves a temporary file.
    chunks = runlog.chunk_files(part / "metrics")
    assert [c.name for c in chunks] == ["updates-000000001-000000003.parquet"]
    (part / "metrics" / "updates-000000004-000000006.parquet").write_bytes(chunks[0].read_bytes())
    (part / "metrics" / "updates-000000007-000000009.parquet.tmp").write_bytes(b"PAR1")
    second = run_experiment(None, None, part, resume=True, progress=False, max_chunks=1,
                            plot=False)
    assert second["updates"] == 6
    third = run_experiment(None, None, part, resume=True, progress=False)
    assert third["finished"]
    assert (part / "metrics.csv").read_bytes() == (out / "metrics.csv").read_bytes()
    assert not list((part / "metrics").glob("*.tmp"))
    for name, column in runlog.read_metrics(out).items():
        np.testing.assert_array_equal(runlog.read_metrics(part)[name], column)


def test_same_seed_same_result_other_seed_differs(full_run, tmp_path):
    out, _ = full_run
    again = run_experiment(CONFIG, SPEC, tmp_path / "again", progress=False, plot=False)
    assert again["finished"]
    assert (tmp_path / "again" / "metrics.csv").read_bytes() == (out / "metrics.csv").read_bytes()
    other = RunSpec(**{**SPEC.__dict__, "seed": 1})
    run_experiment(CONFIG, other, tmp_path / "other", progress=False, plot=False)
    a = runlog.read_metrics(out / "metrics.csv")["loss"]
    b = runlog.read_metrics(tmp_path / "other" / "metrics.csv")["loss"]
    assert not np.array_equal(a, b)


def test_existing_output_is_never_deleted(full_run, tmp_path):
    out, _ = full_run
    before = (out / "metrics.csv").read_bytes()
    with pytest.raises(ValueError, match="already exists; pass --resume"):
        run_experiment(CONFIG, SPEC, out, progress=False)
    assert (out / "metrics.csv").read_bytes() == before
    # Bad input fails before the directory is touched.
    with pytest.raises(ValueError, match="lambda must lie"):
        run_experiment(CONFIG, RunSpec(settings=({"lambda_": 3.0},)), out, force=True)
    assert (out / "metrics.csv").read_bytes() == before
    # --force moves the old run aside.
    target = tmp_path / "forced"
    target.mkdir()
    (target / "keep.txt").write_text("earlier result")
    run_experiment(CONFIG, SPEC, target, force=True, progress=False, plot=False)
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("forced.old-")]
    assert len(moved) == 1 and (moved[0] / "keep.txt").read_text() == "earlier result"
    assert (target / "metrics.csv").exists()


def test_keep_checkpoints(tmp_path):
    run = tmp_path / "all"
    run_experiment(CONFIG, SPEC, run, progress=False, plot=False, csv=False, max_chunks=2,
                   keep_checkpoints=0)
    run_experiment(None, None, run, resume=True, progress=False, plot=False, csv=False,
                   keep_checkpoints=0)
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [3, 6, 7]  # 0 keeps every chunk's checkpoint
    with pytest.raises(ValueError, match="keep_checkpoints must be >= 0"):
        run_experiment(CONFIG, SPEC, tmp_path / "bad", keep_checkpoints=-1)
    assert not (tmp_path / "bad").exists()


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    part = tmp_path / "broken"
    run_experiment(CONFIG, SPEC, part, progress=False, max_chunks=1, plot=False)
    for path in pathlib.Path(part / "checkpoints").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="cannot read checkpoint"):
        run_experiment(None, None, part, resume=True, progress=False)
    with pytest.raises(ValueError, match="cannot resume"):
        run_experiment(None, None, tmp_path / "nothing", resume=True, progress=False)


def test_ctrl_c_during_a_checkpoint_write_waits_for_the_whole_checkpoint(tmp_path, monkeypatch):
    """SIGINT arriving while orbax writes is raised only after the checkpoint is complete."""
    import os
    import signal

    import jax.numpy as jnp

    from jaxcredit.checkpoint import Checkpointer

    checkpointer = Checkpointer(tmp_path / "ckpt")
    original = checkpointer._manager.save

    def interrupted_save(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the write
        return original(*args, **kwargs)

    monkeypatch.setattr(checkpointer._manager, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        checkpointer.save(3, {"w": jnp.arange(4.0)}, {"update": 3})
    assert checkpointer.latest_step() == 3
    restored, record = checkpointer.restore({"w": jnp.zeros(4)})
    assert record == {"update": 3} and float(restored["w"][3]) == 3.0
    checkpointer.close()


def test_metrics_are_parquet_chunks_with_a_csv_export(tmp_path):
    """Two members × two updates by hand: the key columns, float32 values kept exactly, rows
    member-major, the CSV export, resume truncation, and a schema mismatch refused."""
    writer = runlog.MetricsWriter(tmp_path, ["loss", "solved"])
    metrics = {"loss": np.array([[0.1, 0.2], [1 / 3, np.nan]], np.float32),
               "solved": np.array([[True, False], [False, True]])}
    writer.append(metrics, np.array([0, 1]), np.array([5, 5]), first_update=2,
                  steps_per_update=10)
    columns = runlog.read_metrics(tmp_path)
    np.testing.assert_array_equal(columns["hparam_index"], [0, 0, 1, 1])
    np.testing.assert_array_equal(columns["seed"], [5, 5, 5, 5])
    np.testing.assert_array_equal(columns["update"], [3, 4, 3, 4])
    np.testing.assert_array_equal(columns["env_steps"], [30, 40, 30, 40])
    np.testing.assert_array_equal(columns["loss"], np.float32([0.1, 0.2, 1 / 3, np.nan]))
    np.testing.assert_array_equal(columns["solved"], [1, 0, 0, 1])
    runlog.export_csv(tmp_path)
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "hparam_index,seed,update,env_steps,loss,solved",
        "0,5,3,30,0.1,1", "0,5,4,40,0.2,0", "1,5,3,30,0.33333334,0", "1,5,4,40,nan,1"]
    csv_columns = runlog.read_metrics(tmp_path / "metrics.csv")  # the folder wins over the CSV
    (tmp_path / "metrics" / "updates-000000003-000000004.parquet").rename(tmp_path / "kept")
    (tmp_path / "metrics").rmdir()
    np.testing.assert_array_equal(np.float32(runlog.read_metrics(tmp_path)["loss"]),
                                  np.float32(csv_columns["loss"]))  # the CSV: float32 exact
    (tmp_path / "metrics").mkdir()
    (tmp_path / "kept").rename(tmp_path / "metrics" / "updates-000000003-000000004.parquet")
    writer.truncate(2)
    assert runlog.read_metrics(tmp_path) == {}
    writer.append(metrics, np.array([0, 1]), np.array([5, 5]), 0, 10)
    with pytest.raises(ValueError, match="has columns"):
        runlog.MetricsWriter(tmp_path, ["loss"])


def test_config_and_run_spec_round_trip_through_json():
    """What a run directory's config.json holds reads back equal: every TrainConfig field (options,
    hidden sizes and the dqn fields included) and every RunSpec field."""
    import json

    from jaxcredit.agents import TrainConfig
    from jaxcredit.agents.host_loop import RunSpec

    config = TrainConfig.from_flat(algo="ppo", env="DelayedEffect", env_options=(("n", 3),),
                                   estimator="nstep", estimator_options={"n": 4},
                                   hidden_sizes=(8, 4), redistribute="rudder",
                                   redistribute_options={"hidden": 5}, num_envs=2, num_steps=8,
                                   total_timesteps=2 * 8 * 4, dueling=True, eval_every=0).resolved()
    back = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config
    spec = RunSpec(settings=({"lr": 1e-3}, {"lr": 3e-3}), num_seeds=3, seed=7, num_chunks=2,
                   swept=("lr",))
    saved = {"config": config.to_dict(), **spec.to_dict(), "devices": ["cpu:0"]}
    assert RunSpec.from_dict(json.loads(json.dumps(saved))) == spec


RESUME_SCRIPT = """
import sys, pathlib
import numpy as np
from jaxcredit import runlog
from jaxcredit.agents import TrainConfig
from jaxcredit.agents.host_loop import RunSpec, run_experiment
root = pathlib.Path(sys.argv[1])
config = TrainConfig.from_flat(algo="a2c", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6,
                               hidden_sizes=(16,), eval_every=3, eval_episodes=2)
spec = RunSpec(settings=({"lr": 1e-3}, {"lr": 3e-3}), num_seeds=2, num_chunks=3)
run_experiment(config, spec, root / "whole", progress=False, plot=False)
run_experiment(config, spec, root / "part", progress=False, plot=False, max_chunks=1)
run_experiment(None, None, root / "part", resume=True, progress=False, plot=False)
whole, part = runlog.read_metrics(root / "whole"), runlog.read_metrics(root / "part")
assert sorted(whole) == sorted(part)
for name in whole:
    np.testing.assert_array_equal(part[name], whole[name], err_msg=name)
print("BITWISE")
"""


def test_resume_is_bitwise_at_the_users_xla_flags(tmp_path):
    """The resume test above runs at the suite's XLA flags; a resumed run must equal the whole
    run at XLA's defaults too (a subprocess, evaluation included)."""
    import subprocess
    import sys

    from conftest import users_xla_env

    proc = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, env=users_xla_env(), timeout=280)
    assert proc.returncode == 0 and "BITWISE" in proc.stdout, proc.stderr[-3000:]

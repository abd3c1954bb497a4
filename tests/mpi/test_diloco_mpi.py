"""Local steps and the outer rule under a real mpiexec (4 ranks, a one-block GPT, each launch
with a deadline): gossip-DiLoCo with bf16 on the wire and only a final merge, DiLoCo over
the allreduce with a late dense window, and a resumed run that ends as the uninterrupted
one did (the outer momentum is a rank state of the checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch import gossipgrad

GPT = ["train", "-a", "gpt", "--layers", "1", "--hidden", "32", "--heads", "2"]
GPT += ["--context", "32", "-b", "4", "--no-progress", "-p", "4"]


def _summary(out) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_gossip_diloco_with_bf16_and_a_final_merge():
    args = [*GPT, "--max-steps", "12", "--timing", "local:4", "--rule", "outer"]
    args += ["--wire", "bf16", "--merge-at", "end"]
    s = _summary(gossipgrad(4, args, timeout=150))
    assert (s["strategy"], s["timing"], s["mix"], s["rule"]) == (
        "gossip",
        "local:4",
        "param",
        "outer",
    )
    assert (s["outer_steps"], s["dense_steps"], s["merges"]) == (3, 0, 1)
    per = s["bytes_sent_per_step"] * 4  # one exchange every 4 steps: its bytes over 4
    assert s["exchange_bytes"] == pytest.approx(3 * per) and per == pytest.approx(
        s["model_bytes"] / 2
    )
    assert s["bytes_sent"] == pytest.approx(s["exchange_bytes"] + s["merge_bytes"])
    assert s["consensus_distance"] > 0  # measured before the merge: four models
    assert s["test_loss_unmerged"] != s["test_loss"] and s["test_loss"] < 5.545


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_diloco_over_the_allreduce_with_a_late_dense_window():
    args = [*GPT, "--max-steps", "12", "--strategy", "allreduce", "--timing", "local:4"]
    args += ["--rule", "outer:sgd", "--outer-lr", "0.9", "--dense-after", "0.5"]
    s = _summary(gossipgrad(4, args, timeout=150))
    assert (s["strategy"], s["mix"], s["outer_steps"], s["dense_steps"]) == (
        "allreduce",
        "param",
        1,
        6,
    )
    assert s["consensus_distance"] == 0.0  # the last step exchanged: one model
    assert "test_loss_unmerged" not in s  # merged at every evaluation (the default)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_resumed_gossip_diloco_run_ends_as_the_uninterrupted_one(tmp_path: Path):
    args = [*GPT, "--max-steps", "8", "--timing", "local:2", "--rule", "outer"]
    whole = _summary(
        gossipgrad(
            4, [*args, "--run-dir", str(tmp_path / "a"), "--checkpoint-every", "4"], timeout=150
        )
    )
    ckpt = tmp_path / "a" / "ckpt-000000004.pt"
    assert ckpt.is_file()
    resumed = _summary(
        gossipgrad(4, [*args, "--run-dir", str(tmp_path / "b"), "--resume", str(ckpt)], timeout=150)
    )
    assert resumed["start_step"] == 4 and resumed["outer_steps"] == 2  # steps 5 and 7
    assert resumed["test_loss"] == whole["test_loss"]

"""``--offload activations|optimizer`` in training under a real mpiexec: the same summary as
without it (one process per rank; the pieces and the profile: tests/unit/test_offload.py)."""

from __future__ import annotations

import json

import pytest

from launch import gossipgrad


def _summary(size: int, strategy: str, offload: str, tmp_path) -> dict:
    """``gossipgrad train`` under mpiexec (separate processes: in the thread world the ranks
    share torch's RNG, so model initialisation is not reproducible there)."""
    out = tmp_path / f"{strategy}-{offload}.jsonl"
    res = gossipgrad(
        size,
        [
            "train",
            "-a",
            "cnn",
            "--strategy",
            strategy,
            "--epochs",
            "1",
            "--max-steps",
            "6",
            "--offload",
            offload,
            "--no-progress",
            "--bucket-mb",
            "0.01",
            "--metrics-out",
            str(out),
        ],
        timeout=280,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in open(out, encoding="utf-8")][-1]


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy,size", [("gossip", 2), ("ps", 3)])
def test_training_with_offload_matches_training_without(strategy, size, tmp_path):
    plain = _summary(size, strategy, "none", tmp_path)
    moved = _summary(size, strategy, "activations,optimizer", tmp_path)
    assert plain["event"] == moved["event"] == "summary" and moved["steps"] == 6
    for key in ("test_loss", "test_accuracy", "consensus_distance"):
        assert moved[key] == plain[key], (key, moved[key], plain[key])
    assert moved["offload"] == ["activations", "optimizer"] and plain["offload"] == []
    assert moved["activation_bytes_to_host_per_step"] >= 32 * 32 * 8 * 8 * 4  # first conv
    assert plain["activation_bytes_to_host_per_step"] == 0

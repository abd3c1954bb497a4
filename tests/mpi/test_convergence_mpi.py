"""Gradient mixing cannot silently diverge: 8 ranks under a real mpiexec on the generated
task (``--dataset templates``), the default mix and ``--mix grad`` (adaptive averaging on by
default) each end within 1 point of allreduce.

The setting (lr 0.2, 5 epochs, one evaluation at the end) is one where gradient mixing
without adaptive averaging drifts to a consensus distance of about 0.5 and ends about 9
points below allreduce; the last test checks that, so the two tests above can fail.
"""

from __future__ import annotations

import json

import pytest

from launch import gossipgrad

pytestmark = pytest.mark.mpi

SIZE = 8
FLAGS = [
    "train",
    "--no-progress",
    "--dataset",
    "templates",
    "--lr",
    "0.2",
    "--epochs",
    "5",
    "--eval-every",
    "5",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The summary record of one 8-rank run per extra flags (cached for the module)."""
    cache: dict[tuple[str, ...], dict] = {}

    def get(*extra: str) -> dict:
        if extra not in cache:
            out = tmp_path_factory.mktemp("conv") / "metrics.jsonl"
            res = gossipgrad(SIZE, [*FLAGS, "--metrics-out", str(out), *extra], timeout=280)
            assert res.returncode == 0, res.stderr[-3000:]
            records = [json.loads(line) for line in open(out, encoding="utf-8")]
            summary = next(r for r in records if r.get("event") == "summary")
            cache[extra] = {
                **summary,
                "_logs": [r for r in records if r["event"] == "log"],
                "_stderr": res.stderr,
            }
        return cache[extra]

    return get


def _gap_points(run: dict, reference: dict) -> float:
    return 100 * (run["test_accuracy"] - reference["test_accuracy"])


@pytest.mark.timeout(600)
def test_the_default_mix_is_within_one_point_of_allreduce(trained):
    ref, default = trained("--strategy", "allreduce"), trained()
    assert default["mix"] == "param" and default["sync"] == "auto"
    assert _gap_points(default, ref) >= -1.0, (default["test_accuracy"], ref["test_accuracy"])
    assert default["syncs"] == 0  # parameter mixing keeps consensus by itself
    assert default["monitor_calls"] > 0 and default["max_consensus_distance"] < 0.05


@pytest.mark.timeout(600)
def test_gradient_mixing_with_adaptive_averaging_is_within_one_point(trained):
    ref, grad = trained("--strategy", "allreduce"), trained("--mix", "grad")
    assert _gap_points(grad, ref) >= -1.0, (grad["test_accuracy"], ref["test_accuracy"])
    # it took global averages and reports what they cost; under --sync auto (not asked for)
    # each is logged at DEBUG only (-v), so rank 0's INFO log stays quiet
    assert grad["syncs"] > 0 and grad["sync_threshold"] == 1e-3
    assert grad["_stderr"].count("> threshold 0.001: global average") == 0
    assert grad["sync_bytes"] == pytest.approx(
        grad["syncs"] * 2 * (SIZE - 1) / SIZE * 2 * grad["model_bytes"]
    )  # float64 average
    assert grad["max_consensus_distance"] > grad["sync_threshold"]
    assert grad["monitor_calls"] == grad["steps"] // grad["monitor_every"]
    assert grad["monitor_bytes_per_call"] == 8 * 257
    assert all("consensus_estimate" in r for r in grad["_logs"])


@pytest.mark.timeout(600)
def test_without_adaptive_averaging_gradient_mixing_falls_behind(trained):
    """The control: the same run with ``--sync off`` drifts and ends > 1 point behind, so
    the test above would fail if adaptive averaging did nothing."""
    ref, drift = trained("--strategy", "allreduce"), trained("--mix", "grad", "--sync", "off")
    assert drift["syncs"] == 0 and drift["consensus_distance"] > 0.1
    assert _gap_points(drift, ref) < -1.0, (drift["test_accuracy"], ref["test_accuracy"])

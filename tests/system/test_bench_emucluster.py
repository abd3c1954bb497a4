"""``gossipgrad bench strategies`` on the emulated cluster (scripts/emucluster.py: a network
namespace per rank, root and iproute2): the bytes on each rank's wire."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launch import bench_record, needs_netns, run

EMUCLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "emucluster.py"


@pytest.mark.netns
@pytest.mark.mpi
@needs_netns
@pytest.mark.timeout(300)
def test_bench_strategies_on_the_emulated_cluster_measures_wire_bytes():
    out = run(
        [
            sys.executable,
            str(EMUCLUSTER),
            "run",
            "-n",
            "4",
            "--rate",
            "1gbit",
            "--",
            sys.executable,
            "-m",
            "gossipgrad",
            "bench",
            "strategies",
            "--width",
            "256",
            "--layers",
            "2",
            "--batch",
            "2",
            "--steps",
            "2",
            "--reps",
            "2",
        ],
        timeout=280,
    )
    rec = bench_record(out)
    assert rec["emu_netns"] is True and rec["emu_rate"] == "1gbit" and rec["size"] == 4
    model = 2 * (256 * 256 + 256) * 4
    rows = {r["strategy"]: r for r in rec["results"]}
    assert rows["gossip"]["theory_bytes_per_step"] == model
    assert rows["allreduce"]["theory_bytes_per_step"] == pytest.approx(2 * 3 / 4 * model)
    for name in ("gossip", "allreduce"):  # what eth0 sent: payload + TCP/IP headers
        assert 0.95 <= rows[name]["wire_over_theory"] <= 1.3, rows[name]
    assert rows["local"]["wire_bytes_per_step"] < 0.02 * model

"""ps in ``gossipgrad bench strategies``: a tiny run under mpiexec (byte counts, no timing
thresholds). ``python -m lab ps-lag`` is tested in lab/tests/test_ps_lag.py."""

from __future__ import annotations

import pytest

from launch import bench_record, gossipgrad, positive


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_strategies_bench_takes_ps_and_counts_ring_bytes():
    rec = bench_record(
        gossipgrad(
            3,
            [
                "bench",
                "strategies",
                "--strategies",
                "ps,allreduce",
                "--width",
                "64",
                "--layers",
                "2",
                "--steps",
                "2",
                "--reps",
                "1",
                "--warmup",
                "0",
            ],
            timeout=280,
        )
    )
    rows = {r["strategy"]: r for r in rec["results"]}
    ps = rows["ps"]
    assert ps["theory_bytes_per_step"] == pytest.approx(2 * 2 / 3 * rec["model_bytes"])
    # 2 buckets for 3 ranks: the ranks send unequal amounts; their mean is the ring figure
    assert ps["posted_bytes_per_step"] == pytest.approx(ps["theory_bytes_per_step"], abs=0.1)
    assert positive(ps["step_s"]) and positive(rows["allreduce"]["step_s"])
    # user + sys per step, every thread of the process: the 3 ranks share this host's cores
    for row in rows.values():
        assert positive(row["cpu_s_per_step"]) and positive(row["cpu_share"])
        assert positive(row["peak_rss_mb"])  # Linux: VmHWM of the largest rank

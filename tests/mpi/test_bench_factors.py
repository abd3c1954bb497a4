"""``bench strategies`` with sufficient factors: contenders, grouping, and a tiny run under
mpiexec whose byte counts are checked against the engine's (no timing thresholds)."""

from __future__ import annotations

import json

import pytest

from gossipgrad.comm.schedule import Schedule
from gossipgrad.tools.bench.strategies import contenders, run_order

from launch import JOIN_BYTES, gossipgrad


def test_each_strategy_that_can_send_factors_runs_once_per_setting():
    assert contenders(["local", "allreduce", "gossip", "ddp"], ["on", "off"]) == [
        ("local", "local", "off", "fp32"),  # no factors to send: once, without
        ("allreduce+factors", "allreduce", "on", "fp32"),
        ("allreduce", "allreduce", "off", "fp32"),
        ("gossip+factors", "gossip", "on", "fp32"),
        ("gossip", "gossip", "off", "fp32"),
        ("ddp", "ddp", "off", "fp32"),
    ]
    assert [n for n, *_ in contenders(["gossip"], ["auto"])] == ["gossip+factors-auto"]


def test_together_groups_contenders_by_strategy_or_alone():
    names = ["gossip+factors", "gossip", "allreduce+factors", "allreduce", "horovod"]
    assert run_order(names, "strategy") == [
        ["gossip+factors", "gossip"],
        ["allreduce+factors", "allreduce"],
        ["horovod"],
    ]
    assert run_order(names, "one") == [[n] for n in names]
    assert run_order(names) == [names[:4], ["horovod"]]


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_fc_head_with_factors_on_and_off_counts_both_forms():
    dims = [96, 64, 64, 10]
    out = gossipgrad(
        3,
        [
            "bench",
            "strategies",
            "--model",
            "fc-head",
            "--dims",
            ",".join(map(str, dims)),
            "--batch",
            "4",
            "--mix",
            "grad",
            "--strategies",
            "gossip,allreduce,local",
            "--factors",
            "on,off",
            "--together",
            "strategy",
            "--steps",
            "2",
            "--reps",
            "2",
        ],
        timeout=220,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rows = {r["name"]: r for r in rec["results"]}
    assert list(rows) == ["gossip+factors", "gossip", "allreduce+factors", "allreduce", "local"]
    weights = [(m, n) for n, m in zip(dims, dims[1:], strict=False)]
    biases = sum(dims[1:]) * 4
    matrix = sum(m * n for m, n in weights) * 4 + biases
    factors = sum(4 * (m + n) for m, n in weights) * 4  # K = batch 4, float32
    assert rec["model_bytes"] == matrix
    p = 3
    share = Schedule(p).active_share  # auto at 3 ranks: base2, which idles some rank-steps
    assert 0.5 < share < 1.0
    expect = {
        "gossip": matrix * share,
        "gossip+factors": (factors + biases) * share,
        "allreduce": 2 * (p - 1) / p * matrix,
        "allreduce+factors": (p - 1) * factors + 2 * (p - 1) / p * biases,
    }
    for name, theory in expect.items():
        assert rows[name]["theory_bytes_per_step"] == pytest.approx(theory, abs=0.1), name
    # posted: what isend / iallreduce / iallgather were handed (an allreduce buffer once)
    # posted: also the join agreement's 3 int64 every 4 steps (engine/bucket/join.py), spread
    posted = rows["gossip+factors"]["posted_bytes_per_step"]
    assert 0 <= posted - (factors + biases) * share <= JOIN_BYTES, posted
    posted = rows["allreduce+factors"]["posted_bytes_per_step"]
    assert 0 <= posted - (factors + biases) <= JOIN_BYTES, posted
    assert rows["allreduce+factors"]["factor_forms"] == ["factors"] * 3
    assert rows["gossip"]["factor_forms"] is None and rows["local"]["sufficient_factors"] == "off"
    ratios = rec["factors_over_plain"]
    assert set(ratios) == {"gossip", "allreduce"}
    assert ratios["gossip"]["theory_bytes"] == pytest.approx((factors + biases) / matrix, abs=1e-4)
    assert ratios["allreduce"]["step_s_paired"] is not None  # on and off ran side by side

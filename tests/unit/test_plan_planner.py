"""Planner enumeration, recommendation, reports and the memory check."""

from __future__ import annotations

import pytest

from gossipgrad.tools.plan.formats import Bucket, Profile
from gossipgrad.tools.plan.memory import estimate_memory
from gossipgrad.tools.plan.model import MIB, CommModel
from gossipgrad.tools.plan.planner import (
    DISCLAIMER,
    best_by,
    plan,
    plot_png,
    recommend,
    render_markdown,
)

# two 2-MiB buckets: at backward mid-point and end; T(1) = 0.1 + 0.2 + 0.05 = 0.35 s
PROFILE = Profile(
    "toy", 32, "gpu", 0.1, 0.2, 0.05, 4 * MIB, (Bucket(0, 2 * MIB, 0.1), Bucket(1, 2 * MIB, 0.2))
)


def test_plan_enumerates_every_combination_with_exact_numbers():
    m = CommModel(alpha_s=0.01, beta_s_per_byte=0.0)
    rows = plan(PROFILE, m, sizes=[4, 1], bucket_mb=[1, 4], staleness=[0, 1])
    assert len(rows) == 2 * 2 * 2 * 2
    assert [r.size for r in rows[:8]] == [1] * 8
    row = next(
        r
        for r in rows
        if (r.strategy, r.size, r.bucket_mb, r.staleness) == ("allreduce", 4, 4.0, 0)
    )
    # one merged 4 MiB bucket ready at 0.2; ring latency 2*3*0.01 = 0.06
    assert row.n_buckets == 1
    assert row.step_s == pytest.approx(0.1 + 0.2 + 0.06 + 0.05, rel=1e-12)
    assert row.efficiency == pytest.approx(0.35 / 0.41, rel=1e-12)
    assert row.samples_per_s == pytest.approx(4 * 32 / 0.41, rel=1e-12)
    assert row.bytes_per_step == 1.5 * 4 * MIB
    assert row.memory_ok is None  # no device memory given
    gossip = next(
        r for r in rows if (r.strategy, r.size, r.bucket_mb, r.staleness) == ("gossip", 4, 1.0, 0)
    )
    assert gossip.n_buckets == 2  # 2 MiB buckets are never split below their size
    assert gossip.step_s == pytest.approx(0.1 + 0.21 + 0.05, rel=1e-12)


def test_recommend_prefers_fastest_then_fewer_bytes_then_staleness_zero():
    m = CommModel(alpha_s=0.0, beta_s_per_byte=0.0)  # free network: everything ties at 0.35
    rec = recommend(plan(PROFILE, m, sizes=[8], bucket_mb=[1, 4]))
    best = rec[8]
    # ties: gossip sends fewer bytes, staleness 0 preferred, one 4 MiB bucket = fewer messages
    assert (best.strategy, best.staleness, best.bucket_mb) == ("gossip", 0, 4.0)
    assert best.step_s == pytest.approx(0.35)
    slow = CommModel(alpha_s=0.02, beta_s_per_byte=0.0)
    best = recommend(plan(PROFILE, slow, sizes=[8], bucket_mb=[1, 4]))[8]
    # gossip s1 hides comm: max(0.35, 2 * 0.02) vs s0: 0.1 + 0.22 + 0.05 (one bucket: 0.37)
    assert (best.strategy, best.staleness) == ("gossip", 1)
    assert best.step_s == pytest.approx(0.35)


def test_recommend_skips_configs_that_do_not_fit_and_local():
    m = CommModel(alpha_s=0.0, beta_s_per_byte=1e-9)
    # params 4 + grads 4 + momentum 4 = 12 MiB; gossip adds 4 (receive) -> 16 > 14 MiB,
    # allreduce adds one 2 MiB staging buffer -> 14 MiB, fits
    rows = plan(
        PROFILE,
        m,
        sizes=[2],
        strategies=["gossip", "allreduce", "local"],
        bucket_mb=[2],
        staleness=[0],
        device_memory_bytes=14 * MIB,
    )
    ok = {r.strategy: r.memory_ok for r in rows}
    assert ok == {"gossip": False, "allreduce": True, "local": True}
    assert recommend(rows)[2].strategy == "allreduce"
    tiny = plan(PROFILE, m, sizes=[2], bucket_mb=[4], device_memory_bytes=MIB)
    assert recommend(tiny) == {}
    assert "No configuration fits in device memory at size(s) [2]" in render_markdown(tiny)


def test_memory_estimate_breakdown():
    est = estimate_memory(PROFILE, "gossip", size=4, staleness=1, device_memory_bytes=20 * MIB)
    assert dict(est.breakdown) == {
        "params": 4 * MIB,
        "grads": 4 * MIB,
        "optimizer state": 4 * MIB,
        "receive buffers": 4 * MIB,
        "send copies": 4 * MIB,
    }
    assert est.required_bytes == 20 * MIB and est.fits is True
    assert "not counting activations" in est.describe()
    ar = estimate_memory(PROFILE, "allreduce", size=4, optimizer_state_factor=2.0)
    assert dict(ar.breakdown)["allreduce staging"] == 2 * MIB
    assert ar.required_bytes == (4 + 4 + 8 + 2) * MIB and ar.fits is None
    measured = Profile(**{**PROFILE.__dict__, "memory_bytes": 10 * MIB})
    est = estimate_memory(measured, "gossip", size=2, device_memory_bytes=13 * MIB)
    assert est.required_bytes == 14 * MIB and est.fits is False
    assert "does NOT fit in" in est.describe()
    assert estimate_memory(measured, "gossip", size=1).required_bytes == 10 * MIB
    with pytest.raises(ValueError, match="optimizer_state_factor"):
        estimate_memory(PROFILE, "gossip", size=2, optimizer_state_factor=-1)


def test_render_markdown_says_throughput_only_and_shows_recommendations():
    rows = plan(PROFILE, CommModel(0.01, 0.0), sizes=[1, 8], bucket_mb=[4])
    text = render_markdown(rows, title="toy", all_rows=True)
    assert text.startswith("## toy")
    assert DISCLAIMER in text and "time to accuracy" in text.lower()
    assert "| gossip | 8 | 4 | 1 | 0.3500 | 731 | 100.0% | n/a |" in text
    assert "steps to accuracy unknown" in text


def test_best_by_and_bad_arguments():
    rows = plan(PROFILE, CommModel(0.01, 0.0), sizes=[2, 8], bucket_mb=[1, 4])
    best = best_by(rows, {"strategy": "allreduce", "staleness": 0})
    assert list(best) == [2, 8]
    assert best[8].step_s == pytest.approx(0.1 + 0.2 + 0.14 + 0.05)
    with pytest.raises(ValueError, match="bucket_mb"):
        plan(PROFILE, CommModel(0, 0), sizes=[2], bucket_mb=[0])
    with pytest.raises(ValueError, match="unknown strategy"):
        plan(PROFILE, CommModel(0, 0), sizes=[2], strategies=["ring"])
    with pytest.raises(ValueError, match="non-empty"):
        plan(PROFILE, CommModel(0, 0), sizes=[])


def test_plot_png_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows = plan(PROFILE, CommModel(0.01, 1e-9), sizes=[1, 2, 4], bucket_mb=[4])
    out = plot_png(rows, tmp_path / "eff.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tie_tolerance_prefers_staleness_zero_when_nearly_as_fast():
    # gossip s0 = 0.1 + 0.2 + 0.002 + 0.05 = 0.352 (0.57 % slower than s1 = 0.35)
    m = CommModel(alpha_s=0.002, beta_s_per_byte=0.0)
    rows = plan(PROFILE, m, sizes=[8], strategies=["gossip"], bucket_mb=[4])
    assert recommend(rows)[8].staleness == 0
    assert recommend(rows, tie_tolerance=0.0)[8].staleness == 1
    assert recommend(rows, tie_tolerance=0.005)[8].staleness == 1
    with pytest.raises(ValueError, match="tie_tolerance"):
        recommend(rows, tie_tolerance=-1)


def test_plan_report_from_files(tmp_path):
    from gossipgrad.tools.plan.formats import NetworkFit
    from gossipgrad.tools.plan.report import plan_report

    PROFILE.save(tmp_path / "profile.json")
    NetworkFit.from_json(
        {"p2p": {"alpha_s": 0.01, "beta_s_per_byte": 0.0, "r2": 1.0}, "source": "unit test"}
    ).save(tmp_path / "net.json")
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        '{"event": "summary", "strategy": "gossip", "steps": 7, "test_accuracy": 0.9}\n'
    )
    text = plan_report(
        tmp_path / "profile.json",
        tmp_path / "net.json",
        sizes=[8],
        bucket_mb=[4],
        metrics_path=metrics,
        target_accuracy=0.8,
    )
    assert "## Plan for toy (batch 32 on gpu), network: unit test" in text
    assert "| gossip | 8 | 4 | 1 | 0.3500 |" in text
    assert "| gossip | <= 7 | 0.9 | 1 |  |" in text
    with pytest.raises(ValueError, match="metrics_path and target_accuracy"):
        plan_report(
            tmp_path / "profile.json", tmp_path / "net.json", sizes=[8], metrics_path=metrics
        )


def test_ps_memory_is_the_busiest_owners_shard_and_push_slots():
    """VGG-16's shape: one bucket of 74 % of the model. Its owner keeps the master, the mean
    gradient, the optimizer state of its shard and (max_lag + 2) slots of (sum, own push,
    pool); a 400 MiB bucket is received one push at a time, a 1 MiB one all at once."""
    big, small = 400 * MIB, 1 * MIB
    buckets = (Bucket(0, big, 0.1),) + tuple(Bucket(i, small, 0.2) for i in range(1, 9))
    prof = Profile("vgg-like", 32, "gpu", 0.1, 0.2, 0.05, big + 8 * small, buckets)
    est = dict(estimate_memory(prof, "ps", size=8, staleness=0).breakdown)
    assert est["served masters and mean gradients"] == 2 * big  # rank 0 serves the big one
    assert est["push slots"] == 2 * (2 + 1) * big
    assert est["optimizer state"] == big  # its shard's, not the whole model's
    lag1 = dict(estimate_memory(prof, "ps", size=8, staleness=1).breakdown)
    assert lag1["push slots"] == 3 * (2 + 1) * big
    one = Profile("even", 32, "gpu", 0.1, 0.2, 0.05, 8 * small, buckets[1:])
    even = dict(estimate_memory(one, "ps", size=4, staleness=0).breakdown)
    assert even["push slots"] == 2 * 2 * (2 + 3) * small  # two buckets each, pools of 3
    assert even["served masters and mean gradients"] == 2 * 2 * small


def test_ps_splits_a_parameter_larger_than_a_share_as_the_engine_does():
    """One 400 MiB parameter and eight of 1 MiB at 8 ranks: the server's cap is 1/8 of the
    model (51 MiB), so the large one travels as 8 parts that 8 owners serve, and ps's step
    is about a ring allreduce's (one owner of 400 MiB would carry 7 x 400 MiB each way)."""
    big, small = 400 * MIB, 1 * MIB
    buckets = (Bucket(0, big, 0.1),) + tuple(Bucket(i, small, 0.2) for i in range(1, 9))
    prof = Profile("vgg-like", 32, "gpu", 0.1, 0.2, 0.05, big + 8 * small, buckets)
    m = CommModel(alpha_s=1e-5, beta_s_per_byte=1e-9)
    rows = plan(prof, m, sizes=[8], bucket_mb=[1000], staleness=[0], strategies=["ps", "allreduce"])
    ps = next(r for r in rows if r.strategy == "ps")
    ar = next(r for r in rows if r.strategy == "allreduce")
    assert ps.n_buckets == 8 + 1  # the parts, and the small ones merged under the cap
    assert ps.step_s < 1.3 * ar.step_s, (ps.step_s, ar.step_s)
    mem = dict(
        estimate_memory(
            prof.with_buckets(tuple(Bucket(i, b, 0.1) for i, b in enumerate([big // 8] * 8))),
            "ps",
            size=8,
        ).breakdown
    )
    assert mem["push slots"] == 2 * (2 + 5) * (big // 8)  # pools of 256 MiB // 50 MiB = 5


def test_ps_whole_prices_the_large_parameter_on_one_owner():
    """--ps-whole (an optimizer that does not update each element on its own): the 400 MiB
    parameter stays one bucket on one owner, whose link carries 7 pushes in and 7 pulls
    out of it, so ps is several times a ring's step and its owner holds the whole weight."""
    big, small = 400 * MIB, 1 * MIB
    buckets = (Bucket(0, big, 0.1),) + tuple(Bucket(i, small, 0.2) for i in range(1, 9))
    prof = Profile("vgg-like", 32, "gpu", 0.1, 0.2, 0.05, big + 8 * small, buckets)
    m = CommModel(alpha_s=1e-5, beta_s_per_byte=1e-9)

    def ps_row(split: bool):
        rows = plan(
            prof, m, sizes=[8], bucket_mb=[1000], staleness=[0], strategies=["ps"], ps_split=split
        )
        return rows[0]

    split, whole = ps_row(True), ps_row(False)
    assert whole.n_buckets == 1 + 1  # the large one whole, the small ones merged
    assert whole.step_s > 3 * split.step_s, (whole.step_s, split.step_s)
    assert whole.memory_bytes > split.memory_bytes + 2 * big  # masters and grads of it all
    assert split.bytes_per_step == pytest.approx(whole.bytes_per_step)  # same bytes sent
    # gossip and allreduce do not read it
    for name in ("gossip", "allreduce"):
        a, b = (
            plan(
                prof, m, sizes=[8], bucket_mb=[25], staleness=[0], strategies=[name], ps_split=split
            )[0]
            for split in (True, False)
        )
        assert a == b


def test_memory_counts_a_lossy_codecs_buffers():
    """bf16 (ratio 1/2) on two 4 MiB buckets: gossip sends and receives wires (2 r G = G,
    instead of the float32 receive buffers) and keeps 2 buckets of scratch; allreduce's
    shards at 4 ranks are r G (3n - 2) / n; fp8's error feedback adds residuals and last
    decodings (2 G)."""
    g = 4 * MIB
    prof = Profile("two", 32, "gpu", 0.1, 0.2, 0.05, 2 * g, (Bucket(0, g, 0.1), Bucket(1, g, 0.2)))
    gossip = dict(estimate_memory(prof, "gossip", size=4, wire_ratio=0.5).breakdown)
    assert "receive buffers" not in gossip
    assert gossip["wire buffers (send and receive)"] == 2 * g
    assert gossip["codec scratch"] == 2 * g
    ring = dict(estimate_memory(prof, "allreduce", size=4, wire_ratio=0.5).breakdown)
    assert ring["wire buffers (shards sent and received)"] == round(0.5 * 2 * g * 10 / 4)
    assert "codec scratch" not in ring and "allreduce staging" not in ring
    fp8 = dict(estimate_memory(prof, "gossip", size=4, wire_ratio=0.25, feedback=True).breakdown)
    assert fp8["error-feedback residuals and last decodings"] == 2 * 2 * g
    assert fp8["codec scratch"] == 5 * g
    ps = dict(estimate_memory(prof, "ps", size=2, wire_ratio=0.5).breakdown)
    # the owner of one bucket: push and pull wires of the other (2 x 0.5 g), a pool wire in
    # each of 2 slots and its pull wire (3 x 0.5 g)
    assert ps["wire buffers"] == round(0.5 * (2 * g + 3 * g))
    plain = dict(estimate_memory(prof, "gossip", size=4).breakdown)
    assert plain["receive buffers"] == 2 * g and "codec scratch" not in plain
    # gossip-node, 2 nodes of 2: the node's float32 copies of this rank's shard (G / 2),
    # the shard's wires (2 r G / 2) and scratch for the shards; one rank a node: gossip's;
    # one node: nothing encoded
    node = dict(
        estimate_memory(prof, "gossip-node", size=4, wire_ratio=0.5, ranks_per_node=2).breakdown
    )
    assert node["receive buffers (the node's shards)"] == g
    assert node["wire buffers (send and receive)"] == g and node["codec scratch"] == g
    alone = dict(estimate_memory(prof, "gossip-node", size=4, wire_ratio=0.5).breakdown)
    assert alone == gossip
    one = dict(
        estimate_memory(prof, "gossip-node", size=4, wire_ratio=0.5, ranks_per_node=4).breakdown
    )
    assert (
        one["receive buffers (the node's shards)"] == round(1.5 * g) and "codec scratch" not in one
    )
    with pytest.raises(ValueError, match="ranks_per_node must be a whole number >= 1, got 0"):
        estimate_memory(prof, "gossip-node", size=4, ranks_per_node=0)
    with pytest.raises(ValueError, match="wire_ratio"):
        estimate_memory(prof, "gossip", size=4, wire_ratio=0)

"""Closed-form checks of the step-time model (gossipgrad.tools.plan.model)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gossipgrad.tools.plan.formats import Bucket, NetworkFit, Profile
from gossipgrad.tools.plan.model import (
    CommModel,
    allreduce_factors,
    bytes_sent,
    comm_chain,
    efficiency,
    rebucket,
    samples_per_s,
    step_time,
)


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def make_profile(buckets, forward=0.1, backward=0.4, optimizer=0.05, batch=32) -> Profile:
    bs = tuple(Bucket(i, n, r) for i, (n, r) in enumerate(buckets))
    return Profile(
        "toy", batch, "cpu", forward, backward, optimizer, sum(n for n, _ in buckets), bs
    )


def test_pure_latency_gossip_chains_alpha_per_bucket():
    # beta = 0: each bucket costs alpha; ready every 0.1 s but alpha = 0.25 > gap -> chained
    p = make_profile([(1000, 0.1), (1000, 0.2), (1000, 0.3), (1000, 0.4)])
    m = CommModel(alpha_s=0.25, beta_s_per_byte=0.0)
    t = step_time(p, m, "gossip", size=8)
    # ends: 0.35, 0.60, 0.85, 1.10 after backward start
    assert comm_chain([0.1, 0.2, 0.3, 0.4], [0.25] * 4) == approx([0.35, 0.6, 0.85, 1.1])
    assert t.step_s == approx(0.1 + 1.1 + 0.05)
    assert t.comm_s == approx(1.0)
    assert t.exposed_comm_s == approx(1.1 - 0.4)


def test_pure_latency_gossip_cost_independent_of_size_and_bytes():
    m = CommModel(alpha_s=3e-6, beta_s_per_byte=0.0)
    assert m.bucket_s("gossip", 10**9, size=2) == 3e-6
    assert m.bucket_s("gossip", 1, size=1024) == 3e-6


def test_pure_bandwidth_gossip_and_duplex_factor():
    p = make_profile([(10**6, 0.4)] * 4)  # all ready at the end of backward
    full = CommModel(alpha_s=0.0, beta_s_per_byte=1e-8)
    half = CommModel(alpha_s=0.0, beta_s_per_byte=1e-8, duplex=2.0)
    assert full.bucket_s("gossip", 10**6, size=4) == approx(0.01)
    assert half.bucket_s("gossip", 10**6, size=4) == approx(0.02)
    assert step_time(p, full, "gossip", 4).step_s == approx(0.1 + 0.4 + 0.04 + 0.05)
    assert step_time(p, half, "gossip", 4).step_s == approx(0.1 + 0.4 + 0.08 + 0.05)


def test_full_overlap_leaves_only_last_bucket_tail():
    # cost 0.05 fits in every 0.1 s gap: step = compute + optimizer + last bucket's cost
    p = make_profile([(10**6, 0.1), (10**6, 0.2), (10**6, 0.3), (10**6, 0.4)])
    m = CommModel(alpha_s=0.0, beta_s_per_byte=5e-8)
    t = step_time(p, m, "gossip", size=16)
    assert t.step_s == approx(0.1 + 0.4 + 0.05 + 0.05)
    assert t.comm_end_s == approx(0.1 + 0.45)


def test_no_overlap_adds_every_bucket_after_backward():
    p = make_profile([(10**6, 0.1), (10**6, 0.2), (10**6, 0.3), (10**6, 0.4)])
    m = CommModel(alpha_s=0.0, beta_s_per_byte=5e-8)
    t = step_time(p, m, "gossip", size=16, overlap=False)
    assert t.step_s == approx(0.1 + 0.4 + 4 * 0.05 + 0.05)


def test_ring_allreduce_formula():
    m = CommModel(alpha_s=1e-5, beta_s_per_byte=1e-9)
    # 2(p-1) alpha + 2(p-1)/p n beta at p = 4, n = 1e6
    assert m.bucket_s("allreduce", 10**6, size=4) == approx(6e-5 + 1.5e-3)
    assert m.bucket_s("horovod", 10**6, size=4) == approx(6e-5 + 1.5e-3)
    assert m.bucket_s("allreduce", 10**6, size=1) == 0.0
    assert bytes_sent("allreduce", 1000, 4) == 1500.0
    assert bytes_sent("gossip", 1000, 4) == 1000.0
    assert bytes_sent("local", 1000, 4) == 0.0


def test_allreduce_calibration_factors_scale_each_term():
    net = NetworkFit.from_json(
        {
            "p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 0.99},
            "allreduce": {"alpha_s": 1.2e-4, "beta_s_per_byte": 3e-9, "r2": 0.98, "size": 4},
            "source": "test",
        }
    )
    assert allreduce_factors(net) == (approx(2.0), approx(2.0))
    m = CommModel.from_network(net, calibrate_allreduce=True)
    assert m.bucket_s("allreduce", 10**6, size=4) == approx(1.2e-4 + 3e-3)  # = measured fit
    assert m.bucket_s("allreduce", 10**6, size=8) == approx(2 * (14e-5 + 1.75e-3))
    assert m.bucket_s("gossip", 10**6, size=8) == approx(1e-5 + 1e-3)  # gossip untouched
    no_ar = NetworkFit.from_json({"p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 1}})
    with pytest.raises(ValueError, match="allreduce"):
        CommModel.from_network(no_ar, calibrate_allreduce=True)


def test_ddps_own_ring_ignores_the_mpi_allreduce_calibration():
    net = NetworkFit.from_json(
        {
            "p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 0.99},
            "allreduce": {"alpha_s": 1.2e-4, "beta_s_per_byte": 3e-9, "r2": 0.98, "size": 4},
            "source": "test",
        }
    )
    plain = CommModel.from_network(net)
    calibrated = CommModel.from_network(net, calibrate_allreduce=True)
    ring = plain.bucket_s("ddp", 10**6, size=8)
    assert ring == approx(14e-5 + 1.75e-3)  # the plain ring on the measured link
    assert calibrated.bucket_s("ddp", 10**6, size=8) == approx(ring)
    # MPI's allreduce and Horovod's (over MPI) take the calibration
    assert calibrated.bucket_s("allreduce", 10**6, size=8) == approx(2 * ring)
    assert calibrated.bucket_s("horovod", 10**6, size=8) == approx(2 * ring)


def test_queued_allreduces_cost_what_several_in_flight_did():
    """A bucket posted while another allreduce is in flight costs the in-flight sweep's
    ring; the first, and one that finds the link idle, what one alone does. Only
    gossipgrad's own allreduce of gradients posts them as they fill."""
    fits = {
        "p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 0.99},
        "allreduce": {"alpha_s": 1.2e-4, "beta_s_per_byte": 3e-9, "r2": 0.98, "size": 4},
        "source": "test",
    }
    flight = {"alpha_s": 6e-5, "beta_s_per_byte": 1.5e-9, "r2": 0.98, "size": 4, "in_flight": 4}
    net = NetworkFit.from_json({**fits, "allreduce_in_flight": flight})
    assert allreduce_factors(net, net.allreduce_in_flight) == (approx(1.0), approx(1.0))
    m = CommModel.from_network(net, calibrate_allreduce=True)
    assert (m.queued_latency_factor, m.queued_bandwidth_factor) == (approx(1.0), approx(1.0))
    alone, queued = 1.2e-4 + 3e-3, 6e-5 + 1.5e-3  # 10**6 bytes at 4 ranks
    assert m.queued_costs("allreduce", [10**6], 4) == [approx(queued)]
    for strategy, mix in [("horovod", "grad"), ("ddp", "grad"), ("gossip", "grad")]:
        assert m.queued_costs(strategy, [10**6], 4, mix) is None
    assert m.queued_costs("allreduce-param", [10**6], 4) is None  # at most two in flight
    # a strategy's own mix wins over the one asked of gossip
    assert m.queued_costs("allreduce", [10**6], 4, "param") == [approx(queued)]
    # four buckets ready together at the end of backward: one alone, three queued
    p = make_profile([(10**6, 0.4)] * 4, forward=0.1, backward=0.4, optimizer=0.05)
    t = step_time(p, m, "allreduce", 4)
    assert t.comm_s == approx(alone + 3 * queued)
    assert t.step_s == approx(0.1 + 0.4 + alone + 3 * queued + 0.05)
    assert step_time(p, m, "horovod", 4).comm_s == approx(4 * alone)
    # ready far apart: each finds the link idle and costs what one alone does
    apart = make_profile([(10**6, 0.0), (10**6, 0.2)], forward=0.1, backward=0.4)
    assert step_time(apart, m, "allreduce", 4).comm_s == approx(2 * alone)
    # staleness 1 charges the same chain
    assert step_time(p, m, "allreduce", 4, staleness=1).comm_s == approx(alone + 3 * queued)
    # without the in-flight sweep, or without calibrating, a queued bucket costs one alone's
    plain = CommModel.from_network(NetworkFit.from_json(fits), calibrate_allreduce=True)
    assert plain.queued_costs("allreduce", [10**6], 4) is None
    assert step_time(p, plain, "allreduce", 4).comm_s == approx(4 * alone)
    assert CommModel.from_network(net).queued_bandwidth_factor is None
    with pytest.raises(ValueError, match="go together"):
        CommModel(1e-5, 1e-9, queued_bandwidth_factor=1.0)
    with pytest.raises(ValueError, match="must be > 0"):
        CommModel(1e-5, 1e-9, queued_latency_factor=0.0, queued_bandwidth_factor=1.0)


def test_local_and_size_one_do_not_communicate():
    p = make_profile([(10**6, 0.2), (10**6, 0.4)])
    m = CommModel(alpha_s=1.0, beta_s_per_byte=1.0)
    for strategy, size in [("local", 64), ("gossip", 1), ("allreduce", 1)]:
        t = step_time(p, m, strategy, size)
        assert t.step_s == approx(0.55) and t.comm_s == 0.0
        assert efficiency(p, t.step_s) == approx(1.0)


def test_staleness_one_hides_communication_up_to_a_full_step():
    p = make_profile([(10**6, 0.4)], forward=0.1, backward=0.4, optimizer=0.05)  # T(1) = 0.55
    hidden = CommModel(alpha_s=0.5, beta_s_per_byte=0.0)  # S = 0.5 < 0.55
    exposed = CommModel(alpha_s=0.75, beta_s_per_byte=0.0)  # S = 0.75 > 0.55
    assert step_time(p, hidden, "gossip", 2, staleness=1).step_s == approx(0.55)
    assert step_time(p, hidden, "gossip", 2, staleness=0).step_s == approx(1.05)
    assert step_time(p, exposed, "gossip", 2, staleness=1).step_s == approx(0.75)
    assert step_time(p, exposed, "gossip", 2, staleness=1, overlap=False).step_s == approx(0.75)


def _simulate(p: Profile, costs: list[float], staleness: int, steps: int = 600) -> float:
    """Brute-force event simulation of many steps; returns the mean period at the end."""
    start, thread_free, ends, starts = 0.0, 0.0, [], []
    for k in range(steps):
        starts.append(start)
        t = thread_free
        for b, c in zip(p.buckets, costs, strict=True):
            t = max(start + p.forward_s + b.ready_s, t) + c
        thread_free = t
        ends.append(t)
        waited = ends[k - staleness] if k >= staleness else -math.inf
        start = max(start + p.compute_s, waited) + p.optimizer_s
    return (starts[-1] - starts[-201]) / 200


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("staleness", [0, 1])
def test_closed_form_matches_event_simulation(seed: int, staleness: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    backward = float(rng.uniform(0.1, 1.0))
    ready = np.sort(rng.uniform(0, backward, n))
    ready[-1] = backward
    sizes = rng.integers(1, 10**7, n)
    p = make_profile(
        list(zip(sizes.tolist(), ready.tolist(), strict=True)),
        forward=float(rng.uniform(0, 0.5)),
        backward=backward,
        optimizer=float(rng.uniform(0, 0.1)),
    )
    m = CommModel(alpha_s=float(rng.uniform(0, 0.05)), beta_s_per_byte=float(rng.uniform(0, 3e-7)))
    costs = [m.bucket_s("allreduce", b.bytes, 8) for b in p.buckets]
    predicted = step_time(p, m, "allreduce", 8, staleness=staleness).step_s
    assert predicted == pytest.approx(_simulate(p, costs, staleness), rel=1e-9)


def test_rebucket_merges_consecutive_until_cap():
    bs = [
        Bucket(0, 3, 0.1),
        Bucket(1, 3, 0.2),
        Bucket(2, 2, 0.25),
        Bucket(3, 9, 0.3),
        Bucket(4, 1, 0.35),
        Bucket(5, 1, 0.4),
    ]
    merged = rebucket(bs, 6)
    assert [(b.index, b.bytes, b.ready_s) for b in merged] == [
        (0, 6, 0.2),
        (1, 2, 0.25),
        (2, 9, 0.3),
        (3, 2, 0.4),
    ]
    assert [b.bytes for b in rebucket(bs, 100)] == [19]
    assert rebucket(bs, 100)[0].ready_s == 0.4
    assert [b.bytes for b in rebucket(bs, 1)] == [3, 3, 2, 9, 1, 1]
    assert rebucket(bs, None) == tuple(bs)
    with pytest.raises(ValueError, match="cap_bytes"):
        rebucket(bs, 0)


def test_rebucket_ready_is_max_of_members_even_out_of_order():
    bs = [Bucket(0, 1, 0.3), Bucket(1, 1, 0.1)]
    assert rebucket(bs, 2) == (Bucket(0, 2, 0.3),)


def test_rebucket_by_cycle_fuses_what_was_ready_since_the_last_wake_up():
    bs = [
        Bucket(0, 3, 0.01),
        Bucket(1, 3, 0.04),
        Bucket(2, 2, 0.06),  # the next cycle (0.05, 0.10]
        Bucket(3, 9, 0.09),
        Bucket(4, 1, 0.10),
        Bucket(5, 1, 0.26),  # two cycles with nothing, then (0.25, 0.30]
    ]
    merged = rebucket(bs, 100, window_s=0.05)
    assert [b.bytes for b in merged] == [6, 12, 1]
    # each sent at the wake-up after its last member was ready, not when it was ready
    assert [round(b.ready_s, 9) for b in merged] == [0.05, 0.1, 0.3]
    # the cap still closes a fused buffer inside one cycle
    assert [b.bytes for b in rebucket(bs, 10, window_s=0.05)] == [6, 2, 10, 1]
    # a cycle longer than the step: the cap alone decides, every buffer at the first wake-up
    long = rebucket(bs, 100, window_s=1.0)
    assert [(b.bytes, b.ready_s) for b in long] == [(19, 1.0)]
    # cycle 0 (Horovod's HOROVOD_CYCLE_TIME=0): only equal ready times fuse
    assert [b.bytes for b in rebucket(bs, 100, window_s=0.0)] == [3, 3, 2, 9, 1, 1]
    # no window: as before (fixed buckets, each sent when full)
    assert rebucket(bs, 100, window_s=None) == rebucket(bs, 100)
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="window_s"):
            rebucket(bs, 100, window_s=bad)


def test_a_library_that_fuses_per_cycle_hides_more_than_fixed_buckets():
    """Horovod at a 25 MiB threshold overlaps like small buckets: on a link where the last
    fixed 25 MiB bucket's exchange sticks out of backward, its step is shorter."""
    from gossipgrad.tools.plan.planner import plan

    mib = 1 << 20
    layers = [(2 * mib, 0.02 * (i + 1)) for i in range(20)]  # 40 MiB over a 0.4 s backward
    p = make_profile(layers)
    m = CommModel(alpha_s=20e-6, beta_s_per_byte=1.0 / 1.0e9)
    rows = {
        r.strategy: r
        for r in plan(
            p, m, sizes=[8], strategies=["allreduce", "horovod"], bucket_mb=[25], staleness=[0]
        )
    }
    assert rows["horovod"].step_s < rows["allreduce"].step_s - 0.01
    assert rows["horovod"].step_s > p.local_step_s  # its wire time is not free


def test_efficiency_and_throughput():
    p = make_profile([(10**6, 0.4)], forward=0.1, backward=0.4, optimizer=0.0, batch=64)
    assert efficiency(p, 1.0) == approx(0.5)
    assert samples_per_s(p, 16, 0.5) == approx(2048.0)


def test_bad_arguments_name_themselves():
    p = make_profile([(10, 0.4)])
    m = CommModel(0.0, 0.0)
    with pytest.raises(ValueError, match="staleness"):
        step_time(p, m, "gossip", 2, staleness=2)
    with pytest.raises(ValueError, match="size"):
        step_time(p, m, "gossip", 0)
    with pytest.raises(ValueError, match="choose one of: gossip, allreduce"):
        step_time(p, m, "ring", 2)
    with pytest.raises(ValueError, match="duplex"):
        CommModel(0.0, 0.0, duplex=3.0)
    with pytest.raises(ValueError, match="alpha_s"):
        CommModel(-1.0, 0.0)


def test_horovods_cycle_comes_from_its_environment_variable(monkeypatch):
    import gossipgrad.strategies  # noqa: F401  (registers every strategy)
    from gossipgrad.registry import STRATEGIES

    hvd = STRATEGIES.get("horovod")
    monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    assert hvd.fusion_window_s() == 0.005
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "200")
    assert hvd.fusion_window_s() == pytest.approx(0.2)
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "not-a-number")  # Horovod's strtof reads 0
    assert hvd.fusion_window_s() == 0.005
    for name in ("gossip", "allreduce", "ps", "ddp", "local"):
        assert STRATEGIES.get(name).fusion_window_s() is None, name

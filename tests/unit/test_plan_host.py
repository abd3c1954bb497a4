"""Closed-form checks of the contention term: no spare core per rank -> overlap hides
nothing and costs a hand-off per step and per bucket (gossipgrad.tools.plan.host,
step_time(host=...))."""

from __future__ import annotations

import pytest

from gossipgrad.tools.plan.formats import Bucket, LinkFit, NetworkFit, Profile
from gossipgrad.tools.plan.host import HostShare, fit_handoff, fit_overlap, fit_stale
from gossipgrad.tools.plan.model import CommModel, step_time
from gossipgrad.tools.plan.planner import plan
from gossipgrad.tools.plan.report import resolve_host


def approx(x: float):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


# F = 0.1, B = 0.4, O = 0.05; four 1 MB buckets ready every 0.1 s; cost 0.05 each (S = 0.2)
PROFILE = Profile(
    "toy", 32, "cpu", 0.1, 0.4, 0.05, 4 * 10**6,
    tuple(Bucket(i, 10**6, 0.1 * (i + 1)) for i in range(4)),
)  # fmt: skip
MODEL = CommModel(alpha_s=0.0, beta_s_per_byte=5e-8)
CROWDED = HostShare(cores=2, ranks_per_host=2, handoff_s=0.01)  # 1 core per rank
ROOMY = HostShare(cores=8, ranks_per_host=2, handoff_s=0.01)  # 4 cores per rank


def test_cores_per_rank_and_spare_core_threshold():
    assert (CROWDED.cores_per_rank, CROWDED.spare_core) == (1.0, False)
    assert (ROOMY.cores_per_rank, ROOMY.spare_core) == (4.0, True)
    assert HostShare(4, 2).spare_core and not HostShare(3, 2).spare_core  # 2.0 vs 1.5
    assert not HostShare(2, 4).spare_core  # 0.5 cores per rank


@pytest.mark.parametrize("strategy", ["gossip", "allreduce"])
@pytest.mark.parametrize("staleness", [0, 1])
def test_no_spare_core_overlapped_is_blocking_plus_handoff_per_bucket(strategy, staleness):
    blocking = step_time(PROFILE, MODEL, strategy, 4, overlap=False, host=CROWDED)
    overlapped = step_time(PROFILE, MODEL, strategy, 4, staleness=staleness, host=CROWDED)
    s = sum(MODEL.bucket_s(strategy, b.bytes, 4) for b in PROFILE.buckets)
    assert blocking.step_s == approx(0.1 + 0.4 + s + 0.05)  # == today's no-overlap formula
    assert blocking.step_s == approx(step_time(PROFILE, MODEL, strategy, 4, overlap=False).step_s)
    assert overlapped.step_s == approx(blocking.step_s + 4 * 0.01)
    assert overlapped.comm_s == approx(s + 4 * 0.01)
    assert overlapped.exposed_comm_s == approx(s + 4 * 0.01)


@pytest.mark.parametrize("staleness", [0, 1])
def test_no_spare_core_per_step_overlap_cost_does_not_depend_on_the_bucket_count(staleness):
    host = HostShare(2, 2, overlap_s=0.03)
    one = Profile("toy", 32, "cpu", 0.1, 0.4, 0.05, 4 * 10**6, (Bucket(0, 4 * 10**6, 0.4),))
    for profile in (PROFILE, one):  # 4 buckets, then 1 bucket of the same bytes
        blocking = step_time(profile, MODEL, "gossip", 2, overlap=False, host=host)
        overlapped = step_time(profile, MODEL, "gossip", 2, staleness=staleness, host=host)
        assert blocking.step_s == approx(0.1 + 0.4 + 0.2 + 0.05)
        assert overlapped.step_s == approx(blocking.step_s + 0.03)
    both = HostShare(2, 2, handoff_s=0.01, overlap_s=0.03)  # the two forms add up
    assert step_time(PROFILE, MODEL, "gossip", 2, host=both).step_s == approx(0.75 + 0.07)
    roomy = HostShare(8, 2, overlap_s=0.03)  # a spare core: not charged
    assert step_time(PROFILE, MODEL, "gossip", 2, host=roomy).step_s == approx(0.6)
    assert step_time(PROFILE, MODEL, "local", 2, host=host).step_s == approx(0.55)


def test_gossip_numbers_in_closed_form():
    # S = 4 * 0.05 = 0.2; no spare core: 0.1 + 0.4 + 0.2 + 0.05 (+ 4 * 0.01 overlapped)
    assert step_time(PROFILE, MODEL, "gossip", 2, overlap=False, host=CROWDED).step_s == approx(
        0.75
    )
    assert step_time(PROFILE, MODEL, "gossip", 2, host=CROWDED).step_s == approx(0.79)
    # spare core: today's formulas, the hand-off is not charged
    assert step_time(PROFILE, MODEL, "gossip", 2, host=ROOMY).step_s == approx(0.6)
    assert step_time(PROFILE, MODEL, "gossip", 2).step_s == approx(0.6)
    assert step_time(PROFILE, MODEL, "gossip", 2, staleness=1, host=ROOMY).step_s == approx(0.55)


@pytest.mark.parametrize("overlap", [True, False])
def test_no_spare_core_staleness_one_adds_its_per_byte_cost(overlap):
    host = HostShare(2, 2, handoff_s=0.01, stale_s_per_byte=1e-8)  # G = 4e6 B -> 0.04 s
    s0 = step_time(PROFILE, MODEL, "gossip", 2, overlap=overlap, host=host)
    s1 = step_time(PROFILE, MODEL, "gossip", 2, staleness=1, overlap=overlap, host=host)
    assert s1.step_s == approx(s0.step_s + 0.04)
    assert s1.step_s == approx(0.1 + 0.4 + 0.2 + 0.05 + (0.04 if overlap else 0.0) + 0.04)
    roomy = HostShare(8, 2, handoff_s=0.01, stale_s_per_byte=1e-8)  # spare core: unused
    assert step_time(PROFILE, MODEL, "gossip", 2, staleness=1, host=roomy).step_s == approx(0.55)


def test_no_spare_core_staleness_one_may_hide_at_most_the_exchange():
    # S = 0.2 s; G = 4e6 B. k = -2.5e-8 hides 0.1 s; k = -1e-6 would hide 4 s: capped at S.
    some = HostShare(2, 2, stale_s_per_byte=-2.5e-8)
    assert step_time(PROFILE, MODEL, "gossip", 2, staleness=1, host=some).step_s == approx(
        0.1 + 0.4 + 0.2 + 0.05 - 0.1
    )
    everything = HostShare(2, 2, overlap_s=0.01, stale_s_per_byte=-1e-6)
    assert step_time(PROFILE, MODEL, "gossip", 2, staleness=1, host=everything).step_s == approx(
        0.1 + 0.4 + 0.05 + 0.01
    )
    assert step_time(PROFILE, MODEL, "gossip", 2, host=everything).step_s == approx(0.76)


def test_no_communication_no_handoff():
    host = HostShare(2, 2, handoff_s=0.01, stale_s_per_byte=1e-8)
    for strategy, size in [("local", 8), ("gossip", 1), ("allreduce", 1)]:
        for staleness in (0, 1):
            t = step_time(PROFILE, MODEL, strategy, size, staleness=staleness, host=host)
            assert t.step_s == approx(0.55) and t.comm_s == 0.0


def test_fit_handoff_closed_form_and_checks():
    assert fit_overlap(0.020, 0.026) == approx(0.006)
    assert fit_overlap(0.030, 0.026) == 0.0
    with pytest.raises(ValueError, match="overlapped_s"):
        fit_overlap(0.02, float("inf"))
    assert fit_handoff(0.020, 0.026, 3) == approx(0.002)
    assert fit_handoff(0.030, 0.026, 3) == 0.0  # overlap faster: no hand-off cost
    with pytest.raises(ValueError, match="n_buckets"):
        fit_handoff(0.02, 0.03, 0)
    with pytest.raises(ValueError, match="blocking_s"):
        fit_handoff(0.0, 0.03, 1)
    assert fit_stale(0.010, 0.014, 2 * 10**6) == approx(2e-9)
    assert fit_stale(0.014, 0.010, 2 * 10**6) == 0.0
    # staleness 1 faster (a NIC moves the bytes while compute runs): a saving, bounded
    assert fit_stale(0.014, 0.010, 2 * 10**6, hidden_max_s=0.010) == approx(-2e-9)
    assert fit_stale(0.014, 0.010, 2 * 10**6, hidden_max_s=0.001) == approx(-5e-10)
    with pytest.raises(ValueError, match="hidden_max_s"):
        fit_stale(0.01, 0.02, 1, hidden_max_s=-1.0)
    with pytest.raises(ValueError, match="grad_bytes"):
        fit_stale(0.01, 0.02, 0)


def test_host_share_checks_and_json():
    with pytest.raises(ValueError, match="cores must be an integer >= 1"):
        HostShare(0, 2)
    with pytest.raises(ValueError, match="handoff_s"):
        HostShare(2, 2, -1e-3)
    with pytest.raises(ValueError, match="stale_s_per_byte"):
        HostShare(2, 2, 0.0, float("nan"))
    with pytest.raises(ValueError, match="overlap_s"):
        HostShare(2, 2, overlap_s=-1.0)
    assert HostShare(2, 2, stale_s_per_byte=-1e-9).stale_s_per_byte == -1e-9  # a saving
    assert HostShare.from_json(HostShare(2, 2, 0.0, 0.0, 5e-3).to_json()).overlap_s == 5e-3
    assert HostShare.from_json(CROWDED.to_json()) == CROWDED
    assert HostShare.from_json({"cores": 2, "ranks_per_host": 1}) == HostShare(2, 1, 0.0, 0.0)
    assert HostShare.from_json(HostShare(2, 2, 1e-3, 1e-9).to_json()) == HostShare(2, 2, 1e-3, 1e-9)
    with pytest.raises(ValueError, match="'host.ranks_per_host' is missing"):
        HostShare.from_json({"cores": 2})


def test_network_carries_host_record_and_old_files_still_load():
    net = NetworkFit(LinkFit(1e-5, 1e-9, 1.0), source="t", host=CROWDED)
    assert NetworkFit.from_json(net.to_json()) == net
    old = {"p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 1.0}}
    assert NetworkFit.from_json(old).host is None
    with pytest.raises(ValueError, match="network field 'host'"):
        NetworkFit.from_json({**old, "host": {"cores": 0, "ranks_per_host": 1}})


def test_planner_passes_host_through():
    kw = dict(sizes=[2], strategies=["gossip"], bucket_mb=[100], staleness=[0])
    free = plan(PROFILE, MODEL, **kw)[0]
    crowded = plan(PROFILE, MODEL, host=CROWDED, **kw)[0]  # one 4 MB bucket ready at 0.4
    assert free.step_s == approx(0.1 + 0.4 + 0.2 + 0.05)
    assert crowded.step_s == approx(0.1 + 0.4 + 0.2 + 0.01 + 0.05)


def test_resolve_host_overrides_field_by_field():
    assert resolve_host(None) is None
    assert resolve_host(CROWDED) == CROWDED
    assert resolve_host(CROWDED, cores=8) == HostShare(8, 2, 0.01)
    assert resolve_host(None, cores=2, ranks_per_host=2) == HostShare(2, 2, 0.0)
    assert resolve_host(CROWDED, handoff_s=0.0) == HostShare(2, 2, 0.0)
    with pytest.raises(ValueError, match="--host-cores and --ranks-per-host"):
        resolve_host(None, ranks_per_host=2)
    with pytest.raises(ValueError, match="--host-cores and --ranks-per-host"):
        resolve_host(None, handoff_s=1e-3)
    assert resolve_host(CROWDED, stale_s_per_byte=1e-9) == HostShare(2, 2, 0.01, 1e-9)
    assert resolve_host(CROWDED, overlap_s=2e-3) == HostShare(2, 2, 0.01, 0.0, 2e-3)

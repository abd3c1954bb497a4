"""Held-out prediction (lab.plan.heldout): the frozen calibration, its transfer to
another size, host share and link, and the guards that keep a scored run out of it."""

from __future__ import annotations

import pytest
from plan_support import PROFILE  # two 1 MB buckets, 32 ms of compute

from gossipgrad.tools.plan import CommModel, HostShare, step_time
from gossipgrad.tools.plan.calibrate import fit_in_step, scale_exchange, scale_profile
from lab.plan.heldout import (
    LOOPBACK,
    FrozenCalibration,
    predict_held_out,
    predict_local_s,
    share,
    share_ratio,
)

LOOP = CommModel(alpha_s=1e-5, beta_s_per_byte=2e-10, duplex=1.5)  # shared memory
SLOW = CommModel(alpha_s=1e-4, beta_s_per_byte=8e-9, duplex=1.0)  # ~1 Gbit/s
TWO_ON_TWO = HostShare(2, 2)
EXCHANGE_S = {
    s: sum(LOOP.bucket_s(s, b.bytes, 2) for b in PROFILE.buckets) for s in ("gossip", "allreduce")
}


def _round(
    strategy: str,
    local: float = 0.040,
    blocking: float = 0.046,
    s0: float = 0.049,
    s1: float = 0.050,
    size: int = 2,
    link: str = LOOPBACK,
) -> dict:
    return {
        "strategy": strategy,
        "local_s": local,
        "blocking_s": blocking,
        "s0_s": s0,
        "s1_s": s1,
        "size": size,
        "link": link,
    }


ROUNDS = [
    _round("gossip"),
    _round("gossip", 0.042, 0.047, 0.050, 0.052),
    _round("allreduce", 0.041, 0.049, 0.051, 0.053),
    _round("allreduce", 0.040, 0.050, 0.052, 0.055),
]


def _frozen(rounds=ROUNDS) -> FrozenCalibration:
    return FrozenCalibration.from_rounds(
        rounds,
        size=2,
        link=LOOPBACK,
        host=TWO_ON_TWO,
        link_model=LOOP,
        profile=PROFILE,
        exchange_s=EXCHANGE_S,
    )


def test_share_is_ranks_per_core_where_they_outnumber_the_cores():
    assert share(HostShare(2, 8)) == 4.0 and share(HostShare(2, 3)) == 1.5
    assert share(HostShare(2, 2)) == 1.0 and share(HostShare(16, 2)) == 1.0
    assert share_ratio(_frozen(), HostShare(2, 8)) == 4.0


def test_frozen_calibration_is_fit_in_step_over_every_round():
    cal = _frozen()
    fit = fit_in_step(ROUNDS, ROUNDS, PROFILE, EXCHANGE_S)
    assert cal.compute_factor == pytest.approx(fit["compute_factor"])
    assert cal.exchange_factor == pytest.approx(fit["exchange_factor"])
    assert cal.overlap_s == pytest.approx(fit["overlap_s"])
    assert cal.stale_s_per_byte == pytest.approx(fit["stale_s_per_byte_by_strategy"])
    assert (cal.size, cal.link, cal.rounds) == (2, LOOPBACK, 4)


@pytest.mark.parametrize("strategy", ["gossip", "allreduce"])
@pytest.mark.parametrize("size", [4, 8, 16])
def test_same_link_and_host_share_gives_the_in_sample_model_at_another_size(strategy, size):
    """r = 1 on the calibration link: the held-out model is the in-sample calibrated model
    (scaled profile, scaled exchange, calibrated host), only evaluated at another size."""
    cal = _frozen()
    host = HostShare(size, size)  # one core per rank, like the calibration host
    for staleness in (0, 1):
        for overlap in (False, True):
            got = predict_held_out(
                PROFILE,
                LOOP,
                cal,
                strategy,
                size,
                host=host,
                link=LOOPBACK,
                staleness=staleness,
                overlap=overlap,
            )
            want = step_time(
                scale_profile(PROFILE, cal.compute_factor),
                scale_exchange(LOOP, strategy, cal.exchange_factor[strategy]),
                strategy,
                size,
                staleness=staleness,
                overlap=overlap,
                host=HostShare(size, size, 0.0, cal.stale_s_per_byte[strategy], cal.overlap_s),
            )
            assert got.step_s == pytest.approx(want.step_s, rel=1e-12)


def test_every_cpu_term_scales_with_the_host_share_on_loopback():
    """8 ranks on 2 cores against a calibration at 2 on 2: compute, exchange, overlap and
    staleness cost all take 4x (the loopback transport is the ranks' own memory copies)."""
    cal = _frozen()
    r1 = predict_held_out(
        PROFILE, LOOP, cal, "gossip", 4, host=HostShare(4, 4), link=LOOPBACK, staleness=1
    )
    r4 = predict_held_out(
        PROFILE, LOOP, cal, "gossip", 4, host=HostShare(1, 4), link=LOOPBACK, staleness=1
    )
    assert r4.step_s == pytest.approx(4 * r1.step_s)
    assert predict_local_s(PROFILE, cal, HostShare(2, 8)) == pytest.approx(
        4 * PROFILE.local_step_s * cal.compute_factor
    )


def test_on_a_slower_link_the_overhead_stays_a_cpu_cost():
    """Blocking gossip on a ~1 Gbit/s link: the transport is that link's fit, plus the
    overhead (exchange factor - 1) times the loopback transport; the factor does not
    multiply the wire time."""
    cal = _frozen()
    f = cal.exchange_factor["gossip"]
    got = predict_held_out(
        PROFILE, SLOW, cal, "gossip", 2, host=TWO_ON_TWO, link="emulated 1gbit", overlap=False
    )
    transport = sum(SLOW.bucket_s("gossip", b.bytes, 2) for b in PROFILE.buckets)
    overhead = (f - 1) * sum(LOOP.bucket_s("gossip", b.bytes, 2) for b in PROFILE.buckets)
    compute = PROFILE.local_step_s * cal.compute_factor
    assert got.step_s == pytest.approx(compute + transport + overhead)
    assert got.step_s < compute + f * transport  # what multiplying the wire would give
    # At 4 ranks on those 2 cores the overhead doubles, the wire time does not.
    four = predict_held_out(
        PROFILE, SLOW, cal, "gossip", 4, host=HostShare(2, 4), link="emulated 1gbit", overlap=False
    )
    assert four.step_s == pytest.approx(2 * compute + transport + 2 * overhead)


def test_a_spare_core_at_the_target_drops_the_contention_costs():
    cal = _frozen()
    spare = predict_held_out(
        PROFILE, LOOP, cal, "gossip", 4, host=HostShare(8, 4), link=LOOPBACK, staleness=1
    )
    assert spare.step_s == pytest.approx(
        step_time(
            scale_profile(PROFILE, cal.compute_factor),
            scale_exchange(LOOP, "gossip", cal.exchange_factor["gossip"]),
            "gossip",
            4,
            staleness=1,
        ).step_s
    )


def test_unfitted_is_profile_fit_and_host_share_alone():
    bare = _frozen().unfitted()
    got = predict_held_out(
        PROFILE, LOOP, bare, "allreduce", 4, host=HostShare(2, 4), link=LOOPBACK, overlap=False
    )
    assert got.step_s == pytest.approx(
        2 * step_time(PROFILE, LOOP, "allreduce", 4, overlap=False).step_s
    )


def test_a_round_from_another_size_or_link_cannot_enter_the_calibration():
    """The leak guard: a scored run at a held-out size (or link) fed into the calibration
    path is refused, naming where it came from."""
    scored = _round("gossip", 0.080, 0.120, 0.125, 0.130, size=4)
    with pytest.raises(ValueError, match="round 4 was measured at size 4"):
        _frozen([*ROUNDS, scored])
    emulated = _round("gossip", size=2, link="emulated 1gbit")
    with pytest.raises(ValueError, match="on 'emulated 1gbit'"):
        _frozen([*ROUNDS, emulated])
    with pytest.raises(ValueError, match="measured at size None"):  # untagged: refused too
        _frozen([{k: v for k, v in ROUNDS[0].items() if k != "size"}])


def test_the_calibrations_own_size_and_link_are_not_predicted():
    cal = _frozen()
    with pytest.raises(ValueError, match="size 2 on 'loopback' is where the calibration"):
        predict_held_out(PROFILE, LOOP, cal, "gossip", 2, host=TWO_ON_TWO, link=LOOPBACK)
    # the same size on another link is held out
    assert (
        predict_held_out(
            PROFILE, SLOW, cal, "gossip", 2, host=TWO_ON_TWO, link="emulated 100mbit"
        ).step_s
        > 0
    )


def test_a_strategy_never_calibrated_is_refused():
    cal = _frozen(ROUNDS[:2])  # gossip only
    with pytest.raises(ValueError, match="no exchange factor for strategy 'allreduce'"):
        predict_held_out(PROFILE, LOOP, cal, "allreduce", 4, host=TWO_ON_TWO, link=LOOPBACK)


def test_json_round_trip_and_errors_name_the_field():
    cal = _frozen()
    back = FrozenCalibration.from_json(cal.to_json())
    assert back == cal
    doc = cal.to_json()
    del doc["compute_factor"]
    with pytest.raises(ValueError, match="field 'compute_factor' is missing"):
        FrozenCalibration.from_json(doc)
    with pytest.raises(ValueError, match="compute_factor must be a finite number > 0"):
        FrozenCalibration.from_json({**cal.to_json(), "compute_factor": -1})

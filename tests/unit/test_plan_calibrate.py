"""The in-step calibration's arithmetic (gossipgrad.tools.plan.calibrate): closed-form cases."""

from __future__ import annotations

import math

import pytest
from plan_support import PROFILE  # noqa: E402 - two 1 MB buckets, 32 ms of compute

from gossipgrad.tools.plan import Bucket, CommModel, Profile, step_time
from gossipgrad.tools.plan.calibrate import (
    FACTOR_RANGE,
    fit_compute_factor,
    fit_exchange_factor,
    scale_exchange,
    scale_profile,
)

# 1 ms latency, 1 GB/s: a 1 MB gossip bucket costs 2 ms.
NET = CommModel(alpha_s=1e-3, beta_s_per_byte=1e-9)


def test_compute_factor_scales_every_phase_and_ready_time():
    factor = fit_compute_factor(0.048, PROFILE)
    assert factor == pytest.approx(1.5)
    p = scale_profile(PROFILE, factor)
    assert (p.forward_s, p.backward_s, p.optimizer_s) == pytest.approx((0.015, 0.030, 0.003))
    assert [b.ready_s for b in p.buckets] == pytest.approx([0.0075, 0.030])
    assert [b.bytes for b in p.buckets] == [1_000_000, 1_000_000]
    assert p.local_step_s == pytest.approx(0.048)


def test_exchange_factor_is_the_measured_over_the_predicted_exposed_exchange():
    # blocking 0.040, compute 0.032: 8 ms exposed against 4 ms predicted -> 2x.
    assert fit_exchange_factor(0.040, 0.032, 0.004) == pytest.approx(2.0)
    # Noise (blocking faster than compute) cannot make communication free, nor a stall 1000x.
    assert fit_exchange_factor(0.030, 0.032, 0.004) == FACTOR_RANGE[0]
    assert fit_exchange_factor(10.0, 0.032, 0.004) == FACTOR_RANGE[1]


@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "horovod"])
def test_scaled_exchange_multiplies_that_strategys_bucket_cost(strategy):
    scaled = scale_exchange(NET, strategy, 3.0)
    for size in (2, 4, 16):
        assert scaled.bucket_s(strategy, 1_000_000, size) == pytest.approx(
            3.0 * NET.bucket_s(strategy, 1_000_000, size)
        )
    other = "allreduce" if strategy == "gossip" else "gossip"
    assert scaled.bucket_s(other, 1_000_000, 4) == NET.bucket_s(other, 1_000_000, 4)
    assert scale_exchange(NET, "local", 3.0) == NET


def test_calibrated_blocking_step_reproduces_the_calibration_runs():
    """Calibrating on a blocking and a compute-only run, then predicting that blocking run,
    gives back its measured time (the model is exact for what it was calibrated on)."""
    local_s, blocking_s = 0.040, 0.052
    compute = fit_compute_factor(local_s, PROFILE)
    predicted_s = sum(NET.bucket_s("gossip", b.bytes, 2) for b in PROFILE.buckets)
    net = scale_exchange(NET, "gossip", fit_exchange_factor(blocking_s, local_s, predicted_s))
    st = step_time(scale_profile(PROFILE, compute), net, "gossip", 2, overlap=False)
    assert st.step_s == pytest.approx(blocking_s)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True])
def test_bad_factors_are_refused_with_the_name(bad):
    with pytest.raises(ValueError, match="factor"):
        scale_profile(PROFILE, bad)
    with pytest.raises(ValueError, match="factor"):
        scale_exchange(NET, "gossip", bad)
    with pytest.raises(ValueError, match="blocking_s"):
        fit_exchange_factor(bad, 0.03, 0.004)


def test_gossip_factor_is_validated():
    with pytest.raises(ValueError, match="gossip_factor"):
        CommModel(1e-3, 1e-9, gossip_factor=0.0)


def _round(strategy: str, local: float, blocking: float, s0: float, s1: float) -> dict:
    return {"strategy": strategy, "local_s": local, "blocking_s": blocking, "s0_s": s0, "s1_s": s1}


def test_fit_in_step_compute_from_the_latest_rounds_the_rest_from_all():
    from gossipgrad.tools.plan.calibrate import fit_in_step

    prof = Profile("m", 8, "cpu", 0.002, 0.006, 0.002, 1000, (Bucket(0, 1000, 0.006),))
    old = [
        _round("gossip", 0.010, 0.020, 0.021, 0.022),
        _round("allreduce", 0.010, 0.030, 0.033, 0.034),
    ]
    new = [
        _round("gossip", 0.030, 0.040, 0.045, 0.046),
        _round("allreduce", 0.050, 0.060, 0.061, 0.065),
    ]
    f = fit_in_step(old + new, new, prof, {"gossip": 0.005, "allreduce": 0.010})
    assert f["compute_factor"] == pytest.approx(4.0)  # median of 3.0 and 5.0: latest only
    assert f["exchange_factor"]["gossip"] == pytest.approx(2.0)  # (0.010 / 0.005) twice
    assert f["exchange_factor"]["allreduce"] == pytest.approx(1.5)  # 2.0 and 1.0
    assert f["overlap_s"] == pytest.approx(0.002)  # median of 1, 3, 5, 1 ms
    assert f["stale_s_per_byte"] == pytest.approx(1e-6)  # median of 1, 1, 1, 4 ms per 1000 B
    assert f["stale_s_per_byte_by_strategy"] == pytest.approx({"gossip": 1e-6, "allreduce": 2.5e-6})
    # staleness 1 faster than 0: a saving, at most the round's exchange (blocking - local)
    faster = [
        _round("allreduce", 0.010, 0.014, 0.020, 0.012),  # saves 8 ms, capped at 4
        _round("allreduce", 0.010, 0.020, 0.020, 0.018),
    ]  # saves 2 ms
    g = fit_in_step(faster, faster, prof, {"allreduce": 0.01})
    assert g["stale_s_per_byte_by_strategy"]["allreduce"] == pytest.approx(-3e-6)
    with pytest.raises(ValueError, match="at least one round"):
        fit_in_step([], [], prof, {"gossip": 0.005})
    with pytest.raises(ValueError, match="no predicted exchange time"):
        fit_in_step(old, old, prof, {"gossip": 0.005})

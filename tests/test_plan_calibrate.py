"""The in-step calibration's arithmetic (gossipgrad.plan.calibrate): closed-form cases."""

from __future__ import annotations

import math

import pytest

from gossipgrad.plan import Bucket, CommModel, Profile, step_time
from gossipgrad.plan.calibrate import (
    FACTOR_RANGE,
    fit_compute_factor,
    fit_exchange_factor,
    scale_exchange,
    scale_profile,
)

PROFILE = Profile("m", 8, "cpu", forward_s=0.010, backward_s=0.020, optimizer_s=0.002,
                  param_bytes=2_000_000,
                  buckets=(Bucket(0, 1_000_000, 0.005), Bucket(1, 1_000_000, 0.020)))
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
            3.0 * NET.bucket_s(strategy, 1_000_000, size))
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

"""The alpha-beta fit behind ``gossipgrad netfit`` (pure: no MPI)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gossipgrad.tools.plan.fit import fit_link, r_squared, relative_errors

SIZES = [4096 * 2**i for i in range(13)]  # 4 KiB .. 16 MiB


def line(alpha: float, beta: float) -> list[float]:
    return [alpha + beta * n for n in SIZES]


def test_exact_line_is_recovered():
    fit = fit_link(SIZES, line(3e-6, 1 / 12e9))
    assert fit.alpha_s == pytest.approx(3e-6, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(1 / 12e9, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)


def test_latency_survives_noise_on_large_messages():
    # 2 % multiplicative noise: an unweighted fit would be decided by the 16 MiB points
    # (2 % of 1.4 ms = 28 us, ten times alpha); the relative fit keeps alpha within 10 %.
    rng = np.random.default_rng(0)
    times = np.array(line(3e-6, 1 / 12e9)) * (1 + 0.02 * rng.standard_normal(len(SIZES)))
    fit = fit_link(SIZES, times)
    assert fit.alpha_s == pytest.approx(3e-6, rel=0.1)
    assert fit.beta_s_per_byte == pytest.approx(1 / 12e9, rel=0.05)
    assert fit.r2 > 0.99


def test_one_slow_outlier_barely_moves_the_fit_but_lowers_r2():
    times = line(5e-6, 1e-10)
    times[0] = 5e-3  # a rank descheduled for a scheduler tick
    fit = fit_link(SIZES, times)
    assert fit.alpha_s == pytest.approx(5e-6, rel=0.01)
    assert fit.beta_s_per_byte == pytest.approx(1e-10, rel=0.01)
    assert fit.r2 < 0.5  # the ordinary R^2 reports the bad point
    assert relative_errors(fit, SIZES, times)[0] == pytest.approx(-1.0, abs=0.01)


def test_small_messages_faster_than_the_line_take_the_smallest_time_as_latency():
    # times proportional to size, with small sizes a bit fast: the residuals are negative
    times = [1e-10 * n * (0.9 if n < 20000 else 1.0) for n in SIZES]
    fit = fit_link(SIZES, times)
    assert fit.alpha_s == pytest.approx(times[0])
    assert fit.beta_s_per_byte == pytest.approx(1e-10, rel=1e-9)


def test_a_sweep_of_large_messages_only_does_not_take_a_transfer_as_latency():
    # 2-64 MiB at 500 Mbit/s, the smallest inside the shaper's burst: its 31 ms are
    # bandwidth, not latency, so the latency is not measured: 0, not 31 ms
    sizes = [1 << k for k in range(21, 27)]
    times = [n * 16e-9 * (0.89 if n == 1 << 21 else 1.0) for n in sizes]
    fit = fit_link(sizes, times)
    assert fit.alpha_s == 0.0
    assert fit.beta_s_per_byte == pytest.approx(16e-9, rel=1e-9)


def test_a_shaper_burst_does_not_set_the_bandwidth():
    # a 100 Mbit/s token-bucket link: messages up to its 64 KiB burst leave at 1 Gbit/s,
    # larger ones at the line rate (the emulated cluster's tc tbf); a fit through every
    # size follows the burst, the bandwidth regime gives the line
    line_s, burst_s = 8 / 100e6, 8 / 1e9
    times = [40e-6 + n * (burst_s if n <= 65536 else line_s) for n in SIZES]
    fit = fit_link(SIZES, times)
    assert 8 / fit.beta_s_per_byte == pytest.approx(100e6, rel=0.02)
    assert fit.r2 > 0.99


def test_a_short_sweep_fits_every_size():
    sizes = [4096, 8192, 16384]
    fit = fit_link(sizes, [5e-6 + 1e-9 * n for n in sizes])
    assert fit.alpha_s == pytest.approx(5e-6, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(1e-9, rel=1e-6)


def test_times_that_do_not_grow_are_refused():
    with pytest.raises(ValueError, match="do not grow with message size"):
        fit_link(SIZES, [1e-3 * (1 - i / 100) for i in range(len(SIZES))])


@pytest.mark.parametrize(
    ("nbytes", "seconds", "match"),
    [
        ([4096, 4096], [1e-5, 2e-5], "two distinct message sizes"),
        ([4096, 8192], [1e-5, 0.0], "finite and > 0"),
        ([4096, 8192], [1e-5, math.nan], "finite and > 0"),
        ([-1, 8192], [1e-5, 2e-5], ">= 0 bytes"),
        ([4096, 8192, 16384], [1e-5, 2e-5], "equal-length"),
    ],
)
def test_bad_points_name_the_problem(nbytes, seconds, match):
    with pytest.raises(ValueError, match=match):
        fit_link(nbytes, seconds)


def test_r_squared_of_constant_times():
    assert r_squared([1, 2], [1.0, 1.0], 1.0, 0.0) == 1.0
    assert r_squared([1, 2], [1.0, 1.0], 2.0, 0.0) == -math.inf


def test_one_slow_size_does_not_tilt_the_bandwidth():
    # the largest size's kept time 23 % slow (one descheduled rep the median over reps did
    # not absorb, as in a netfit of the emulated cluster): a least-squares line through the
    # five largest sizes reads the link 24 % slower; the median of their slopes does not
    beta = 1 / 0.2e9
    times = line(5e-6, beta)
    times[-1] *= 1.23
    large = np.array(SIZES[-5:], dtype=float)
    ols, _ = np.polyfit(large, np.array(times[-5:]), 1)
    assert ols / beta > 1.2
    assert fit_link(SIZES, times).beta_s_per_byte == pytest.approx(beta, rel=1e-9)
    times[-2] *= 1.23  # two of five slow: the median follows them part of the way
    assert fit_link(SIZES, times).beta_s_per_byte > beta

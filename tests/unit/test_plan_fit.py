"""The alpha-beta fit behind ``gossipgrad netfit`` (pure: no MPI)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gossipgrad.plan.fit import fit_link, r_squared, relative_errors

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


def test_negative_intercept_is_clamped_to_zero():
    # times proportional to size, with small sizes a bit fast: the free fit gives alpha < 0
    times = [1e-10 * n * (0.9 if n < 20000 else 1.0) for n in SIZES]
    fit = fit_link(SIZES, times)
    assert fit.alpha_s == 0.0
    assert fit.beta_s_per_byte == pytest.approx(1e-10, rel=0.05)


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

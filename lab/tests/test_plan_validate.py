"""Prediction-quality metrics: MAPE, worst error, Kendall tau, regret."""

from __future__ import annotations

import pytest

from lab.plan.validate import (
    kendall_tau,
    mape,
    regret,
    summarize,
    worst_abs_pct_error,
)

OBS = [("gossip-25MB", 1.0, 1.25), ("allreduce-25MB", 2.0, 1.6), ("gossip-1MB", 3.0, 3.0)]


def test_mape_and_worst_error():
    # errors: |1 - 1.25| / 1.25 = 20 %, |2 - 1.6| / 1.6 = 25 %, 0 %
    assert mape(OBS) == pytest.approx(15.0, rel=1e-12)
    assert worst_abs_pct_error(OBS) == pytest.approx(25.0, rel=1e-12)


def test_kendall_tau_known_permutations():
    assert kendall_tau([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == 1.0
    assert kendall_tau([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == -1.0
    # one discordant pair (2,3) of 6: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3, rel=1e-12)
    # [1,2,3,4] vs [2,1,4,3]: discordant (1,2),(3,4): (4 - 2) / 6
    assert kendall_tau([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(1 / 3, rel=1e-12)
    # tau-b with a tie in y: C=2, D=0, n0=3, ty=1 -> 2 / sqrt(3 * 2)
    assert kendall_tau([1, 2, 3], [1, 2, 2]) == pytest.approx(2 / 6**0.5, rel=1e-12)
    with pytest.raises(ValueError, match="constant"):
        kendall_tau([1, 2], [3, 3])
    with pytest.raises(ValueError, match="differ in length"):
        kendall_tau([1, 2], [1])


def test_regret():
    # model picks gossip-25MB (1.0 predicted), measured 1.25; best measured 1.25 -> 1.0
    assert regret(OBS) == 1.0
    wrong = [("a", 1.0, 2.0), ("b", 2.0, 1.0)]
    assert regret(wrong) == 2.0


def test_summary_and_input_checks():
    s = summarize(OBS)
    assert (s.n, s.regret) == (3, 1.0)
    assert s.kendall_tau == 1.0  # same order predicted and measured
    assert s.to_json()["mape_pct"] == pytest.approx(15.0)
    assert summarize([("a", 1.0, 1.0)]).kendall_tau is None
    with pytest.raises(ValueError, match="measured_s of 'a'"):
        mape([("a", 1.0, 0.0)])
    with pytest.raises(ValueError, match="non-empty"):
        regret([])

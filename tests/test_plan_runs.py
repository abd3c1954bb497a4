"""plan-validate's pure pieces: the re-measured regret and the per-size scoring."""

from __future__ import annotations

import pytest

from gossipgrad.bench.plan_runs import confirm_regret
from gossipgrad.bench.plan_score import score


def _row(config: str, size: int, predicted: float, measured: float) -> dict:
    return {"config": config, "size": size, "predicted_s": predicted, "measured_s": measured,
            "predicted_exposed_comm_s": 0.0, "measured_exposed_comm_s": 0.0}


ROWS = [_row("a", 2, 1.0, 1.2), _row("b", 2, 2.0, 1.0), _row("c", 2, 3.0, 3.0)]


def test_confirm_regret_reruns_both_alternating_and_takes_the_ratio_of_medians():
    calls = []
    fresh = {"a": iter([1.1, 1.3, 1.2]), "b": iter([1.0, 1.0, 1.0])}

    def run(label: str) -> float:
        calls.append(label)
        return next(fresh[label])

    out = confirm_regret(ROWS, chosen_index=0, rounds=3, run=run)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert (out["chosen"], out["best"]) == ("a", "b")
    assert out["ratio"] == pytest.approx(1.2) and out["regret"] == pytest.approx(1.2)


def test_confirm_regret_never_below_one_and_skips_a_choice_that_was_best():
    out = confirm_regret(ROWS, 0, 1, lambda label: {"a": 0.9, "b": 1.0}[label])
    assert out["ratio"] == pytest.approx(0.9) and out["regret"] == 1.0

    def never(label: str) -> float:
        raise AssertionError("nothing to re-run")

    assert confirm_regret(ROWS, 1, 3, never)["regret"] == 1.0
    assert confirm_regret(ROWS, 0, 0, never)["regret"] is None


def test_score_takes_regret_per_size_and_uses_the_confirmation_when_it_matches():
    rows = ROWS + [_row("a", 4, 1.0, 2.0), _row("b", 4, 2.0, 2.5)]
    launches = [{"size": 2, "compute_check": {"predicted_s": 1.0, "measured_s": 1.0},
                 "confirm": {"chosen": "a", "best": "b", "regret": 1.05}},
                {"size": 4, "compute_check": {"predicted_s": 1.0, "measured_s": 1.0}}]
    s = score(rows, launches)
    per = s["regret_per_size"]
    assert per["2"]["first_pass_regret"] == pytest.approx(1.2)
    assert per["2"]["regret"] == pytest.approx(1.05) and per["2"]["confirmed"]
    assert per["4"]["regret"] == 1.0 and "confirmed" not in per["4"]
    assert s["regret"] == pytest.approx(1.05)
    # Another model's choice was not re-measured: its first-pass regret stands.
    other = score(rows, launches, key="measured_s")
    assert other["regret_per_size"]["2"]["regret"] == 1.0

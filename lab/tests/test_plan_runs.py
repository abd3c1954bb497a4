"""plan-validate's pure pieces: the re-measured regret and the per-size scoring."""

from __future__ import annotations

import pytest

from lab.bench import plan_runs
from lab.bench.plan_runs import Config, confirm_regret, run_passes
from lab.bench.plan_score import score


def _row(config: str, size: int, predicted: float, measured: float) -> dict:
    return {
        "config": config,
        "size": size,
        "predicted_s": predicted,
        "measured_s": measured,
        "predicted_exposed_comm_s": 0.0,
        "measured_exposed_comm_s": 0.0,
    }


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
    launches = [
        {
            "size": 2,
            "compute_check": {"predicted_s": 1.0, "measured_s": 1.0},
            "confirm": {"chosen": "a", "best": "b", "regret": 1.05},
        },
        {"size": 4, "compute_check": {"predicted_s": 1.0, "measured_s": 1.0}},
    ]
    s = score(rows, launches)
    per = s["regret_per_size"]
    assert per["2"]["first_pass_regret"] == pytest.approx(1.2)
    assert per["2"]["regret"] == pytest.approx(1.05) and per["2"]["confirmed"]
    assert per["4"]["regret"] == 1.0 and "confirmed" not in per["4"]
    assert s["regret"] == pytest.approx(1.05)
    # Another model's choice was not re-measured: its first-pass regret stands.
    other = score(rows, launches, key="measured_s")
    assert other["regret_per_size"]["2"]["regret"] == 1.0


def test_run_passes_reverses_the_order_every_other_pass_and_pools_the_steps(monkeypatch):
    calls = []
    fresh = {
        "a": iter([[1.0, 1.0], [4.0, 4.0], [1.0, 2.0]]),
        "b": iter([[5.0, 5.0], [2.0, 2.0], [3.0, 3.0]]),
    }

    def fake_run(comm, cfg, arch, hidden, batch_size, steps, warmup):
        calls.append((cfg.strategy, steps, warmup))
        times = next(fresh[cfg.strategy])
        return {"measured_s": sorted(times)[len(times) // 2], "steps_s": times}

    monkeypatch.setattr(plan_runs, "run_config", fake_run)
    out = run_passes(None, [Config("a", 1.0), Config("b", 1.0)], 3, "mlp", 8, 4, steps=5, warmup=2)
    # ceil(5 / 3) = 2 timed steps per pass; order a b, b a, a b.
    assert calls == [("a", 2, 2), ("b", 2, 2), ("b", 2, 2), ("a", 2, 2), ("a", 2, 2), ("b", 2, 2)]
    assert out[0]["measured_s"] == pytest.approx(1.5)  # median of 1 1 4 4 1 2
    assert (out[0]["min_s"], out[0]["max_s"]) == (1.0, 4.0)
    assert out[0]["pass_s"] == [1.0, 4.0, 2.0]
    assert out[1]["measured_s"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="passes"):
        run_passes(None, [Config("a", 1.0)], 0, "mlp", 8, 4, steps=5, warmup=2)


def test_run_passes_predicts_each_pass_before_running_it(monkeypatch):
    events = []

    def fake_run(comm, cfg, arch, hidden, batch_size, steps, warmup):
        events.append(("run", cfg.strategy))
        return {"measured_s": 1.0, "steps_s": [1.0]}

    def before_pass(p):
        events.append(("calibrate", p))
        return lambda cfg: {"predicted_s": 10.0 * (p + 1) + (cfg.strategy == "b")}

    monkeypatch.setattr(plan_runs, "run_config", fake_run)
    out = run_passes(
        None,
        [Config("a", 1.0), Config("b", 1.0)],
        2,
        "mlp",
        8,
        4,
        steps=2,
        warmup=0,
        before_pass=before_pass,
    )
    assert events == [
        ("calibrate", 0),
        ("run", "a"),
        ("run", "b"),
        ("calibrate", 1),
        ("run", "b"),
        ("run", "a"),
    ]
    assert out[0]["pass_predicted_s"] == [10.0, 20.0] and out[0]["predicted_s"] == 15.0
    assert out[1]["pass_predicted_s"] == [11.0, 21.0] and out[1]["predicted_s"] == 16.0


def test_merge_expands_multi_size_reports_and_keeps_each_files_sizes_apart(tmp_path):
    import json

    from lab.bench.plan_score import merge

    def launch(size: int, rows: list[dict]) -> dict:
        return {
            "size": size,
            "network": {"source": "t"},
            "configs": rows,
            "compute_check": {"predicted_s": 1.0, "measured_s": 1.0},
            "confirm": {"chosen": "a", "best": "a", "regret": 1.0},
            "summary": {},
        }

    two_sizes = {
        "launches": [
            launch(2, [_row("a", 2, 1.0, 1.0), _row("b", 2, 2.0, 2.0)]),
            launch(4, [_row("a", 4, 3.0, 3.0), _row("b", 4, 4.0, 4.0)]),
        ]
    }
    # the same size on another link: there "b" is fastest, and the model picks "a"
    other = launch(2, [_row("a", 2, 5.0, 6.0), _row("b", 2, 6.0, 5.0)])
    (tmp_path / "loop.json").write_text(json.dumps(two_sizes))
    (tmp_path / "emu.json").write_text(json.dumps(other))
    m = merge([str(tmp_path / "loop.json"), str(tmp_path / "emu.json")])
    assert m["sizes"] == [2, 4] and len(m["configs"]) == 6
    per = m["summary"]["regret_per_size"]
    assert list(per) == ["0:loop.json:2", "0:loop.json:4", "1:emu.json:2"]
    assert per["0:loop.json:2"]["regret"] == 1.0
    assert per["1:emu.json:2"]["regret"] == pytest.approx(1.2)  # 6 / 5, not mixed with loop
    assert m["summary"]["regret"] == pytest.approx(1.2)


def test_blocking_score_keeps_only_the_configurations_without_overlap():
    from lab.bench.plan_score import blocking_score

    rows = [
        {**_row("a", 2, 1.0, 2.0), "overlap": True, "mix": "grad"},
        {**_row("b", 2, 1.0, 1.0), "overlap": False, "mix": "grad"},
        {**_row("c", 2, 2.2, 2.0), "overlap": False, "mix": "param"},
    ]
    for r in rows:
        r["predicted_spare_core_s"] = r["predicted_s"]
    launch = {"size": 2, "compute_check": {"predicted_s": 1.0, "measured_s": 1.0}}
    s = blocking_score(rows, [launch])
    assert s["n"] == 2 and s["mape_pct"] == pytest.approx(5.0)  # 0 % and 10 %, not a's 50 %
    assert blocking_score(rows[:2], [launch]) is None

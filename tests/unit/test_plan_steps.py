"""The steps-to-target model (closed form) and the time-to-accuracy recommendation."""

from __future__ import annotations

import json
import math

import pytest

from gossipgrad.tools.plan.planner import PlanRow
from gossipgrad.tools.plan.steps import (
    MeasuredSteps,
    fit_line,
    fit_steps,
    measured_steps,
    predict,
)
from gossipgrad.tools.plan.tta import dominant_term, recommend_tta, render_tta, tta_rows


def log_steps(a: float, b: float, p: int) -> float:
    return a + b * math.log2(p)


def power_steps(a: float, b: float, p: int) -> float:
    return a * p**b


def test_fit_line_recovers_a_known_line_and_is_least_squares():
    assert fit_line([0.0, 1.0, 2.0], [5.0, 3.0, 1.0]) == pytest.approx((5.0, -2.0))
    # (0, 0), (1, 1), (2, 1): slope 0.5, intercept 1/6 (the normal equations by hand)
    assert fit_line([0.0, 1.0, 2.0], [0.0, 1.0, 1.0]) == pytest.approx((1 / 6, 0.5))


@pytest.mark.parametrize(("a", "b"), [(120.0, -15.0), (60.0, 4.0), (80.0, 0.0)])
def test_log_form_known_coefficients_give_known_predictions(a, b):
    points = {p: log_steps(a, b, p) for p in (1, 2, 4)}
    fit = fit_steps("gossip", points, form="log")
    assert (fit.a, fit.b) == pytest.approx((a, b))
    assert fit.rms_rel == pytest.approx(0.0, abs=1e-12)
    assert fit.predict(8) == pytest.approx(a + 3 * b)
    assert fit.predict(64) == pytest.approx(a + 6 * b)


@pytest.mark.parametrize(("a", "b"), [(100.0, -0.5), (40.0, 0.25)])
def test_power_form_known_coefficients_give_known_predictions(a, b):
    points = {p: power_steps(a, b, p) for p in (1, 2, 4)}
    fit = fit_steps("allreduce", points, form="power")
    assert (fit.a, fit.b) == pytest.approx((a, b))
    assert fit.predict(8) == pytest.approx(a * 8**b)


@pytest.mark.parametrize(("a", "b"), [(20.0, 24.0), (30.0, -10.0)])
def test_batch_form_known_coefficients_give_known_predictions(a, b):
    points = {p: a + b / p for p in (1, 2, 4)}
    fit = fit_steps("allreduce", points, form="batch")
    assert (fit.a, fit.b) == pytest.approx((a, b))
    assert fit.predict(8) == pytest.approx(a + b / 8)
    assert fit.predict(1024) == pytest.approx(a + b / 1024)  # the floor a, not below
    assert fit.describe() == f"steps = {a:g} {'+' if b > 0 else '-'} {abs(b):g} / size"


def test_auto_picks_the_form_that_generated_the_points():
    assert fit_steps("g", {p: log_steps(100, -20, p) for p in (1, 2, 4)}).form == "log"
    assert fit_steps("g", {p: power_steps(100, -0.7, p) for p in (1, 2, 4)}).form == "power"
    assert fit_steps("g", {p: 20 + 24 / p for p in (1, 2, 4)}).form == "batch"
    # two sizes fit both exactly: the tie goes to log
    assert fit_steps("g", {1: 100, 2: 70}).form == "log"


def test_least_squares_over_three_noisy_sizes():
    # log2 p = 0, 1, 2 with steps 100, 80, 70: b = -15, a = 250/3 + 15 = 98.33
    fit = fit_steps("gossip", {1: 100, 2: 80, 4: 70}, form="log")
    assert fit.b == pytest.approx(-15.0)
    assert fit.a == pytest.approx(250 / 3 + 15)
    assert fit.predict(8) == pytest.approx(250 / 3 + 15 - 45)
    assert fit.rms_rel > 0


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ({4: 50}, "at least two"),
        ({1: 50, 2: 0}, "steps > 0"),
        ({0: 50, 2: 40}, "sizes must be >= 1"),
    ],
)
def test_fit_refuses_what_it_cannot_fit(points, message):
    with pytest.raises(ValueError, match=message):
        fit_steps("gossip", points)
    with pytest.raises(ValueError, match="choose log, power, batch or auto"):
        fit_steps("gossip", {1: 10, 2: 9}, form="cubic")


def _run(strategy: str, size: int, curve: list[tuple[int, float]]) -> list[str]:
    lines = [
        {"event": "eval", "strategy": strategy, "size": size, "step": s, "test_accuracy": a}
        for s, a in curve
    ]
    last = curve[-1]
    lines.append(
        {
            "event": "summary",
            "strategy": strategy,
            "size": size,
            "steps": last[0],
            "test_accuracy": last[1],
        }
    )
    return [json.dumps(x) for x in lines]


def _runs(strategy: str, steps_at: dict[int, int]) -> list[str]:
    """One run per size that first reaches 0.9 at the given step."""
    out = []
    for size, n in steps_at.items():
        out += _run(strategy, size, [(0, 0.1), (n - 2, 0.85), (n, 0.91), (n + 2, 0.93)])
    return out


def test_measured_steps_per_strategy_and_size_mean_over_runs():
    lines = _runs("gossip", {1: 100, 2: 90}) + _runs("gossip", {2: 80})
    lines += _run("allreduce", 4, [(0, 0.1), (50, 0.8)])  # never reaches 0.9
    m = measured_steps(lines, 0.9)
    assert m.steps[("gossip", 2)] == (90, 80)
    assert m.mean("gossip", 2) == 85
    assert m.mean("gossip", 1) == 100
    assert m.mean("allreduce", 4) is None and m.missed[("allreduce", 4)] == 1
    assert m.sizes("gossip") == [1, 2]


def test_a_size_with_one_run_missing_the_target_is_left_out():
    lines = _runs("gossip", {1: 100, 2: 90, 4: 80}) + _run("gossip", 4, [(0, 0.1), (90, 0.8)])
    m = measured_steps(lines, 0.9)
    assert m.mean("gossip", 4) is None
    pred = predict(m, "gossip", 8)
    assert pred is not None and pred.fit.sizes == (1, 2)


def test_the_predicted_size_never_enters_its_own_fit():
    small = _runs("gossip", {1: 100, 2: 90, 4: 80})
    without = predict(measured_steps(small, 0.9), "gossip", 8, form="log")
    held = small + _runs("gossip", {8: 40, 16: 10})  # far off the curve: would move any fit
    with_runs = predict(measured_steps(held, 0.9), "gossip", 8, form="log")
    assert without is not None and with_runs is not None
    assert with_runs.fit == without.fit
    assert with_runs.predicted == pytest.approx(70.0) == without.predicted
    assert without.measured is None
    assert with_runs.measured == 40
    assert with_runs.error == pytest.approx((70 - 40) / 40)


def test_no_prediction_from_fewer_than_two_smaller_sizes():
    m = measured_steps(_runs("gossip", {4: 80, 8: 60}), 0.9)
    assert predict(m, "gossip", 8) is None
    assert predict(m, "gossip", 16) is not None


def _plan_row(strategy: str, size: int, step_s: float, staleness: int = 0) -> PlanRow:
    return PlanRow(strategy, size, 25.0, staleness, step_s, 0.0, 0.0, None, 1, 0.0, 0.0, 0)


MEASURED = MeasuredSteps(
    {
        ("gossip", 1): (100,),
        ("gossip", 2): (95,),
        ("gossip", 4): (90,),
        ("allreduce", 1): (100,),
        ("allreduce", 2): (90,),
        ("allreduce", 4): (80,),
        ("local", 1): (100,),
        ("local", 2): (99,),
        ("local", 4): (98,),
    },
    {},
)


def test_time_to_accuracy_is_steps_times_step_time_and_names_the_dominant_term():
    rows = [
        _plan_row("gossip", 8, 0.5),
        _plan_row("gossip", 8, 0.1, staleness=1),
        _plan_row("allreduce", 8, 1.0),
        _plan_row("local", 8, 0.01),
    ]
    ttas = {r.strategy: r for r in tta_rows(rows, MEASURED, [8], form="log")}
    g, a = ttas["gossip"], ttas["allreduce"]
    assert g.steps == pytest.approx(85.0) and g.step_s == 0.5  # staleness 1 is not used
    assert a.steps == pytest.approx(70.0) and a.seconds == pytest.approx(70.0)
    best = recommend_tta(list(ttas.values()))[8]
    assert best is g  # local is faster but trains no shared model
    assert dominant_term(a, g) == "step time"  # 2.0x step time against 0.82x steps
    assert dominant_term(g, g) == "-"


def test_steps_dominate_when_step_times_are_close():
    rows = [_plan_row("gossip", 8, 0.5), _plan_row("allreduce", 8, 0.55)]
    m = MeasuredSteps(
        {
            ("gossip", 1): (100,),
            ("gossip", 2): (150,),
            ("allreduce", 1): (100,),
            ("allreduce", 2): (90,),
        },
        {},
    )
    ttas = tta_rows(rows, m, [8], form="log")
    best = recommend_tta(ttas)[8]
    assert best.strategy == "allreduce"
    gossip = next(r for r in ttas if r.strategy == "gossip")
    assert dominant_term(gossip, best) == "steps"
    text = render_tta(ttas, 0.9)
    assert "Size 8: allreduce is predicted fastest" in text
    assert "against gossip (125.00 s: 3.57x the steps, 0.91x the step time) steps dominate" in text
    assert "| 8 | gossip | 1,2 |" in text


def test_render_without_predictions_says_what_is_needed():
    assert "two or more sizes below" in render_tta([], 0.9)


def test_plan_command_recommends_by_time_to_accuracy_from_smaller_sizes(tmp_path):
    """``gossipgrad plan --metrics a,b --target-accuracy``: measured rows per size, the
    prediction at 8 from sizes 1, 2, 4 only, and the size-8 run shown as held out."""
    from click.testing import CliRunner

    from gossipgrad.cli import main
    from gossipgrad.tools.plan.formats import Bucket, LinkFit, NetworkFit, Profile
    from gossipgrad.tools.plan.model import MIB

    Profile(
        "toy",
        32,
        "cpu",
        0.1,
        0.2,
        0.05,
        4 * MIB,
        (Bucket(0, 2 * MIB, 0.1), Bucket(1, 2 * MIB, 0.2)),
    ).save(tmp_path / "p.json")
    NetworkFit(LinkFit(1e-5, 1 / 1e9, 0.999), source="unit test").save(tmp_path / "n.json")
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    # steps = 20 + 24 / size (gossip) and 20 + 40 / size (allreduce): the default form
    small.write_text(
        "\n".join(
            _runs("gossip", {1: 44, 2: 32, 4: 26}) + _runs("allreduce", {1: 60, 2: 40, 4: 30})
        )
        + "\n"
    )
    big.write_text("\n".join(_runs("gossip", {8: 25}) + _runs("allreduce", {8: 24})) + "\n")
    args = [
        "plan",
        "--profile",
        str(tmp_path / "p.json"),
        "--network",
        str(tmp_path / "n.json"),
        "--sizes",
        "8",
        "--staleness",
        "0",
        "--target-accuracy",
        "0.9",
        "--metrics",
    ]
    res = CliRunner().invoke(main, [*args, f"{small},{big}"])
    assert res.exit_code == 0, res.output
    assert "| gossip, size 4 | 26 |" in res.output  # measured, per size
    assert "Predicted time to test accuracy 0.9" in res.output
    gossip = next(line for line in res.output.splitlines() if line.startswith("| 8 | gossip |"))
    assert "| 1,2,4 | steps = 20 + 24 / size | 23.0 | 25.0 (-8%) |" in gossip
    allreduce = next(
        line for line in res.output.splitlines() if line.startswith("| 8 | allreduce |")
    )
    assert "| 25.0 | 24.0 (+4%) |" in allreduce
    assert "Size 8: " in res.output and "is predicted fastest to 0.9" in res.output
    missing = CliRunner().invoke(main, [*args, f"{small},{tmp_path / 'none.jsonl'}"])
    assert missing.exit_code == 1 and "none.jsonl" in missing.output
    assert "Traceback" not in missing.output
    # --steps-at-size: the runs at 8 themselves (other seeds' pilots), not the fit
    res = CliRunner().invoke(main, [*args, f"{small},{big}", "--steps-at-size"])
    gossip = next(line for line in res.output.splitlines() if line.startswith("| 8 | gossip |"))
    assert (
        res.exit_code == 0 and "| measured at 8 (1 runs) | their mean; fit: 23.0 | 25.0 |" in gossip
    )
    assert "MEASURED at the size itself" in res.output
    res = CliRunner().invoke(main, [*args[:-3], "--steps-at-size"])
    assert res.exit_code == 1 and "--steps-at-size reads steps from --metrics" in res.output


def test_steps_at_size_take_the_runs_there_and_fall_back_to_the_fit():
    rows = [_plan_row("gossip", 8, 0.5), _plan_row("allreduce", 8, 1.0)]
    m = MeasuredSteps({**MEASURED.steps, ("gossip", 8): (70, 80)}, {("allreduce", 8): 1})
    ttas = {r.strategy: r for r in tta_rows(rows, m, [8], form="log", at_size=True)}
    g, a = ttas["gossip"], ttas["allreduce"]
    assert (g.steps, g.runs) == (75.0, 2) and g.prediction.predicted == pytest.approx(85.0)
    # a run at 8 missed the target: their mean would flatter, so the fit stands
    assert (a.runs, a.steps) == (0, pytest.approx(70.0))
    text = render_tta(list(ttas.values()), 0.9)
    assert "| 8 | gossip | measured at 8 (2 runs) | their mean; fit: 85.0 | 75.0 | - |" in text
    assert "| 8 | allreduce | 1,2,4 |" in text
    # without at_size the runs at 8 are held out, never the input
    assert tta_rows(rows, m, [8], form="log")[0].steps == pytest.approx(85.0)

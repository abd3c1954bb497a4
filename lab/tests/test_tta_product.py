"""The steps x step-time score (lab.bench.tta_product) on made-up launches: the prediction
reads the smaller sizes and the short launch only, and the full launch is what it is
scored against."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lab.bench.tta_product import markdown, score
from lab.cli import lab


def _write(d, full_steps=30, full_s=6.0, short_step=0.2, reach=True):
    for size, steps in ((1, 100), (2, 60), (4, 40)):
        rows = [
            {"event": "eval", "size": size, "step": steps, "strategy": s, "test_accuracy": 0.96}
            for s in ("gossip", "ps")
            if reach or s == "gossip"
        ]
        rows += [
            {"event": "summary", "size": size, "steps": 200, "strategy": s, "test_accuracy": 0.97}
            for s in ("gossip", "ps")
        ]
        (d / f"tta-{size}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    short = {
        "bench": "tta",
        "size": 8,
        "target": 1.0,
        "results": {s: {"strategy": s, "step_s": short_step} for s in ("gossip", "ps")},
    }
    (d / "step-8.json").write_text(json.dumps(short) + "\n")
    row = {"steps_to_target": full_steps, "seconds_to_target": full_s, "step_s": full_s / 30}
    full = {"bench": "tta", "size": 8, "target": 0.95, "results": {"gossip": row, "ps": row}}
    (d / "tta-8.json").write_text("a log line\n" + json.dumps(full) + "\n")


def test_prediction_is_fitted_steps_times_the_short_step(tmp_path):
    _write(tmp_path)
    report = score(tmp_path)
    g = next(r for r in report["rows"] if r["contender"] == "gossip")
    # batch form through 100, 60, 40 steps at 1, 2, 4 ranks, evaluated at 8
    assert g["scored"] and g["fitted_steps"] == {1: 100.0, 2: 60.0, 4: 40.0}
    assert 20 < g["predicted_steps"] < 40
    assert g["predicted_s"] == pytest.approx(g["predicted_steps"] * 0.2, abs=1e-3)
    assert g["error_pct"] == pytest.approx(100 * (g["predicted_s"] - 6.0) / 6.0, abs=0.01)
    assert report["summary"]["scored"] == 2
    assert "| gossip | 100/60/40 |" in markdown(report)


def test_the_full_launch_never_informs_the_prediction(tmp_path):
    _write(tmp_path, full_steps=30, full_s=6.0)
    a = score(tmp_path)["rows"][0]
    _write(tmp_path, full_steps=90, full_s=50.0)
    b = score(tmp_path)["rows"][0]
    assert a["predicted_s"] == b["predicted_s"] and a["error_pct"] != b["error_pct"]


def test_a_contender_without_two_smaller_sizes_is_not_scored(tmp_path):
    _write(tmp_path, reach=False)
    rows = {r["contender"]: r for r in score(tmp_path)["rows"]}
    assert rows["gossip"]["scored"] and not rows["ps"]["scored"]
    assert "two smaller sizes" in rows["ps"]["why"]


def test_the_command_says_what_is_missing(tmp_path):
    res = CliRunner().invoke(lab, ["tta-product", str(tmp_path)])
    assert res.exit_code == 1 and "tta-8.json" in res.output
    _write(tmp_path)
    md = tmp_path / "score.md"
    res = CliRunner().invoke(lab, ["tta-product", str(tmp_path), "--markdown", str(md)])
    assert res.exit_code == 0 and json.loads(res.output)["summary"]["scored"] == 2
    assert md.read_text().startswith("| contender |")

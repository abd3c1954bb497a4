"""The steps x step-time score (lab.bench.tta_product) on made-up launches: the prediction
reads the smaller sizes and the short launch only, and the full launch is what it is
scored against."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lab.bench.tta_product import markdown, score, score_mean
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


def _write_size8_metrics(d, steps: dict[str, int | None]):
    """Another launch's metrics at 8 ranks: {contender: steps to 0.96, None: never}."""
    rows = []
    for s, n in steps.items():
        if n is not None:
            rows.append(
                {"event": "eval", "size": 8, "step": n, "strategy": s, "test_accuracy": 0.96}
            )
        rows.append(
            {"event": "summary", "size": 8, "steps": 200, "strategy": s, "test_accuracy": 0.97}
        )
    d.mkdir()
    (d / "tta-8.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_steps_from_other_launches_are_their_mean_at_the_size(tmp_path):
    (tmp_path / "a").mkdir()
    _write(tmp_path / "a")
    _write_size8_metrics(tmp_path / "s1", {"gossip": 40, "ps": 20})
    _write_size8_metrics(tmp_path / "s2", {"gossip": 50, "ps": None})
    report = score(tmp_path / "a", steps_from=[tmp_path / "s1", tmp_path / "s2"])
    rows = {r["contender"]: r for r in report["rows"]}
    g = rows["gossip"]
    # the mean of 40 and 50 at 8 ranks, not the smaller sizes' fit (100, 60, 40)
    assert g["scored"] and g["predicted_steps"] == 45.0 and g["fitted_steps"] == {8: 45.0}
    assert g["predicted_s"] == pytest.approx(45 * 0.2)
    # one of ps's runs never reached the target: a mean over the others would flatter
    assert not rows["ps"]["scored"] and "reached the target" in rows["ps"]["why"]
    assert "| steps at 8, other launch |" in markdown(report)
    assert score(tmp_path / "a", steps_from=[tmp_path / "s1"])["rows"][0]["predicted_steps"] == 40


def test_steps_from_a_launch_without_that_size_says_so(tmp_path):
    _write(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no metrics at size 8"):
        score(tmp_path, steps_from=[tmp_path / "empty"])
    res = CliRunner().invoke(
        lab, ["tta-product", str(tmp_path), "--steps-from", str(tmp_path / "empty")]
    )
    assert res.exit_code == 1 and "no metrics at size 8" in res.output


def test_steps_for_one_contender_come_from_its_own_records(tmp_path):
    _write(tmp_path)
    _write_size8_metrics(tmp_path / "s1", {"gossip": 40, "ps": 20})
    rec = {"bench": "tta", "size": 8, "target": 0.95, "results": {"ps": {"steps_to_target": 30}}}
    (tmp_path / "ps-8.json").write_text(json.dumps(rec) + "\n")
    report = score(
        tmp_path, steps_from=[tmp_path / "s1"], steps_for={"ps": [tmp_path / "ps-8.json"]}
    )
    rows = {r["contender"]: r for r in report["rows"]}
    assert rows["gossip"]["predicted_steps"] == 40 and rows["ps"]["predicted_steps"] == 30
    rec["size"] = 4  # a record of another size is another job's steps
    (tmp_path / "ps-8.json").write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match="not a launch at size 8"):
        score(tmp_path, steps_for={"ps": [tmp_path / "ps-8.json"]})


def test_the_mean_of_several_launches_is_scored_as_one(tmp_path):
    _write_size8_metrics(tmp_path / "s1", {"gossip": 40, "ps": 20})
    for name, full_s, short in (("a", 6.0, 0.1), ("b", 10.0, 0.3)):
        (tmp_path / name).mkdir()
        _write(tmp_path / name, full_s=full_s, short_step=short)
    dirs = [tmp_path / "a", tmp_path / "b"]
    report = score_mean(dirs, steps_from=[tmp_path / "s1"])
    g = next(r for r in report["rows"] if r["contender"] == "gossip")
    # 40 steps x the mean short step (0.2) against the mean measured seconds (8.0)
    assert g["launches"] == 2 and g["predicted_s"] == pytest.approx(8.0)
    assert g["error_pct"] == pytest.approx(0.0) and report["summary"]["within_target"] == 1
    assert report["rows"][1]["error_pct"] == pytest.approx(-50.0)  # ps: 20 steps x 0.2 s
    # each launch alone errs (4 s for 6, 12 s for 10); the mean is what this check scores
    alone = [score(d, steps_from=[tmp_path / "s1"])["rows"][0]["error_pct"] for d in dirs]
    assert [round(e) for e in alone] == [-33, 20]
    res = CliRunner().invoke(
        lab, ["tta-product", *map(str, dirs), "--steps-from", str(tmp_path / "s1")]
    )
    assert res.exit_code == 0 and json.loads(res.output)["mean_of"] == list(map(str, dirs))
    assert "mean of 2" in markdown(report)

"""Measured steps-to-accuracy from metrics JSONL (tolerant parser)."""

from __future__ import annotations

import json

import pytest

from gossipgrad.tools.plan.convergence import (
    read_metrics,
    render_convergence,
    steps_to_target,
)
from gossipgrad.tools.plan.formats import Bucket, Profile
from gossipgrad.tools.plan.model import CommModel
from gossipgrad.tools.plan.planner import plan, render_markdown


def _lines(*records) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in records]


LOG = _lines(
    {"step": 100, "test_accuracy": 0.5},
    {"step": 200, "test_accuracy": 0.71},
    {"step": 300, "test_accuracy": 0.74},
    {"event": "summary", "strategy": "allreduce", "steps": 300, "test_accuracy": 0.74},
    {"step": 100, "test_accuracy": 0.4, "loss": 2.0},
    {"loss": 1.5, "step": 150},
    {"step": 300, "test_accuracy": 0.69},
    {"step": 400, "test_accuracy": 0.72},
    {"event": "summary", "strategy": "gossip", "steps": 400, "test_accuracy": 0.72},
)


def test_steps_to_target_per_strategy():
    report = steps_to_target(LOG, 0.7)
    got = {r.strategy: (r.steps_to_target, r.upper_bound, r.best_accuracy) for r in report.rows}
    assert got == {"allreduce": (200, False, 0.74), "gossip": (400, False, 0.72)}
    assert report.problems == ()
    text = render_convergence(report)
    assert "MEASURED" in text and "| gossip | 400 | 0.72 | 1 |  |" in text


def test_not_reached_summary_only_and_bad_lines_are_reported():
    lines = _lines(
        "{oops",
        {"event": "summary", "strategy": "local", "steps": 900, "test_accuracy": 0.8},
        {"step": 50, "test_accuracy": 0.3},
        {"event": "summary", "strategy": "gossip", "steps": 50, "test_accuracy": 0.3},
        {"event": "summary", "steps": 10},
        {"step": 60, "test_accuracy": 0.9},
        "[1, 2]",
    )
    report = steps_to_target(lines, 0.7)
    rows = {r.strategy: r for r in report.rows}
    assert (rows["local"].steps_to_target, rows["local"].upper_bound) == (900, True)
    assert rows["gossip"].steps_to_target is None
    assert rows["gossip"].note == "not reached (best 0.3)"
    assert rows["unknown"].runs == 2  # a summary without strategy and trailing records
    assert report.problems == (
        "line 1: not JSON, skipped",
        "line 5: summary has no 'strategy'; counted as 'unknown'",
        "line 5: summary lacks numeric 'steps' or 'test_accuracy'",
        "line 7: not a JSON object, skipped",
        "1 accuracy record(s) after the last summary have no strategy; counted as 'unknown'",
    )
    assert "<= 900" in render_convergence(report)


def test_records_with_strategy_and_multiple_runs():
    lines = _lines(
        {"strategy": "gossip", "step": 10, "test_accuracy": 0.8},
        {"event": "summary", "strategy": "gossip", "steps": 10, "test_accuracy": 0.8},
        {"step": 5, "test_accuracy": 0.9},
        {"event": "summary", "strategy": "gossip", "steps": 5, "test_accuracy": 0.9},
    )
    (row,) = steps_to_target(lines, 0.75).rows
    assert (row.steps_to_target, row.runs, row.note) == (5, 2, "fewest over 2 runs")


def test_read_metrics_file_and_report_section(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(LOG) + "\n")
    report = read_metrics(path, 0.7)
    prof = Profile("t", 8, "cpu", 0.1, 0.1, 0.0, 8, (Bucket(0, 8, 0.1),))
    text = render_markdown(plan(prof, CommModel(0, 0), sizes=[2]), convergence=report)
    assert "| allreduce | 200 | 0.74 | 1 |  |" in text
    with pytest.raises(ValueError, match="metrics file .* does not exist"):
        read_metrics(tmp_path / "missing.jsonl", 0.7)
    with pytest.raises(ValueError, match="metrics file .* is a directory"):
        read_metrics(tmp_path, 0.7)

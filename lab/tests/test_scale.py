"""The scale studies (``python -m lab scale-efficiency``, ``scale-jitter``,
``scale-clock-check``) run tiny: fields and their relations, no thresholds on the figures
(those are the study's: docs/scale.md, lab/records/scale/)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from lab.studies import scale_clock_check, scale_efficiency, scale_jitter

RECORDS = Path(__file__).resolve().parents[1] / "records" / "scale"


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]


def test_a_tiny_efficiency_study_resumes_and_feeds_the_planner(tmp_path, capsys):
    out = tmp_path / "eff.jsonl"
    argv = ["--sizes", "4", "--partitions", "sorted", "--contenders", "allreduce,gossip",
            "--samples", "6200", "--epochs", "1", "--out", str(out)]  # fmt: skip
    threads = torch.get_num_threads()
    try:
        assert scale_efficiency.main(argv) == 0
        first = lines(capsys)
        assert scale_efficiency.main(argv) == 0  # every run is in the file: nothing runs
        assert lines(capsys) == []
    finally:
        torch.set_num_threads(threads)
    assert [r["contender"] for r in first] == ["allreduce", "gossip"]
    for r in first:
        assert r["global_batch"] == 1024 // 4 * 4 and len(r["accuracy_by_epoch"]) == 1
        assert r["accuracy_steps"][-1][1] == r["accuracy_by_epoch"][-1]
    assert first[0]["max_distance"] == 0.0 < first[1]["max_distance"]  # allreduce: one model
    metrics = tmp_path / "m.jsonl"
    table = ["--table", str(out), "--sizes", "4", "--partitions", "sorted"]
    assert scale_efficiency.main([*table, "--metrics-out", str(metrics)]) == 0
    summaries = [json.loads(x) for x in metrics.read_text().splitlines() if "summary" in x]
    assert [(s["strategy"], s["size"]) for s in summaries] == [("allreduce", 4), ("gossip", 4)]
    assert scale_efficiency.main(table) == 0
    assert "| 4 | " in capsys.readouterr().out


def test_a_tiny_jitter_study_gives_ratios_to_its_own_noiseless_step(tmp_path, capsys):
    out = tmp_path / "j.jsonl"
    argv = ["--sizes", "8", "--contenders", "allreduce,gossip-lag2", "--steps", "30"]
    assert scale_jitter.main([*argv, "--out", str(out)]) == 0
    recs = lines(capsys)
    assert len(recs) == 6 and [r["condition"] for r in recs[:3]] == [
        "none",
        "noise5",
        "straggler2x",
    ]
    for r in recs:
        base = next(
            x for x in recs if x["contender"] == r["contender"] and x["condition"] == "none"
        )
        assert math.isclose(r["vs_none"], r["mean_step_s"] / base["mean_step_s"])
    assert recs[2]["vs_none"] > 1.5  # allreduce waits for the straggler every step
    assert scale_jitter.main(["--table", str(out)]) == 0
    assert "| 8 | " in capsys.readouterr().out


def test_the_clock_check_reads_the_recorded_launches(capsys):
    assert scale_clock_check.main([str(RECORDS / "clock-check")]) == 0
    check = json.loads(capsys.readouterr().out)
    assert [r["contender"] for r in check["rows"]] == list(scale_clock_check.CONTENDERS)
    for r in check["rows"]:
        assert r["measured_ratio"] == r["measured_s"][1] / r["measured_s"][0]
        assert r["exchange_factor"] > 0 and r["plain_s"][1] > r["plain_s"][0]


def test_accuracy_by_epoch_takes_the_last_evaluation_of_each_epoch():
    import doctest

    assert doctest.testmod(scale_efficiency).failed == 0
    assert scale_efficiency.by_epoch([[23, 0.1], [46, 0.2], [92, 0.3], [95, 0.4]], 95) == [0.4]

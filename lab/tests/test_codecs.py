"""``python -m lab codecs``: gaps against fp32 (pure) and one tiny real study (it launches
``mpiexec -n 2 gossipgrad train`` per cell), resumed from its rows file."""

from __future__ import annotations

import json

import pytest

from lab.bench import codecs as study

from launch import lab


def _row(mode: str, wire: str, acc: float, topology: str = "auto") -> dict:
    return {
        "task": "digits",
        "size": 8,
        "mode": mode,
        "wire": wire,
        "topology_flag": topology if mode in study.GOSSIP else "-",
        "test_accuracy": acc,
    }


def test_gaps_are_against_the_same_mode_and_topology_in_fp32():
    rows = [
        _row("param", "fp32", 0.90),
        _row("param", "fp8", 0.885),
        _row("param", "fp32", 0.80, "dissemination"),
        _row("param", "bf16", 0.81, "dissemination"),
        _row("ps", "bf16", 0.5),
    ]
    study.add_gaps(rows)
    assert [r["gap_points"] for r in rows] == [0.0, -1.5, 0.0, 1.0, None]


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_a_tiny_study_runs_and_resumes_from_its_rows(tmp_path):
    rows, md = tmp_path / "rows.jsonl", tmp_path / "c.md"
    args = ["codecs", "--tasks", "digits", "--sizes", "2", "--modes", "param,ps"]
    args += ["--wires", "fp32,fp8/noef", "--epochs", "1", "--rows", str(rows)]
    res = lab(0, [*args, "--markdown", str(md)], timeout=560)
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout.strip().splitlines()[-1])
    cells = {(r["mode"], r["wire"]): r for r in record["rows"]}
    assert set(cells) == {
        ("param", "fp32"),
        ("param", "fp8/noef"),
        ("ps", "fp32"),
        ("ps", "fp8/noef"),
    }
    assert cells[("param", "fp8/noef")]["error_feedback"] == "off"
    assert (
        cells[("param", "fp8/noef")]["bytes_per_step"]
        < 0.3 * cells[("param", "fp32")]["bytes_per_step"]
    )
    assert cells[("param", "fp32")]["gap_points"] == 0.0
    assert md.read_text().count("\n") == 6 and len(rows.read_text().splitlines()) == 4
    again = lab(0, [*args, "--timeout", "0.001"], timeout=120)  # nothing left to launch
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["rows"] == record["rows"]

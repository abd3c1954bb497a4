"""``python -m lab convergence``: the matrix's bookkeeping (pure) and one tiny real run
(it launches ``mpiexec -n 2 gossipgrad train`` per cell)."""

from __future__ import annotations

import json

import pytest

from lab.bench import convergence as conv

from launch import lab


def _row(mode: str, seed: int, acc: float, **kw) -> dict:
    return {
        "task": "digits",
        "size": 8,
        "mode": mode,
        "seed": seed,
        "test_accuracy": acc,
        "consensus_distance": kw.get("dist", 0.0),
        "max_consensus_distance": 0.01,
        "syncs": kw.get("syncs", 0),
        "sync_bytes": kw.get("sync_bytes", 0.0),
        "bytes_per_step": 1e5,
        "step_s": 0.01,
        "monitor_s_per_call": None,
        "monitor_sketch_s_per_call": None,
    }


def test_gaps_are_per_seed_and_summarized_over_seeds():
    rows = [
        _row("allreduce", 0, 0.90),
        _row("grad", 0, 0.88, dist=0.3),
        _row("allreduce", 1, 0.92),
        _row("grad", 1, 0.91, dist=0.1, syncs=2, sync_bytes=4e6),
    ]
    conv.add_gaps(rows)
    assert [r["gap_points"] for r in rows] == [0.0, -2.0, 0.0, -1.0]
    grad = next(r for r in conv.summarize(rows) if r["mode"] == "grad")
    assert grad["seeds"] == 2 and grad["gap_points"] == -1.5
    assert (grad["gap_min"], grad["gap_max"]) == (-2.0, -1.0)
    assert grad["consensus_distance"] == pytest.approx(0.2) and grad["syncs"] == 1
    table = conv.markdown_table({"summary": conv.summarize(rows)})
    assert "| digits | 8 | grad | 0.8950 | -1.50 (-2.00..-1.00) | 0.2 |" in table


def test_cell_flags_select_the_mode_and_evaluate_once():
    cmd = conv.train_command("templates", 4, "grad", 7, 3, "m.jsonl", ["--lr", "0.2"])
    text = " ".join(cmd)
    assert "-n 4" in text and "--dataset templates" in text and "--epochs 7 --eval-every 7" in text
    assert "--mix grad --sync off --lr 0.2" in text and "--seed 3" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sizes", "4,x"], "--sizes '4,x': expected comma-separated rank counts"),
        (["--modes", "grad,fast"], "--modes: unknown fast"),
        (["--tasks", "mnist"], "--tasks: unknown mnist"),
        (["--seeds", "a"], "--seeds 'a': expected comma-separated integers"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(args, message):
    res = lab(0, ["convergence", *args], timeout=60)
    assert res.returncode != 0 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_tiny_matrix_under_mpiexec(tmp_path):
    md = tmp_path / "conv.md"
    res = lab(
        0,
        [
            "convergence",
            "--tasks",
            "digits",
            "--sizes",
            "3",
            "--modes",
            "allreduce,grad-adaptive",
            "--epochs",
            "2",
            "--extra",
            "--sync-threshold 1e-9 --monitor-every 2",
            "--markdown",
            str(md),
        ],
        timeout=380,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout.strip().splitlines()[-1])
    allreduce, adaptive = record["rows"]
    assert allreduce["mode"] == "allreduce" and allreduce["consensus_distance"] == 0
    assert allreduce["gap_points"] == 0 and allreduce["syncs"] == 0
    assert adaptive["topology"] == "base2" and adaptive["monitor_calls"] > 0  # auto at 3
    assert adaptive["syncs"] > 0  # a threshold of 1e-9: every estimate averages
    steps = adaptive["steps"]
    sync_each = 2 * 2 / 3 * 8 * adaptive["model_bytes"] / 4  # ring x float64 average
    assert adaptive["sync_bytes"] == pytest.approx(adaptive["syncs"] * sync_each)
    assert adaptive["bytes_per_step"] == pytest.approx(
        adaptive["exchange_bytes_per_step"] + adaptive["sync_bytes"] / steps, rel=1e-5
    )
    assert adaptive["gap_points"] == pytest.approx(
        100 * (adaptive["test_accuracy"] - allreduce["test_accuracy"]), abs=0.01
    )
    assert "| digits | 3 | grad-adaptive |" in md.read_text()

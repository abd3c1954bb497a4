"""Sufficient factors under a real mpiexec: the check functions (odd and even sizes), the
digits job at 4 ranks with factors on (gossip --mix grad and allreduce), and bad input."""

from __future__ import annotations

import json

import pytest

from launch import gossipgrad, run_check_module

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
@pytest.mark.parametrize("size", [3, 4, 5])
def test_factor_checks_under_mpiexec(size):
    run_check_module("factor_checks", size, timeout=180)


@pytest.mark.timeout(330)
@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "ps"])
def test_digits_at_four_ranks_with_factors_on(tmp_path, strategy):
    metrics = tmp_path / "m.jsonl"
    mix = [] if strategy == "ps" else ["--mix", "grad"]  # ps always sends gradients
    res = gossipgrad(
        4,
        [
            "train",
            "--sufficient-factors",
            "on",
            *mix,
            "--strategy",
            strategy,
            "--no-progress",
            "--metrics-out",
            str(metrics),
        ],
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(line) for line in open(metrics, encoding="utf-8")]
    summary = records[-1]
    assert summary["event"] == "summary" and summary["size"] == 4
    assert summary["test_accuracy"] >= 0.95, summary
    tables = [r for r in records if r.get("event") == "sufficient_factors"]
    assert len(tables) == 1 and tables[0]["step"] == 0, tables
    layers = tables[0]["layers"]
    # the MLP's three Linear layers, batch 32, every one sent as factors
    assert [(r["layer"], r["rows"], r["form"]) for r in layers] == [
        ("1", 32, "factors"),
        ("3", 32, "factors"),
        ("5", 32, "factors"),
    ]
    # what is sent: every layer's factors, and the biases (138 floats) in a bucket
    biases = (128 + 128 + 10) * 4 * (1 if strategy == "gossip" else 2 * 3 / 4)
    expect = sum(r["factor_bytes"] for r in layers) + biases
    assert summary["bytes_sent_per_step"] == pytest.approx(expect)
    # rank 0 prints the table: a heading and one line per layer, once
    assert res.stderr.count(f"sufficient factors (on, {strategy}, 4 ranks)") == 1, res.stderr
    assert res.stderr.count(" -> factors") == 3, res.stderr


@pytest.mark.timeout(150)
def test_factors_with_mix_param_is_a_one_line_error():
    res = gossipgrad(2, ["train", "--sufficient-factors", "on", "--no-progress"], timeout=120)
    assert res.returncode != 0
    assert "Error: --sufficient-factors on needs --mix grad" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr

"""``python -m lab stragglers``: flags, and a tiny run under mpiexec (fields and counts;
no timing thresholds: the figures are the study's, lab/records/stragglers.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gossipgrad.settings import Settings
from lab.bench.stragglers import markdown_table, parse_contenders, parse_slow
from lab.cli import lab as lab_cli

from launch import lab


def test_contenders_and_slow_rank_parse_and_name_their_flag():
    assert parse_contenders("gossip:2, allreduce") == [("gossip", 2), ("allreduce", 0)]
    for bad in ("gossip:x", "ddp,ddp", ""):
        with pytest.raises(ValueError, match="--contenders"):
            parse_contenders(bad)
    assert parse_slow(None, 8, Settings()) == (7, 2.0)
    assert parse_slow(None, 8, Settings(inject_slow=(3, 1.5))) == (3, 1.5)
    assert parse_slow("2:4", 8, Settings(inject_slow=(3, 1.5))) == (2, 4.0)
    with pytest.raises(ValueError, match="--slow '2'"):
        parse_slow("2", 8, Settings())


def test_bad_contenders_are_a_usage_error():
    result = CliRunner().invoke(lab_cli, ["stragglers", "--contenders", "gossip:two"])
    assert result.exit_code == 2 and "--contenders" in result.output, result.output


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_tiny_run_reports_every_contender_with_and_without_the_slow_rank(tmp_path):
    md = tmp_path / "s.md"
    out = lab(
        2,
        [
            "stragglers",
            "--contenders",
            "gossip:0,gossip:2,allreduce",
            "--slow",
            "1:3",
            "--width",
            "64",
            "--layers",
            "2",
            "--batch",
            "8",
            "--steps",
            "10",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--markdown",
            str(md),
        ],
        timeout=220,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rec = json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1])
    assert (rec["size"], rec["slow_rank"], rec["factor"]) == (2, 1, 3.0), rec
    rows = {r["contender"]: r for r in rec["results"]}
    assert list(rows) == ["gossip --max-lag 0", "gossip --max-lag 2", "allreduce"], rows
    for r in rows.values():
        assert r["blocks"] == 2 and r["samples_per_s"] > 0 and r["samples_per_s_slow"] > 0, r
        assert r["ratio"] == pytest.approx(
            r["samples_per_s_slow"] / r["samples_per_s"], rel=1e-3
        ), r
        assert 0 <= r["skipped_slow"] <= 1 and 0 <= r["slow_rank_skipped"] <= 1, r
    for lockstep in ("gossip --max-lag 0", "allreduce"):  # nobody can skip in lockstep
        assert rows[lockstep]["skipped_slow"] == rows[lockstep]["skipped_no_slow"] == 0
    lockstep = rows["gossip --max-lag 0"]  # the same ratio, rounded from two quotients
    assert lockstep["slow_vs_lockstep"] == pytest.approx(lockstep["ratio"], abs=2e-4)
    assert md.read_text() == markdown_table(rec)
    assert "| gossip --max-lag 2 |" in md.read_text()

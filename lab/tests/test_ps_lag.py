"""``python -m lab ps-lag``: a tiny run under mpiexec (fields, no timing thresholds) and
argument errors; ``python -m lab compare-losses`` on two small metrics files."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lab.bench.ps_lag import parse_slow
from lab.cli import lab as lab_cli

from launch import bench_record, lab, positive


@pytest.mark.parametrize(
    "args,message",
    [
        (["--lags", "0,x"], "--lags"),
        (["--bucket-mb", "0"], "--bucket-mb"),
        (["--slow-every", "0"], "--slow-every"),
    ],
)
def test_bad_flags_are_usage_errors(args, message):
    result = CliRunner().invoke(lab_cli, ["ps-lag", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_slow_names_the_flag_and_the_ranks_there_are():
    assert parse_slow("3:2", 8) == (3, 2.0)
    with pytest.raises(ValueError, match=r"--slow '3:2': rank 3 does not exist at 2 ranks"):
        parse_slow("3:2", 2)
    with pytest.raises(ValueError, match=r"--slow '3': expected RANK:FACTOR"):
        parse_slow("3", 8)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("rotate", [False, True])
def test_ps_lag_reports_each_lag_with_and_without_the_straggler(rotate):
    rec = bench_record(
        lab(
            3,
            [
                "ps-lag",
                "--lags",
                "0,1",
                "--slow",
                "2:2",
                "--width",
                "64",
                "--layers",
                "2",
                "--steps",
                "3",
                "--reps",
                "1",
                "--warmup",
                "0",
                *(["--rotate"] if rotate else []),
            ],
            timeout=280,
        )
    )
    assert rec["bench"] == "ps-lag" and rec["size"] == 3 and rec["slow"] == [2, 2.0]
    assert rec["rotate"] is rotate and (
        positive(rec["compute_s"]) if rotate else rec["compute_s"] is None
    )
    assert [(r["max_lag"], r["straggler"]) for r in rec["results"]] == [
        (0, False),
        (0, True),
        (1, False),
        (1, True),
    ]
    assert all(positive(r["step_s"]) and positive(r["samples_per_s"]) for r in rec["results"])
    assert set(rec["relative"]) == {"0", "1"} and rec["lag_over_first_lag"]["0"] == 1.0


def test_compare_losses_reports_the_largest_per_step_difference(tmp_path):
    def write(name, losses, acc):
        path = tmp_path / name
        recs = [{"event": "log", "step": i + 1, "loss": x} for i, x in enumerate(losses)]
        recs.append({"event": "summary", "test_accuracy": acc, "strategy": name[:-6]})
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return str(path)

    a = write("ps.jsonl", [2.0, 1.5, 1.25], 0.9)
    b = write("allreduce.jsonl", [2.0, 1.5 + 3e-7, 1.25], 0.91)
    out = lab(0, ["compare-losses", a, b], timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads(out.stdout)
    assert rec["steps"] == 3 and rec["at_step"] == 2
    assert rec["max_abs_diff"] == pytest.approx(3e-7)
    assert rec["test_accuracy"] == [0.9, 0.91] and rec["strategy"] == ["ps", "allreduce"]

"""Held-out ``plan-validate`` under a real ``mpiexec``: the report's fields and the
prediction's arithmetic (no timing targets), a saved calibration reused, the refusals, and
the host share of ranks bound one per core."""

from __future__ import annotations

import json
import math
import os
import re
import sys

import pytest

from launch import mpiexec, run

# Generous deadlines: on a shared 2-core machine at load 50 a bare `--help` took 60 s.
pytestmark = [pytest.mark.mpi, pytest.mark.timeout(1200)]
PLAN_VALIDATE = [sys.executable, "-m", "lab", "plan-validate"]
TINY = [
    "--hidden",
    "16",
    "--bucket-mb",
    "1",
    "--only-overlap",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--profile-steps",
    "2",
    "--net-max-mb",
    "8",
    "--net-reps",
    "3",
    "--calibrate-pairs",
    "1",
    "--passes",
    "1",
    "--calibrate-steps",
    "2",
    "--confirm-rounds",
    "1",
]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _share(host: dict) -> float:
    return max(1.0, host["ranks_per_host"] / host["cores"])


def test_calibrate_at_two_predict_three_then_reuse_the_calibration(tmp_path):
    out = tmp_path / "oos.json"
    proc = run(
        [
            mpiexec(),
            "-n",
            "3",
            *PLAN_VALIDATE,
            *TINY,
            "--calibrate-size",
            "2",
            "--predict-sizes",
            "3",
            "--out",
            str(out),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for key in ("oos_mape_pct", "oos_worst_pct", "oos_regret"):
        assert _finite(report[key]), key
    assert report["oos_tau_min"] is None or -1 <= report["oos_tau_min"] <= 1
    assert _finite(report["summary"]["mape_pct"])  # today's in-sample score beside them
    assert _finite(report["summary_oos_spare_core"]["mape_pct"])
    cal = report["frozen_calibration"]
    assert (cal["size"], cal["link"]) == (2, "loopback") and cal["rounds"] == 2
    ins, held = report["launches"]
    assert ins["size"] == 2 and not ins.get("held_out")
    assert held["size"] == 3 and held["held_out"] and held["calibrated_at"]["size"] == 2
    # Frozen: exactly the in-sample launch's calibration rounds, nothing else.
    assert cal["compute_factor"] == pytest.approx(ins["calibration"]["compute_factor"])
    rows = [r for r in report["configs"] if r.get("held_out")]
    assert {r["size"] for r in rows} == {3} and len(rows) == 2
    # The compute-only prediction at size 3 is the profile x compute factor x host share.
    r = _share(held["host"]) / _share(cal["host"])
    assert held["host"]["share_ratio"] == pytest.approx(r)
    check = held["compute_check"]
    assert check["predicted_s"] == pytest.approx(check["profile_s"] * cal["compute_factor"] * r)
    assert set(report["oos_per_size"]) == {"3"}

    again = run(
        [
            mpiexec(),
            "-n",
            "3",
            *PLAN_VALIDATE,
            *TINY,
            "--calibration",
            str(out),
            "--predict-sizes",
            "3",
        ],
        timeout=450,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    reused = json.loads(again.stdout)
    assert reused["frozen_calibration"] == cal
    assert [lc["size"] for lc in reused["launches"]] == [3]  # nothing calibrated here
    check = reused["launches"][0]["compute_check"]  # its own profile, the file's factors
    assert check["predicted_s"] == pytest.approx(check["profile_s"] * cal["compute_factor"] * r)

    own = run(
        [
            mpiexec(),
            "-n",
            "2",
            *PLAN_VALIDATE,
            *TINY,
            "--calibration",
            str(out),
            "--predict-sizes",
            "2",
        ],
        timeout=300,
    )
    assert own.returncode != 0
    assert "the calibration is fitted at size 2 on loopback" in own.stderr, own.stderr[-2000:]
    other = run(
        [*PLAN_VALIDATE, "--calibration", str(out), "--hidden", "64", "--predict-sizes", "3"],
        timeout=240,
    )
    assert other.returncode != 0
    assert "--calibration" in other.stderr and "'hidden': 16" in other.stderr, other.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--predict-sizes", "4"], "needs exactly one of --calibrate-size"),
        (["--calibrate-size", "2"], "need --predict-sizes"),
        (["--sizes", "2", "--predict-sizes", "4", "--calibrate-size", "2"], "pass one of them"),
        (["--calibrate-size", "2", "--predict-sizes", "2,4"], "2 is the calibration size"),
        (
            ["--calibrate-size", "2", "--predict-sizes", "4", "--calibrate-allreduce"],
            "not with --predict-sizes",
        ),
    ],
)
def test_held_out_flags_that_do_not_go_together_are_refused(args, message):
    proc = run([*PLAN_VALIDATE, *args], timeout=240)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_a_predicted_size_above_the_launch_is_refused():
    proc = run(
        [mpiexec(), "-n", "2", *PLAN_VALIDATE, "--calibrate-size", "2", "--predict-sizes", "4"],
        timeout=240,
    )
    assert proc.returncode != 0
    assert "launch at the largest" in proc.stderr, proc.stderr[-2000:]


PROBE = """
from gossipgrad import runtime
comm = runtime.init()
print(f"rank={comm.rank} share={runtime.host_share(comm)} own={runtime.usable_cores()}",
      flush=True)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binding needs 2 cores")
def test_ranks_bound_one_per_core_count_the_cores_of_all_of_them():
    """``mpiexec -bind-to core``: each rank sees one core, the host has both; the share is
    (2 cores, 2 ranks), one core per rank, not half a core."""
    for bind in ([], ["-bind-to", "core"]):
        proc = run([mpiexec(), "-n", "2", *bind, sys.executable, "-c", PROBE], timeout=240)
        assert proc.returncode == 0, proc.stderr
        shares = re.findall(r"share=\((\d+), (\d+)\)", proc.stdout)
        cores = len(os.sched_getaffinity(0)) if not bind else 2
        assert shares == [(str(cores), "2")] * 2, (bind, proc.stdout)
        assert re.findall(r"own=(\d+)", proc.stdout) == [str(cores if not bind else 1)] * 2

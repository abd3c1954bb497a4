"""Smoke test of ``plan-validate`` under ``mpiexec -n 2``: the JSON's fields, no timing. On a
loaded host netfit's ping-pong can come out flat; netfit sweeps again then
(``PINGPONG_SWEEPS``), so the smoke test does not depend on a quiet host."""

from __future__ import annotations

import json
import math
import sys

import pytest

from launch import mpiexec, run

pytestmark = pytest.mark.timeout(300)
PLAN_VALIDATE = [sys.executable, "-m", "lab", "plan-validate"]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_plan_validate_smoke(tmp_path):
    out = tmp_path / "pv.json"
    cmd = [
        mpiexec(),
        "-n",
        "2",
        *PLAN_VALIDATE,
        "--hidden",
        "32",
        "--bucket-mb",
        "1",
        "--only-overlap",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--profile-steps",
        "3",
        "--net-max-mb",  # 4 MiB and the median of 10 reps: a loaded host's descheduled
        "4",  # reps do not flatten the line (and netfit sweeps again if they do)
        "--net-reps",
        "10",
        "--passes",
        "2",
        "--calibrate-steps",
        "2",
        "--out",
        str(out),
    ]
    proc = run(cmd, timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == json.loads(out.read_text())
    assert report["size"] == 2 and report["passes"] == 2
    configs = report["configs"]
    assert {c["strategy"] for c in configs} == {"gossip", "allreduce"}
    for c in configs:
        for key in (
            "predicted_s",
            "measured_s",
            "predicted_exposed_comm_s",
            "measured_exposed_comm_s",
            "predicted_spare_core_s",
        ):
            assert _finite(c[key]), (key, c)
        assert c["predicted_s"] > 0 and c["measured_s"] > 0
        assert len(c["pass_s"]) == 2 and c["min_s"] <= c["measured_s"] <= c["max_s"]
    s = report["summary"]
    for key in (
        "mape_pct",
        "worst_abs_pct",
        "regret",
        "mean_abs_compute_error_s",
        "mean_abs_exposed_comm_error_s",
    ):
        assert _finite(s[key]), key
    assert s["kendall_tau"] is None or -1 <= s["kendall_tau"] <= 1
    assert s["regret"] >= 1
    assert s["dominant_error"] in ("compute", "communication")
    assert _finite(report["compute_check"]["error_pct"])
    host, cal = report["host"], report["calibration"]
    assert host["ranks_per_host"] == 2 and host["cores"] >= 1 and host["overlap_s"] >= 0
    # Calibrated before each of the 2 passes: 2 rounds (compute-only, blocking, s0, s1) per
    # strategy each time.
    assert len(cal["runs"]) == 2 * 2 * 2 and len(cal["per_pass"]) == 2
    assert all({"local_s", "blocking_s", "s0_s", "s1_s"} <= set(r) for r in cal["runs"])
    assert cal["compute_factor"] > 0 and set(cal["exchange_factor"]) == {"gossip", "allreduce"}
    check = report["compute_check"]
    assert check["predicted_s"] == pytest.approx(
        check["profile_s"] * sum(c["compute_factor"] for c in cal["per_pass"]) / 2
    )
    for c in configs:  # each pass predicted from its own calibration; the row has the mean
        assert len(c["pass_predicted_s"]) == 2
        assert c["predicted_s"] == pytest.approx(sum(c["pass_predicted_s"]) / 2)
    if host["spare_core"]:  # overlap can hide: no hand-off charged
        assert all(c["predicted_uncalibrated_s"] == c["predicted_spare_core_s"] for c in configs)
    else:
        assert cal["overlap_s"] == host["overlap_s"] and host["handoff_s"] == 0
        assert cal["stale_s_per_byte"] == host["stale_s_per_byte"]
        assert all(c["predicted_uncalibrated_s"] >= c["predicted_spare_core_s"] for c in configs)
    assert _finite(report["summary_uncalibrated"]["mape_pct"])
    assert _finite(report["summary_spare_core"]["mape_pct"])

    merged = run([*PLAN_VALIDATE, "--merge", str(out), "--merge", str(out)], timeout=60)
    assert merged.returncode == 0, merged.stderr
    m = json.loads(merged.stdout)
    assert len(m["configs"]) == 2 * len(configs)
    assert _finite(m["summary"]["mape_pct"])
    assert _finite(m["summary_spare_core"]["mape_pct"])


def test_plan_validate_at_two_sizes_in_one_launch(tmp_path):
    """--sizes 2,3 under mpiexec -n 3: size 2 runs on ranks 0-1 while rank 2 waits, then
    size 3 on all; one report scores both, with the regret taken per size. (Messages up to
    4 MiB: with 3 ranks on 2 cores, 64 KiB ping-pongs are all latency and jitter, and the
    fit's bandwidth can come out negative.)"""
    cmd = [
        mpiexec(),
        "-n",
        "3",
        *PLAN_VALIDATE,
        "--hidden",
        "16",
        "--bucket-mb",
        "1",
        "--only-overlap",
        "--strategies",
        "gossip",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--profile-steps",
        "2",
        "--net-max-mb",  # 4 MiB and the median of 10 reps: a loaded host's descheduled
        "4",  # reps do not flatten the line (and netfit sweeps again if they do)
        "--net-reps",
        "10",
        "--calibrate-pairs",
        "1",
        "--passes",
        "1",
        "--calibrate-steps",
        "2",
        "--sizes",
        "2,3",
    ]
    proc = run(cmd, timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["sizes"] == [2, 3]
    assert [lc["size"] for lc in report["launches"]] == [2, 3]
    # One host: the ranks that take part are the ranks on it (the waiting one is not).
    assert [lc["host"]["ranks_per_host"] for lc in report["launches"]] == [2, 3]
    assert sorted({c["size"] for c in report["configs"]}) == [2, 3]
    per_size = report["summary"]["regret_per_size"]
    assert set(per_size) == {"2", "3"} and all(v["regret"] >= 1 for v in per_size.values())
    assert report["summary"]["regret"] == max(v["regret"] for v in per_size.values())


def test_plan_validate_refuses_a_size_above_the_launch():
    proc = run([mpiexec(), "-n", "2", *PLAN_VALIDATE, "--sizes", "2,4"], timeout=60)
    assert proc.returncode != 0
    assert "each size must be in 2..2" in proc.stderr, proc.stderr[-2000:]


def test_a_failure_on_the_smaller_size_ends_the_whole_launch():
    """--sizes 2,3 with an unknown --arch: ranks 0-1 fail inside the size-2 run while rank 2
    waits for them in a collective (for up to an hour). The failure must end every rank at
    once, non-zero, naming the cause."""
    proc = run(
        [mpiexec(), "-n", "3", *PLAN_VALIDATE, "--arch", "nosuch", "--sizes", "2,3"], timeout=90
    )
    assert proc.returncode != 0
    assert "unknown model 'nosuch'" in proc.stderr, proc.stderr[-2000:]

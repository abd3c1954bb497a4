"""Tier 3: the same check functions as tests/inprocess/test_local_world.py under a real mpiexec.

One launch per size runs every check (tests/support/multirank/run_checks.py); each check is then
reported as its own test: passed, failed, or skipped where it does not apply to that size.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from launch import mpiexec, run
from multirank import checks

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def launched():
    """``get(size)``: the output of ``run_checks.py`` on ``size`` ranks, launched once."""
    cache: dict[int, subprocess.CompletedProcess | AssertionError] = {}

    def get(size: int) -> subprocess.CompletedProcess:
        if size not in cache:
            try:
                cache[size] = run(
                    [
                        mpiexec(),
                        "-n",
                        str(size),
                        sys.executable,
                        "tests/support/multirank/run_checks.py",
                    ],
                    timeout=180,
                )
            except AssertionError as exc:  # past the deadline: fail every check of the size
                cache[size] = exc
        out = cache[size]
        if isinstance(out, AssertionError):
            raise out
        return out

    return get


@pytest.mark.timeout(200)
@pytest.mark.parametrize("size", [4, 3, 5])
@pytest.mark.parametrize("check", checks.ALL, ids=lambda c: c.__name__)
def test_check_under_mpiexec(launched, check, size):
    out = launched(size)
    assert out.returncode == 0, out.stdout + out.stderr
    name = check.__name__
    verdicts = [
        line
        for line in out.stdout.splitlines()
        if line.startswith((f"PASS {name} ", f"SKIP {name} "))
    ]
    want = "SKIP" if checks.skipped_at(check, size) else "PASS"
    assert len(verdicts) == 1 and verdicts[0].startswith(f"{want} {name} on {size} ranks"), (
        f"{name} on {size} ranks: expected {want}, got {verdicts}\n{out.stdout}"
    )
    if want == "SKIP":
        pytest.skip(verdicts[0])

"""Bounded lag under a real mpiexec: the checks of tests/multirank/lag_checks.py (exact mean
with a slow rank, the lag bound, close() matching every receive posted ahead)."""

from __future__ import annotations

import sys

import pytest

from launch import mpiexec, run
from multirank import lag_checks

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(330)
@pytest.mark.parametrize("size", [4, 3])
def test_lag_checks_under_mpiexec(size):
    out = run([mpiexec(), "-n", str(size), sys.executable, "tests/multirank/run_lag_checks.py"],
              timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for check in lag_checks.ALL:
        assert f"PASS {check.__name__} on {size} ranks\n" in out.stdout, out.stdout

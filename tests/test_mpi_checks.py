"""Tier 3: the same check functions as tests/test_local_world.py under a real mpiexec."""

from __future__ import annotations

import sys

import pytest

from launch import mpiexec, run
from multirank import checks

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
@pytest.mark.parametrize("size", [4, 3, 5])
def test_checks_under_mpiexec(size):
    out = run([mpiexec(), "-n", str(size), sys.executable, "tests/multirank/run_checks.py"],
              timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    for check in checks.ALL:
        assert f"PASS {check.__name__} on {size} ranks\n" in out.stdout, out.stdout

"""What a user reads between backward and step, and the overlapped step order, under a real
mpiexec: the checks of tests/support/multirank/overlap_checks.py at an odd size and 4."""

from __future__ import annotations

import pytest

from launch import run_check_module

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(330)
@pytest.mark.parametrize("size", [3, 4])
def test_overlap_checks_under_mpiexec(size):
    # ranks outnumber the cores on a test machine: waits yield instead of spinning
    run_check_module("overlap_checks", size, 300, "--yield-waits")

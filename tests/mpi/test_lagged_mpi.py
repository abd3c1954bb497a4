"""Bounded lag under a real mpiexec: the checks of tests/support/multirank/lag_checks.py (exact mean
with a slow rank, the lag bound, close() matching every receive posted ahead)."""

from __future__ import annotations

import pytest

from launch import run_check_module

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(330)
@pytest.mark.parametrize("size", [4, 3])
def test_lag_checks_under_mpiexec(size):
    # ranks outnumber the cores on a test machine: waits yield instead of spinning
    run_check_module("lag_checks", size, 300, "--yield-waits")

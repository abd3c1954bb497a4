"""The consensus monitor's checks (tests/support/multirank/monitor_checks.py) under a real
mpiexec; in-process and the options: tests/inprocess/test_monitor.py."""

from __future__ import annotations

import pytest

from launch import run_check_module


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize("size", [4, 5])
def test_monitor_checks_under_mpiexec(size):
    run_check_module("monitor_checks", size, timeout=180)

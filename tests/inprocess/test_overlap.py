"""What a user reads between backward and step, and the overlapped step order, on the thread
world: the checks of tests/support/multirank/overlap_checks.py at 2-8 ranks."""

from __future__ import annotations

import pytest

from gossipgrad.comm.local import run_ranks

from multirank import overlap_checks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [2, 3, 5, 8])
@pytest.mark.parametrize("check", overlap_checks.ALL, ids=lambda c: c.__name__)
def test_overlap_check_in_process(size, check):
    run_ranks(size, check, timeout=90, comm_timeout=30)

"""Bounded lag (``--max-lag``) in-process: the checks of tests/support/multirank/lag_checks.py on
the thread world, plus what needs no communication."""

from __future__ import annotations

import pytest

from gossipgrad.comm.local import run_ranks
from gossipgrad.options import ExchangeOptions

from multirank import lag_checks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("check", lag_checks.ALL, ids=lambda c: c.__name__)
def test_lag_check_in_process(size, check):
    run_ranks(size, check, timeout=90, comm_timeout=30)


@pytest.mark.parametrize("strategy", ["allreduce", "horovod", "ddp"])
def test_max_lag_is_refused_with_collective_strategies(strategy):
    with pytest.raises(
        ValueError,
        match=rf"max_lag=2 does not apply to strategy='{strategy}' \(its allreduce waits for "
        r"every rank at every step; bounded lag is gossip's\); drop it",
    ):
        ExchangeOptions(strategy=strategy, max_lag=2)


def test_max_lag_is_accepted_with_gossip_and_staleness():
    assert ExchangeOptions(max_lag=2, staleness=1, mix="grad").max_lag == 2
    assert ExchangeOptions(strategy="allreduce", max_lag=0).max_lag == 0

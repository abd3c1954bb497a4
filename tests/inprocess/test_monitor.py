"""The consensus monitor and adaptive averaging on the thread world, and their options (the
same checks under mpiexec: tests/mpi/test_monitor_mpi.py)."""

from __future__ import annotations

import logging

import pytest

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ExchangeOptions, Sync

from multirank import monitor_checks
from multirank.monitor_checks import _train


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [1, 2, 4, 5, 8])
@pytest.mark.parametrize("check", monitor_checks.ALL, ids=lambda c: c.__name__)
def test_monitor_check_in_process(size, check):
    run_ranks(size, check, timeout=90, comm_timeout=30)


def test_auto_is_adaptive_for_gradient_mixing_only():
    assert ExchangeOptions(mix="grad").adaptive
    assert not ExchangeOptions(mix="param").adaptive
    assert not ExchangeOptions(mix="grad", strategy="allreduce").adaptive
    assert ExchangeOptions(mix="param", sync="adaptive").adaptive
    assert not ExchangeOptions(mix="grad", sync="off").adaptive
    assert (
        ExchangeOptions().sync is Sync.AUTO and ExchangeOptions().bind(False).mix.value == "param"
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"sync": "adaptive", "strategy": "allreduce"}, "--sync adaptive does not apply to"),
        (
            {"mix": "grad", "monitor_every": 0},
            "--sync adaptive (the default with --mix grad) needs --monitor-every >= 1",
        ),
        ({"sync": "sometimes"}, "unknown sync 'sometimes' (--sync)"),
        ({"sync_threshold": 0.0}, "--sync-threshold must be > 0"),
        ({"monitor_every": -1}, "--monitor-every must be >= 0"),
    ],
)
def test_bad_sync_options_name_the_flag(flags, message, cli_names):
    with pytest.raises(ValueError) as err:
        TrainConfig.from_flags(**flags)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_sync_off_without_a_monitor_is_allowed():
    opts = TrainConfig.from_flags(mix="grad", sync="off", monitor_every=0).exchange
    assert not opts.adaptive and not opts.monitors


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sync, level", [("auto", logging.DEBUG), ("adaptive", logging.INFO)])
def test_adaptive_averages_are_news_at_info_only_to_a_caller_who_asked(sync, level, caplog):
    """``auto`` (the default with gradient mixing) averages without a line at INFO: the
    summary counts the averages, ``-v`` shows each; ``sync="adaptive"`` logs each at INFO."""

    def body(comm):
        opt = _train(comm, sync=sync, sync_threshold=1e-7, monitor_every=2)
        steps = opt.monitor.sync_steps
        opt.close()
        return steps

    with caplog.at_level(logging.DEBUG, logger="gossipgrad.engine.bucket.monitor"):
        steps = run_ranks(4, body, timeout=90)[0]
    lines = [r for r in caplog.records if "global average (sync" in r.getMessage()]
    assert steps == [2, 4, 6] and len(lines) == 3, (steps, [r.getMessage() for r in lines])
    assert {r.levelno for r in lines} == {level}

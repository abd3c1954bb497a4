"""``gossipgrad.init()`` leaves torch's threads and the application's logging alone unless
asked (``configure=True``, which the command line asks for), in one process without a
launcher (the node's share under a real mpiexec: tests/mpi/test_share_node_mpi.py)."""

from __future__ import annotations

import logging

import pytest
import torch
from click.testing import CliRunner

from gossipgrad import runtime
from gossipgrad.cli import main
from gossipgrad.startup import LAUNCHER_VARS


@pytest.fixture
def one_rank(monkeypatch):
    """No launcher in sight, and torch's threads and gossipgrad's logger put back after."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOSSIPGRAD_MPI", "0")
    monkeypatch.delenv("GOSSIPGRAD_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    logger = logging.getLogger("gossipgrad")
    saved = (torch.get_num_threads(), list(logger.handlers), logger.level, logger.propagate)
    yield logger
    threads, handlers, level, propagate = saved
    torch.set_num_threads(threads)
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


def _state(logger: logging.Logger) -> tuple:
    return torch.get_num_threads(), list(logger.handlers), logger.level, logger.propagate


def test_init_leaves_torch_threads_and_logging_alone(one_rank, monkeypatch):
    monkeypatch.setenv("GOSSIPGRAD_THREADS", "1")  # what configure would set
    torch.set_num_threads(2)
    before = _state(one_rank)
    comm = runtime.init()
    assert comm.size == 1
    assert _state(one_rank) == before


def test_init_configure_fits_threads_and_logs_with_a_rank_prefix(one_rank, monkeypatch):
    monkeypatch.setenv("GOSSIPGRAD_THREADS", "1")
    torch.set_num_threads(2)
    runtime.init(configure=True)
    assert torch.get_num_threads() == 1
    [handler] = one_rank.handlers
    assert isinstance(handler.formatter, runtime._RankFormatter)
    assert one_rank.level == logging.INFO and not one_rank.propagate


def test_verbose_configures_logging_only(one_rank):
    torch.set_num_threads(2)
    runtime.init(verbose=True)
    assert torch.get_num_threads() == 2
    assert one_rank.level == logging.DEBUG and len(one_rank.handlers) == 1


def test_the_command_line_asks_init_to_configure(monkeypatch):
    asked = {}

    def init(*args, **kwargs):
        asked.update(kwargs)
        raise SystemExit(7)  # stop before training

    monkeypatch.setattr(runtime, "init", init)
    result = CliRunner().invoke(main, ["train", "--max-steps", "1"])
    assert result.exit_code == 7, result.output
    assert asked.get("configure") is True, asked

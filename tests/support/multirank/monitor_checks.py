"""Consensus monitor checks on any Communicator: in-process (tests/inprocess/test_monitor.py) and
under ``mpiexec -n N python tests/support/multirank/run_checks.py monitor_checks``.

Each takes ``comm`` and raises AssertionError on failure.
"""

from __future__ import annotations

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.bucket.monitor import ConsensusMonitor
from gossipgrad.engine.consensus import agree, consensus_distance
from gossipgrad.options import ExchangeOptions
from gossipgrad.strategies import DistributedOptimizer, build_optimizer


def _model(seed: int = 0) -> torch.nn.Module:
    """The same weights on every rank (a local generator: thread ranks share torch's)."""
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 300),
        torch.nn.ReLU(),
        torch.nn.Linear(300, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def _same_everywhere(comm, value: float) -> bool:
    lo = allreduce_(comm, np.array([value]), ReduceOp.MIN)[0]
    hi = allreduce_(comm, np.array([value]), ReduceOp.MAX)[0]
    return bool(lo == hi == value)


def check_estimate_matches_exact_distance(comm) -> None:
    """The sketched estimate is within 30% of the exact consensus distance (relative error
    of the 256-bin sketch is about 9%), at drifts of 1e-1 to 1e-4 relative, and every rank
    gets the same value."""
    model = _model()
    monitor = ConsensusMonitor(
        model, comm, ExchangeOptions(monitor_every=1), lambda: None, lambda: None
    )
    base = [p.detach().clone() for p in model.parameters()]
    gen = torch.Generator().manual_seed(100 + comm.rank)
    for eps in (0.3, 3e-2, 1e-2):
        with torch.no_grad():
            for p, b in zip(model.parameters(), base, strict=True):
                p.copy_(b + eps * b.abs().mean() * torch.randn(p.shape, generator=gen))
        exact = consensus_distance(model, comm)
        est = monitor.estimate()
        assert _same_everywhere(comm, est), f"rank {comm.rank}: estimate {est} differs"
        if comm.size == 1:
            assert est == exact == 0.0, (est, exact)
            continue
        assert abs(est - exact) <= 0.3 * exact, f"eps {eps}: estimate {est} vs exact {exact}"


def check_identical_models_estimate_zero(comm) -> None:
    model = _model()
    monitor = ConsensusMonitor(
        model, comm, ExchangeOptions(monitor_every=1), lambda: None, lambda: None
    )
    est = monitor.estimate() if monitor.active else 0.0
    assert 0.0 <= est <= 1e-12, est


def _drifts(comm) -> bool:
    """Gradient mixing lets ranks drift apart from 3 ranks on (2 ranks average each other's
    gradients exactly at every step)."""
    return comm.size > 2


def _train(comm, **options) -> DistributedOptimizer:
    """Six steps of gradient mixing on rank-dependent data (drift), lr 0.5."""
    model = _model()
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.5), model, comm, mix="grad", **options
    )
    gen = torch.Generator().manual_seed(comm.rank)
    for _ in range(6):
        x = torch.randn(16, 20, generator=gen) + comm.rank
        y = torch.randint(0, 4, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return opt


def check_adaptive_averaging_fires_on_every_rank_at_the_same_steps(comm) -> None:
    """Over the threshold at every monitored step (2, 4, 6): a global average there, on
    every rank, so the models are identical after step 6; the summary counts it."""
    opt = _train(comm, sync="adaptive", sync_threshold=1e-7, monitor_every=2)
    try:
        expect = [2, 4, 6] if _drifts(comm) else []
        assert opt.monitor.sync_steps == expect, (comm.rank, opt.monitor.sync_steps)
        assert agree(comm, len(opt.monitor.sync_steps))
        assert consensus_distance(opt.model, comm) == 0.0
        summary = opt.monitor.summary()
        ring = 2 * (comm.size - 1) / comm.size
        numel = sum(p.numel() for p in opt.model.parameters())
        assert summary["syncs"] == len(expect)
        assert summary["sync_bytes"] == len(expect) * ring * 8 * numel
        assert summary["monitor_calls"] == (3 if comm.size > 1 else 0)
        assert summary["max_consensus_distance"] > 1e-7 or not _drifts(comm)
    finally:
        opt.close()


def check_no_averaging_below_threshold_or_when_off(comm) -> None:
    """A threshold above every distance, or ``sync="off"``: no average, the ranks drift,
    and the monitor still reports the largest distance it saw."""
    for options in (
        {"sync": "adaptive", "sync_threshold": 1e6, "monitor_every": 2},
        {"sync": "off", "monitor_every": 2},
    ):
        opt = _train(comm, **options)
        try:
            assert opt.monitor.syncs == 0, options
            drift = consensus_distance(opt.model, comm)
            if _drifts(comm):
                assert drift > 1e-6, (options, drift)
                assert opt.monitor.max_distance > 1e-6, options
        finally:
            opt.close()


ALL = [
    check_estimate_matches_exact_distance,
    check_identical_models_estimate_zero,
    check_adaptive_averaging_fires_on_every_rank_at_the_same_steps,
    check_no_averaging_below_threshold_or_when_off,
]

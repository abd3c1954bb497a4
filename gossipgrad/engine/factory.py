"""One call builds the distributed optimizer for any ``--strategy``.

    opt = make_distributed("ddp", torch.optim.SGD(model.parameters(), lr=0.1), model, comm,
                           bucket_mb=25)
    out = opt.module_for_forward(x)   # DDP's wrapper for ddp, the model otherwise

gossip, allreduce and local are :class:`DistributedOptimizer`; horovod and ddp are engine
adapters with the same interface (:mod:`gossipgrad.engine.adapters`), imported only when
chosen, so neither Horovod nor torch.distributed is loaded for the others.
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.exchange import Strategy
from gossipgrad.engine.distributed import DistributedOptimizer


def make_distributed(strategy: str, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                     comm: Communicator, **kwargs: Any) -> Any:
    """The distributed optimizer for ``strategy``; ``kwargs`` are DistributedOptimizer's
    keyword arguments (topology, seed, rotate, mix, staleness, sync_every, bucket_mb,
    overlap, stager). Collective: every rank calls it with the same arguments."""
    try:
        s = Strategy(strategy)
    except ValueError:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of: "
                         f"{', '.join(e.value for e in Strategy)}") from None
    if s is Strategy.HOROVOD:
        from gossipgrad.engine.adapters.horovod import HorovodAdapter

        return HorovodAdapter(optimizer, model, comm, **kwargs)
    if s is Strategy.DDP:
        from gossipgrad.engine.adapters.ddp import DdpAdapter

        return DdpAdapter(optimizer, model, comm, **kwargs)
    return DistributedOptimizer(optimizer, model, comm, strategy=s.value, **kwargs)

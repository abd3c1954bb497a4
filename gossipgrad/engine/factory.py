"""One call builds the distributed optimizer for any ``--strategy``.

    opt = make_distributed(torch.optim.SGD(model.parameters(), lr=0.1), model, comm,
                           ExchangeOptions(strategy="ddp", bucket_mb=25))
    out = opt.module_for_forward(x)   # DDP's wrapper for ddp, the model otherwise

gossip, allreduce and local are :class:`DistributedOptimizer`; ps is
:class:`gossipgrad.engine.ps.ParameterServerOptimizer`; horovod and ddp are engine adapters
with the same interface (:mod:`gossipgrad.engine.adapters`), imported only when chosen, so
neither Horovod nor torch.distributed is loaded for the others.
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.staging import Stager
from gossipgrad.engine.distributed import DistributedOptimizer
from gossipgrad.options import ExchangeOptions, Strategy, exchange_options


def make_distributed(
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    comm: Communicator,
    options: ExchangeOptions | None = None,
    *,
    stager: Stager | None = None,
    **overrides: Any,
) -> Any:
    """The distributed optimizer for ``options.strategy`` (keyword arguments override the
    options' fields). Collective: every rank calls it with the same options."""
    if not (hasattr(optimizer, "step") and hasattr(optimizer, "param_groups")):
        raise TypeError(
            "make_distributed(optimizer, model, comm, options=None, **overrides) "
            f"takes an optimizer (step, param_groups) first, got {optimizer!r}; "
            "pass the strategy as strategy=... or in ExchangeOptions"
        )
    opts = exchange_options(options, overrides)
    # Lazy: each library is loaded only when its strategy is chosen.
    if opts.strategy is Strategy.HOROVOD:
        from gossipgrad.engine.adapters.horovod import HorovodAdapter

        return HorovodAdapter(optimizer, model, comm, opts)
    if opts.strategy is Strategy.DDP:
        from gossipgrad.engine.adapters.ddp import DdpAdapter

        return DdpAdapter(optimizer, model, comm, opts)
    if opts.strategy is Strategy.PS:
        from gossipgrad.engine.ps import ParameterServerOptimizer

        return ParameterServerOptimizer(optimizer, model, comm, opts, stager=stager)
    return DistributedOptimizer(optimizer, model, comm, opts, stager=stager)

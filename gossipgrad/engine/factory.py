"""Build the distributed wrapper for a strategy by name: the one place strategies plug in.

    opt = make_distributed("gossip", model, torch.optim.SGD(model.parameters(), lr=0.1), comm)

What is returned has :class:`~gossipgrad.engine.distributed.DistributedOptimizer`'s surface,
which the trainer and ``gossipgrad bench`` rely on: ``zero_grad()``, ``step()``,
``drain()`` (complete what is in flight), ``synchronize()``, ``close()``,
``bytes_sent_per_step()`` (the theory) and ``param_groups``. A new
strategy (an engine adapter around Horovod or DDP, say) registers a builder::

    @register("horovod")
    def _horovod(model, optimizer, comm, **kw):
        return HorovodAdapter(model, optimizer, comm, **kw)

and every benchmark and command that takes a strategy name can then use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.exchange import Strategy
from gossipgrad.engine.distributed import DistributedOptimizer

Builder = Callable[..., Any]
_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: make ``builder(model, optimizer, comm, **kw)`` the wrapper for ``name``."""

    def deco(builder: Builder) -> Builder:
        _BUILDERS[name] = builder
        return builder

    return deco


def available() -> list[str]:
    """Strategy names that have a builder, in registration order."""
    return list(_BUILDERS)


def make_distributed(strategy: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     comm: Communicator, **kw: Any) -> Any:
    """The distributed wrapper of ``optimizer`` for ``strategy``; ``kw`` go to its builder.

    Raises ValueError naming the known strategies when ``strategy`` has no builder.
    """
    builder = _BUILDERS.get(str(strategy))
    if builder is None:
        raise ValueError(f"strategy {strategy!r} has no engine adapter here; choose one of: "
                         f"{', '.join(available())}")
    return builder(model, optimizer, comm, **kw)


def _bucket_strategy(name: str) -> Builder:
    def build(model: torch.nn.Module, optimizer: torch.optim.Optimizer, comm: Communicator,
              **kw: Any) -> DistributedOptimizer:
        return DistributedOptimizer(optimizer, model, comm, strategy=name, **kw)

    build.__doc__ = f"DistributedOptimizer(strategy={name!r})"
    return build


for _s in (Strategy.GOSSIP, Strategy.ALLREDUCE, Strategy.LOCAL):
    register(_s.value)(_bucket_strategy(_s.value))

"""gossipgrad: decentralized data-parallel training for PyTorch over MPI (GossipGraD).

    comm = gossipgrad.init()
    opt = gossipgrad.DistributedOptimizer(torch.optim.SGD(...), model, comm)

See :mod:`gossipgrad.strategies.face` for a complete example and the optimizer's names,
and :mod:`gossipgrad.strategies` for the strategies (and how to add one). The tools that
measure and plan (``gossipgrad.tools``: planner, benchmarks, the stand-in accelerator) are
not loaded by this import.
"""

from __future__ import annotations

from gossipgrad.comm.base import CommTimeout, PeerFailed
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.consensus import average_parameters_, broadcast_parameters_
from gossipgrad.engine.step import train_step
from gossipgrad.options import ExchangeOptions, Mix, Strategy, Topology
from gossipgrad.runtime import init
from gossipgrad.strategies import DistributedOptimizer

__all__ = [
    "init",
    "DistributedOptimizer",
    "ExchangeOptions",
    "Mix",
    "Strategy",
    "Topology",
    "Schedule",
    "CommTimeout",
    "PeerFailed",
    "train_step",
    "average_parameters_",
    "broadcast_parameters_",
]
__version__ = "0.1.0"

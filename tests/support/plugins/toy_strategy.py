"""A toy strategy, registered from the tests alone (no change under gossipgrad/): every
rank trains its own model and all ranks take one global average every K steps
(``sync_every``, default 4). Load it with ``import toy_strategy`` or, for the command line,
``GOSSIPGRAD_PLUGINS=toy_strategy`` with this folder on PYTHONPATH."""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.collectives import allreduce_bytes
from gossipgrad.engine.consensus import (
    average_parameters_,
    broadcast_parameters_,
    consensus_distance,
    model_tensors,
    verify_identical,
)
from gossipgrad.engine.protocol import WrappedOptimizer
from gossipgrad.registry import STRATEGIES
from gossipgrad.specs import StrategySpec

NAME = "toy-periodic"


class PeriodicAverage(WrappedOptimizer):
    """Local steps; a global average of parameters and buffers every ``every`` steps."""

    def __init__(self, optimizer: Any, model: torch.nn.Module, comm: Any, opts: Any) -> None:
        super().__init__(optimizer, model, comm, opts)
        self.every = opts.sync_every or 4
        broadcast_parameters_(model, comm)
        verify_identical(model, comm)
        self.averages = 0

    def step(self, closure: Any = None) -> Any:
        loss = self.optimizer.step(closure)
        self.step_count += 1
        if self.step_count % self.every == 0:
            self.synchronize()
        return loss

    def synchronize(self) -> None:
        average_parameters_(self.model, self.comm)
        self.averages += 1

    def consensus_distance(self) -> float:
        return consensus_distance(self.model, self.comm)

    def bytes_sent_per_step(self) -> float:
        nbytes = 8 * sum(t.numel() for t in model_tensors(self.model))  # averaged as float64
        return allreduce_bytes(nbytes, self.comm.size) / self.every


class PeriodicAverageSpec(StrategySpec):
    name = NAME
    summary = "toy: local steps, one global average every --sync-every steps"
    uses = frozenset({"sync_every"})
    shape = "ring"
    shrink = False

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return PeriodicAverage(optimizer, model, comm, opts)


STRATEGIES.register(NAME, PeriodicAverageSpec(), replace=True)

"""What the horovod and ddp adapters share: DistributedOptimizer's interface around a
library that keeps every rank's parameters identical by allreducing gradients.

The trainer (and a checkpoint) uses, on any strategy: ``zero_grad``, ``step``,
``synchronize``, ``consensus_distance``, ``bytes_sent_per_step``, ``close``,
``state_dict``/``load_state_dict``, ``param_groups``, ``optimizer`` (the torch optimizer
that holds the state), ``schedule``, ``layout`` (``nbytes``, ``buckets``), ``step_count``
and ``module_for_forward`` (what the forward pass calls: the model itself, or DDP's
wrapper around it).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.exchange import Strategy
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.buckets import DEFAULT_BUCKET_MB, BucketLayout, cap_from_mb
from gossipgrad.engine.consensus import consensus_distance, verify_identical
from gossipgrad.engine.wrapped import WrappedOptimizer

log = logging.getLogger(__name__)


class AllreduceAdapter(WrappedOptimizer):
    """Base for library-backed allreduce strategies (identical parameters every step).

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters, with no state
            yet (a subclass may wrap it in a new object; read ``.optimizer`` afterwards).
        model: the module being trained; not modified here.
        comm: the communicator (``gossipgrad.init()``).
        bucket_mb: the bucket (DDP ``bucket_cap_mb``) or fusion buffer (Horovod
            ``HOROVOD_FUSION_THRESHOLD``) size in MiB.
        staleness: must be 0 (these libraries wait for this step's allreduce).
        topology, seed, rotate: only to build ``schedule``, which the trainer checks every
            rank agrees on; no message follows it.
        mix, sync_every, overlap, stager: gossip options, accepted and ignored (both
            libraries always overlap the allreduce with backward).
    """

    strategy: Strategy

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                 comm: Communicator, *, topology: str = "auto", seed: int = 0,
                 rotate: bool = True, mix: str = "param", staleness: int = 0,
                 sync_every: int = 0, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, stager: Any = None) -> None:
        if staleness != 0:
            raise ValueError(f"--staleness {staleness} is not available with --strategy "
                             f"{self.strategy.value}: it waits for every step's allreduce "
                             "(use --strategy allreduce for a stale allreduce)")
        self.optimizer, self.model, self.comm = optimizer, model, comm
        self.bucket_mb = bucket_mb
        self.schedule = Schedule(comm.size, topology, seed, rotate)
        # Sizes only (logging, bytes per step): never bound, no gradient lives in it.
        self.layout = BucketLayout(list(model.parameters()), cap_from_mb(bucket_mb))
        self.step_count = 0
        self.communicates = comm.size > 1

    # -- the step --------------------------------------------------------------------
    @property
    def module_for_forward(self) -> torch.nn.Module:
        """What the forward pass must call (DDP hooks its wrapper, not the model)."""
        return self.model

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        loss = self.optimizer.step(closure)
        self.step_count += 1
        return loss

    # -- whole-model operations -------------------------------------------------------
    def drain(self) -> None:
        """Nothing is left in flight between steps."""

    def synchronize(self) -> None:
        """Check, do not average: the allreduce keeps parameters bit-identical, so a
        difference is a bug and raises RuntimeError. Subclasses first make floating
        buffers (BatchNorm statistics) agree, so what is evaluated and saved is one model."""
        self._sync_buffers_()
        verify_identical(self.model, self.comm,
                         when=f"at step {self.step_count} under --strategy {self.strategy.value}")

    def _sync_buffers_(self) -> None:
        pass

    def consensus_distance(self) -> float:
        """Measured, not assumed: 0.0 while the ranks hold identical parameters."""
        return consensus_distance(self.model, self.comm)

    def bytes_sent_per_step(self) -> float:
        """Ring-allreduce theory, 2 (size - 1) / size x model bytes. Not measured: the
        library or MPI may pick another algorithm (recursive doubling sends log2(size) x)."""
        p = self.comm.size
        return 2.0 * (p - 1) / p * self.layout.nbytes if self.communicates else 0.0

    def close(self) -> None:
        pass

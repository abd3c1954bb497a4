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
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.consensus import consensus_distance, verify_identical
from gossipgrad.engine.wrapped import WrappedOptimizer
from gossipgrad.options import ExchangeOptions, Strategy, exchange_options

log = logging.getLogger(__name__)


class AllreduceAdapter(WrappedOptimizer):
    """Base for library-backed allreduce strategies (identical parameters every step).

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters, with no state
            yet (a subclass may wrap it in a new object; read ``.optimizer`` afterwards).
        model: the module being trained; not modified here.
        comm: the communicator (``gossipgrad.init()``).
        options: the exchange options; the strategy is the adapter's own (validation then
            refuses staleness 1: these libraries wait for this step's allreduce).
            ``bucket_mb`` is the bucket (DDP ``bucket_cap_mb``) or fusion buffer (Horovod
            ``HOROVOD_FUSION_THRESHOLD``) size; topology, seed and rotate only build
            ``schedule``, which the trainer checks every rank agrees on (no message follows
            it); mix, sync_every and overlap are gossip options, ignored (both libraries
            always overlap the allreduce with backward). Keyword arguments override fields.
    """

    strategy: Strategy

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions | None = None,
        **overrides: Any,
    ) -> None:
        opts = exchange_options(options, {**overrides, "strategy": self.strategy})
        self.optimizer, self.model, self.comm, self.options = optimizer, model, comm, opts
        self.bucket_mb = opts.bucket_mb
        self.schedule = Schedule(comm.size, opts.topology, opts.seed, opts.rotate)
        # Sizes only (logging, bytes per step): never bound, no gradient lives in it.
        self.layout = BucketLayout(list(model.parameters()), opts.bucket_cap_bytes)
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

    def behind(self) -> bool:
        """Never: every rank joins every step's allreduce (no ``--max-lag``)."""
        return False

    # -- whole-model operations -------------------------------------------------------
    def drain(self) -> None:
        """Nothing is left in flight between steps."""

    def synchronize(self) -> None:
        """Check, do not average: the allreduce keeps parameters bit-identical, so a
        difference is a bug and raises RuntimeError. Subclasses first make floating
        buffers (BatchNorm statistics) agree, so what is evaluated and saved is one model."""
        self._sync_buffers_()
        verify_identical(
            self.model,
            self.comm,
            when=f"at step {self.step_count} under --strategy {self.strategy.value}",
        )

    def _sync_buffers_(self) -> None:
        pass

    def consensus_distance(self) -> float:
        """Measured, not assumed: 0.0 while the ranks hold identical parameters."""
        return consensus_distance(self.model, self.comm)

    def bytes_sent_per_step(self) -> float:
        """Ring-allreduce theory (:meth:`Strategy.bytes_sent`), not measured."""
        return self.strategy.bytes_sent(self.layout.nbytes, self.comm.size)

    def close(self) -> None:
        pass

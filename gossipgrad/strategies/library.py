"""What the horovod and ddp strategies share: an optimizer around a library that keeps
every rank's parameters identical by allreducing gradients during backward, and the spec
traits of such a strategy (collective, identical ranks, no codec of ours, no shrink).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import torch

from gossipgrad.choices import Mix, spell
from gossipgrad.comm.base import Communicator
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.consensus import consensus_distance, verify_identical
from gossipgrad.engine.protocol import WrappedOptimizer
from gossipgrad.options import ExchangeOptions
from gossipgrad.specs import StrategySpec
from gossipgrad.strategies.allreduce import COLLECTIVE_REFUSALS

log = logging.getLogger(__name__)


class LibraryStrategy(StrategySpec):
    """Spec traits of a strategy whose library runs the exchange. ``wires``: the
    ``--wire`` values its library's own compression provides (a cast of each bucket
    before the library's allreduce); any other is refused."""

    uses = frozenset({"bucket_mb", "wire"})
    wires: ClassVar[tuple[str, ...]] = ("fp32",)
    shape = "ring"
    collective = True
    identical = True
    library = True
    fixed_mix = Mix.GRAD
    mix_reason = "its library averages gradients during backward"
    refusals = {
        **COLLECTIVE_REFUSALS,
        "staleness": "it waits for every step's allreduce; gossipgrad's allreduce has a stale one",
        "overlap": "the library always overlaps its allreduce with backward",
        "error_feedback": "its library's compression keeps no residual",
    }

    def check(self, opts: Any) -> None:
        if opts.wire not in self.wires:
            raise ValueError(
                f"{spell('--wire', opts.wire)} does not apply to "
                f"{spell('--strategy', self.name)}: its library's own compression is "
                f"{', '.join(self.wires[:-1])} or {self.wires[-1]} (gossipgrad's codecs need "
                f"its communicator: {spell('--strategy', 'gossip')}, allreduce or ps)"
            )


class LibraryOptimizer(WrappedOptimizer):
    """Base of the library optimizers (identical parameters every step).

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters, with no state
            yet (a subclass may wrap it in a new object; read ``.optimizer`` afterwards).
        model: the module being trained; not modified here.
        comm: the communicator (``gossipgrad.init()``).
        options: the exchange options, validated for the strategy. ``bucket_mb`` is the
            bucket (DDP ``bucket_cap_mb``) or fusion buffer (Horovod
            ``HOROVOD_FUSION_THRESHOLD``) size; topology, seed and rotate only build
            ``schedule``, which the trainer checks every rank agrees on (no message follows
            it).
    """

    waits_seen = False  # DDP's and Horovod's waits happen inside their own libraries

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions,
    ) -> None:
        super().__init__(optimizer, model, comm, options)
        self.bucket_mb = options.bucket_mb
        self.wire = options.wire
        # Sizes only (logging, bytes per step): never bound, no gradient lives in it.
        self.layout = BucketLayout(list(model.parameters()), options.bucket_cap_bytes)
        self.communicates = comm.size > 1
        self._attach(optimizer, model, options)

    def _attach(
        self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, options: ExchangeOptions
    ) -> None:
        """The library's own set-up (its process group, its wrapper), after the shell's."""

    @property
    def bucket_count(self) -> int:  # type: ignore[override]
        return len(self.layout.buckets)

    def step(self, closure: Any = None) -> Any:
        loss = self.optimizer.step(closure)
        self.step_count += 1
        return loss

    def synchronize(self) -> None:
        """Check, do not average: the allreduce keeps parameters bit-identical, so a
        difference is a bug and raises RuntimeError. Subclasses first make floating
        buffers (BatchNorm statistics) agree, so what is evaluated and saved is one model."""
        self._sync_buffers_()
        verify_identical(
            self.model,
            self.comm,
            when=f"at step {self.step_count} under --strategy {self.strategy}",
        )

    def _sync_buffers_(self) -> None:
        pass

    def consensus_distance(self) -> float:
        """Measured, not assumed: 0.0 while the ranks hold identical parameters."""
        return consensus_distance(self.model, self.comm)

    def bytes_sent_per_step(self) -> float:
        """Ring-allreduce theory (the spec's pattern) of the buckets as the library's
        compression casts them (bf16, fp16: 2 bytes a value), not measured."""
        nbytes = sum(
            b.numel * LIBRARY_WIRE_BYTES.get(self.wire, b.params[0].element_size())
            for b in self.layout.buckets
        )
        return self.options.spec.bytes_per_step(nbytes, self.comm.size)


LIBRARY_WIRE_BYTES = {"bf16": 2, "fp16": 2}
"""Bytes per value on the wire of a library's compression (fp32: the parameters' own)."""

"""When the ranks' models become their global average (``--merge-at``), and what it cost.

A *merge* replaces every rank's parameters and floating buffers by their mean over ranks
(``DistributedOptimizer.synchronize``); the one before a checkpoint and the final one
average the optimizer's state too (momentum, Adam's moments: ``snapshot.consensus_``), and
with ``--rule outer`` the outer momentum where it differs between ranks. Without a merge an
evaluation scores each rank's own model on its share of the validation split, so its loss is
the mean over ranks of what one rank's model scores.

    merges = Merges(("end",), library=False)
    merges.at_eval(final=False), merges.at_eval(final=True)    # (False, True)

Bytes are counted as a ring allreduce sends them, 2 (size - 1) / size of the buffers
averaged (float64: the average runs in double precision on the host).
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.engine.consensus import model_tensors
from gossipgrad.engine.run import snapshot as snap

AVERAGED_BYTES = 8
"""Bytes per value of what a merge averages (``engine.consensus``: float64 on the host)."""


def ring_bytes(values: int, size: int) -> float:
    """Bytes one rank sends to allreduce ``values`` float64 values over ``size`` ranks."""
    return 0.0 if size <= 1 else 2.0 * (size - 1) / size * values * AVERAGED_BYTES


def state_values(optimizer: torch.optim.Optimizer) -> int:
    """Floating values of ``optimizer``'s state that a merge averages."""
    return sum(
        t.numel()
        for s in optimizer.state.values()
        for t in s.values()
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() > 0
    )


class Merges:
    """Args:
    points: ``--merge-at``'s names (``end``, ``eval``, ``checkpoint``).
    library: the strategy runs inside another library whose ranks hold one model already
        (Horovod, DDP): its synchronize compares, it does not average.
    """

    def __init__(self, points: tuple[str, ...], library: bool = False) -> None:
        self.points = frozenset(points)
        self.library = library
        self.count = 0
        self.bytes = 0.0

    def at_eval(self, final: bool) -> bool:
        """Whether the evaluation (the run's last when ``final``) merges first."""
        return "eval" in self.points or (final and "end" in self.points)

    def own_first(self, final: bool) -> bool:
        """Whether the evaluation also scores the ranks' own models before it merges: the
        final merge's gain (``--merge-at end`` without ``eval``)."""
        return final and "end" in self.points and "eval" not in self.points

    @property
    def at_checkpoint(self) -> bool:
        return "checkpoint" in self.points

    def merge_(self, opt: Any, comm: Communicator, with_state: bool) -> None:
        """One merge (collective); ``with_state``: the optimizer's state too."""
        values = 0 if self.library else sum(t.numel() for t in model_tensors(opt.model))
        if with_state:
            snap.consensus_(opt, comm)
            values += state_values(opt.optimizer)
        else:
            opt.synchronize()
        rule = getattr(opt, "rule", None)  # the bucket optimizers' mixing rule
        if rule is not None and rule.stateful and not opt.options.spec.collective:
            values += rule.state_values()
        self.count += 1
        self.bytes += ring_bytes(values, comm.size)

    def summary(self) -> dict[str, Any]:
        return {
            "merge_at": sorted(self.points),
            "merges": self.count,
            "merge_bytes": self.bytes,
        }

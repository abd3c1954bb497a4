"""``--strategy allreduce-param``: every rank steps on its own gradient, then the parameter
buckets are averaged over all ranks (gossip's parameter mixing with every rank as the
peer: what gossip ``--mix param`` approaches)."""

from __future__ import annotations

from typing import Any

from gossipgrad.choices import Mix, spell
from gossipgrad.registry import STRATEGIES, lossless
from gossipgrad.strategies.allreduce import COLLECTIVE_REFUSALS
from gossipgrad.strategies.bucketed import BucketStrategy


class AllreduceParam(BucketStrategy):
    name = "allreduce-param"
    summary = "allreduce of parameters after each local step (parameter averaging)"
    uses = frozenset(
        {"timing", "staleness", "bucket_mb", "overlap", "wire", "backward_passes_per_step"}
    )
    shape = "ring"
    collective = True
    fixed_mix = Mix.PARAM
    mix_reason = "it averages parameters; for gradients use --strategy allreduce"
    refusals = COLLECTIVE_REFUSALS

    def check(self, opts: Any) -> None:
        if not lossless(opts.wire):
            raise ValueError(
                f"{spell('--wire', opts.wire)} does not apply to "
                f"{spell('--strategy', self.name)}: every rank would hold the averaged "
                "parameters as the wire rounds them, losing each step's updates below its "
                f"precision; use {spell('--strategy', 'allreduce')} (gradients) or gossip"
            )


STRATEGIES.register(AllreduceParam.name, AllreduceParam())

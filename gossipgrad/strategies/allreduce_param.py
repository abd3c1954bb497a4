"""``--strategy allreduce-param``: every rank steps on its own gradient, then the parameter
buckets are averaged over all ranks (gossip's parameter mixing with every rank as the
peer: what gossip ``--mix param`` approaches)."""

from __future__ import annotations

from gossipgrad.choices import Mix
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.allreduce import COLLECTIVE_REFUSALS
from gossipgrad.strategies.bucketed import BucketStrategy


class AllreduceParam(BucketStrategy):
    name = "allreduce-param"
    summary = "allreduce of parameters after each local step (parameter averaging)"
    uses = frozenset({"staleness", "bucket_mb", "overlap", "wire", "backward_passes_per_step"})
    pattern = "ring"
    collective = True
    fixed_mix = Mix.PARAM
    mix_reason = "it averages parameters; for gradients use --strategy allreduce"
    refusals = COLLECTIVE_REFUSALS


STRATEGIES.register(AllreduceParam.name, AllreduceParam())

"""``--strategy allreduce``: gossipgrad's own bucketed allreduce of gradients, as DDP and
Horovod do it (the reference users know): each bucket is averaged over all ranks as soon
as backward fills it, so every rank takes the same step."""

from __future__ import annotations

from gossipgrad.choices import Mix
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.bucketed import BucketStrategy

COLLECTIVE_REFUSALS = {
    "max_lag": "its allreduce waits for every rank at every step; bounded lag is gossip's",
    "sync_every": "every rank already holds the same model",
}


class Allreduce(BucketStrategy):
    name = "allreduce"
    summary = "bucketed allreduce of gradients during backward (DDP/Horovod's way)"
    uses = frozenset(
        {
            "timing",
            "staleness",
            "bucket_mb",
            "overlap",
            "sufficient_factors",
            "wire",
            "error_feedback",
            "backward_passes_per_step",
        }
    )
    shape = "ring"
    collective = True
    identical = True
    factor_pattern = "allgather"
    fixed_mix = Mix.GRAD
    mix_reason = "it averages gradients; for parameters use --strategy allreduce-param"
    refusals = COLLECTIVE_REFUSALS


STRATEGIES.register(Allreduce.name, Allreduce())

"""``--strategy local``: no communication; every rank trains its own model (the lower
bound on step time). With ``--sync-every K`` it is local SGD: one global average every K
steps; evaluation and checkpoints always average first."""

from __future__ import annotations

from gossipgrad.choices import Mix
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.bucketed import BucketStrategy


class Local(BucketStrategy):
    name = "local"
    summary = "no communication (the lower bound); --sync-every K: local SGD"
    uses = frozenset({"timing", "sync_every", "backward_passes_per_step"})
    shape = "none"
    fixed_mix = Mix.PARAM
    mix_reason = "it sends nothing, so nothing is mixed"


STRATEGIES.register(Local.name, Local())

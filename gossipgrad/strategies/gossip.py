"""``--strategy gossip``: every step, one exchange with one peer along the schedule
(hypercube or dissemination, rotated every cycle): O(1) messages per step at any size."""

from __future__ import annotations

from typing import Any

from gossipgrad.choices import Mix, Sync, spell
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.bucketed import BucketStrategy


class Gossip(BucketStrategy):
    name = "gossip"
    summary = "one peer per step along the schedule; mixes gradients or parameters"
    uses = frozenset(
        {
            "mix",
            "timing",
            "staleness",
            "sync_every",
            "bucket_mb",
            "overlap",
            "max_lag",
            "sync",
            "sync_threshold",
            "monitor_every",
            "sufficient_factors",
            "wire",
            "error_feedback",
            "rule",
            "backward_passes_per_step",
        }
    )
    shape = "peer"
    factor_pattern = "peer"

    def check(self, opts: Any) -> None:
        if opts.adaptive and not opts.monitor_every:
            auto = opts.sync is Sync.AUTO
            default = f" (the default with {spell('--mix', 'grad')})" if auto else ""
            raise ValueError(
                f"{spell('--sync', 'adaptive')}{default} needs {spell('--monitor-every')} >= 1 "
                f"to see the consensus distance; pass {spell('--sync', 'off')} to do without both"
            )

    def auto_adaptive(self, opts: Any) -> bool:
        return opts.mix is Mix.GRAD and opts.timing_spec.collectives_ok

    def monitors(self, opts: Any) -> bool:
        return opts.monitor_every > 0 and opts.timing_spec.collectives_ok


STRATEGIES.register(Gossip.name, Gossip())

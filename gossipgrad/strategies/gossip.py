"""``--strategy gossip``: every step, one exchange with one peer along the schedule
(hypercube or dissemination, rotated every cycle): O(1) messages per step at any size."""

from __future__ import annotations

from typing import Any

from gossipgrad.choices import ErrorFeedback, Mix, Sync, spell
from gossipgrad.engine.run.signals import agreement_period
from gossipgrad.registry import STRATEGIES, lossless
from gossipgrad.strategies.bucketed import BucketStrategy


class Gossip(BucketStrategy):
    name = "gossip"
    summary = "one peer per step along the schedule; mixes gradients or parameters"
    uses = frozenset(
        {
            "mix",
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
    pattern = "peer"
    factor_pattern = "peer"

    def check(self, opts: Any) -> None:
        if opts.max_lag and opts.error_feedback is ErrorFeedback.OFF and not lossless(opts.wire):
            raise ValueError(
                f"{spell('--error-feedback', 'off')} does not apply with {spell('--max-lag')} "
                f"above 0: a lagged frame always carries the cast's remainder to the next "
                f"(what keeps the sum over ranks exact); drop it"
            )
        if opts.sync is Sync.ADAPTIVE and opts.max_lag:
            raise ValueError(
                f"{spell('--sync', 'adaptive')} needs {spell('--max-lag', 0)}: its estimate "
                f"is a collective every {spell('--monitor-every')} steps, the barrier a lagged "
                f"run avoids; pass {spell('--sync', 'off')}"
            )
        if opts.adaptive and not opts.monitor_every:
            auto = opts.sync is Sync.AUTO
            default = f" (the default with {spell('--mix', 'grad')})" if auto else ""
            raise ValueError(
                f"{spell('--sync', 'adaptive')}{default} needs {spell('--monitor-every')} >= 1 "
                f"to see the consensus distance; pass {spell('--sync', 'off')} to do without both"
            )

    def auto_adaptive(self, opts: Any) -> bool:
        return opts.mix is Mix.GRAD and not opts.max_lag

    def monitors(self, opts: Any) -> bool:
        return opts.monitor_every > 0 and not opts.max_lag

    def agreement_period(self, opts: Any) -> int:
        return agreement_period(opts.max_lag)


STRATEGIES.register(Gossip.name, Gossip())

"""When a bucket's exchange completes relative to the step that posted it: one interface
(:class:`~gossipgrad.engine.bucket.timing.base.Timing`) behind the gossip optimizer's shell.

- :class:`~.lockstep.Lockstep` (staleness 0): mixed within the step, blocking or on the
  communication thread;
- :class:`~.stale.Stale` (``staleness=1``): completed at the next step and applied as a
  correction; deterministic;
- :class:`~.lagged.Lagged` (``max_lag=S``): frames up to S steps behind, mixed when they
  arrive (push-sum); depends on timing.

A new timing is one module implementing :class:`~.base.Timing`; the shell picks one in
:func:`make_timing`.
"""

from __future__ import annotations

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.rules import Average
from gossipgrad.engine.bucket.timing.base import Timing
from gossipgrad.engine.bucket.timing.lagged import Lagged
from gossipgrad.engine.bucket.timing.lockstep import Lockstep
from gossipgrad.engine.bucket.timing.stale import Stale
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.commthread import CommThread
from gossipgrad.options import ExchangeOptions, Mix

__all__ = ["Lagged", "Lockstep", "Stale", "Timing", "make_timing"]


def make_timing(
    opts: ExchangeOptions,
    comm: Communicator,
    schedule: Schedule,
    layout: BucketLayout,
    mixer: BucketMixer,
    thread: CommThread | None,
    collective: bool,
    rule: Average,
) -> Timing:
    """The timing of ``opts``: lagged for ``max_lag >= 1`` (its frames poll on a thread of
    their own when ``overlap``), stale for ``staleness=1``, else lockstep."""
    if opts.max_lag:
        return Lagged(
            comm,
            schedule,
            layout,
            opts.mix,
            opts.max_lag,
            opts.staleness,
            poll=opts.overlap,
            rule=rule,
            codec=make_codec(opts.wire, feedback=False),  # lagged frames carry their remainder
        )
    if opts.staleness:
        return Stale(mixer, thread, collective)
    return Lockstep(mixer, opts.mix is Mix.PARAM, thread, collective)

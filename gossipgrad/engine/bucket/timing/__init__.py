"""When a bucket's exchange completes relative to the step that posted it: the timings,
each a :class:`~gossipgrad.specs.TimingSpec` registered in :data:`gossipgrad.registry.TIMINGS`
with its runtime :class:`~gossipgrad.engine.bucket.timing.base.Timing`.

- ``lockstep`` (:mod:`.lockstep`): mixed within the step, blocking or on the communication
  thread (the default);
- ``stale`` (:mod:`.stale`, ``--staleness 1``): completed at the next step and applied as a
  correction; deterministic;
- ``lag:S`` (:mod:`.lagged`, ``--max-lag S``): frames up to S steps behind, mixed when they
  arrive (push-sum); depends on timing.

A new timing is one module: a ``TimingSpec`` whose ``build`` returns a ``Timing``, registered
with ``TIMINGS.register(name, spec)`` (``tests/support/plugins/toy_local.py``).
"""

from __future__ import annotations

from gossipgrad.engine.bucket.timing import (  # noqa: F401 - registration
    lagged,
    local,
    lockstep,
    stale,
)
from gossipgrad.engine.bucket.timing.base import Timing, TimingContext
from gossipgrad.engine.bucket.timing.lagged import Lagged
from gossipgrad.engine.bucket.timing.local import LocalSteps
from gossipgrad.engine.bucket.timing.lockstep import Lockstep
from gossipgrad.engine.bucket.timing.stale import Stale

__all__ = ["Lagged", "LocalSteps", "Lockstep", "Stale", "Timing", "TimingContext"]

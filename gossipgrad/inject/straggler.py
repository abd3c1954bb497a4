"""A slow rank on demand, for straggler tests: ``GOSSIPGRAD_INJECT_SLOW=RANK:FACTOR``.

That rank's compute (forward and backward) takes FACTOR times as long: before each step's
compute it sleeps (FACTOR - 1) x its previous step's compute time, so the exchanges it
posts from backward leave late too, as a slower GPU's would. Every other rank, and every
rank when the variable is unset, runs unchanged. ``gossipgrad train`` and the benchmarks
both apply it.

    straggler = Straggler(comm.rank)
    with straggler.compute():
        loss = model(x).sum()
        loss.backward()
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from gossipgrad.settings import Settings, settings

log = logging.getLogger(__name__)


class Straggler:
    """Stretches this rank's compute when ``GOSSIPGRAD_INJECT_SLOW`` names it."""

    def __init__(self, rank: int, env: Settings | None = None) -> None:
        slow = (env or settings()).inject_slow
        self.factor = slow[1] if slow is not None and slow[0] == rank else 1.0
        self.slept_s = 0.0
        self._last_s = 0.0
        if self.factor != 1.0:
            log.warning(
                "rank %d: GOSSIPGRAD_INJECT_SLOW makes this rank's compute %gx slower "
                "(a test knob)",
                rank,
                self.factor,
            )

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Wrap one step's forward and backward."""
        if self.factor == 1.0:
            yield
            return
        pause = (self.factor - 1.0) * self._last_s
        time.sleep(pause)
        self.slept_s += pause
        t0 = time.perf_counter()
        yield
        self._last_s = time.perf_counter() - t0

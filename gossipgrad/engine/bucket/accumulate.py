"""When a gradient bucket is complete: after ``backward_passes_per_step`` backward passes,
and not inside ``no_sync()`` (gradient accumulation, as in Horovod and DDP).

A bucket's exchange is posted from its parameters' post-accumulate-grad hooks once every
parameter of it has been through the expected number of backward passes; a further pass
that reaches a bucket already posted would add to gradients on the wire, so it is an
error that says what to pass, never a silently wrong mix.

    >>> counter = ReadyCounter([2, 1], passes=2)
    >>> [counter.ready(0), counter.ready(0), counter.ready(0), counter.ready(0)]
    [False, False, False, True]
    >>> with counter.holding():
    ...     counter.ready(1)
    False
    >>> counter.ready(1), counter.ready(1)
    (False, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class AccumulationError(RuntimeError):
    """A backward pass reached a bucket whose exchange this step had already posted."""


def accumulation_message(rank: int, step: int, bucket: int, passes: int) -> str:
    """What to do when a backward pass comes after a bucket left (``rank``, ``step``)."""
    return (
        f"rank {rank}, step {step}: a backward pass reached gradient bucket {bucket} after "
        f"its exchange was posted ({passes} backward pass{'es' if passes > 1 else ''} per "
        "step expected): to accumulate gradients over N backward passes, pass "
        "backward_passes_per_step=N to the DistributedOptimizer, or run the first N - 1 "
        "inside `with opt.no_sync():`"
    )


class ReadyCounter:
    """Counts post-accumulate-grad hooks per bucket.

    Args:
        sizes: parameters per bucket.
        passes: backward passes per step (``backward_passes_per_step``, >= 1).
    """

    def __init__(self, sizes: list[int], passes: int = 1) -> None:
        if passes < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.sizes, self.passes = list(sizes), passes
        self._holding = False
        self.reset()

    def reset(self) -> None:
        """A new step (``zero_grad``): nothing counted, nothing posted."""
        self.counts = [0] * len(self.sizes)
        self.posted = [False] * len(self.sizes)

    def ready(self, bucket: int) -> bool:
        """One parameter of ``bucket`` finished a backward pass; True when the bucket is
        now complete (post it). Raises :class:`AccumulationError` when it already left."""
        if self.posted[bucket]:
            raise AccumulationError(str(bucket))
        if self._holding:
            return False
        self.counts[bucket] += 1
        if self.counts[bucket] == self.passes * self.sizes[bucket]:
            self.posted[bucket] = True
            return True
        return False

    @property
    def all_posted(self) -> bool:
        """Every bucket is complete this step (posted by a hook or otherwise)."""
        return all(self.posted)

    def mark_posted(self, bucket: int) -> None:
        """``bucket`` was posted some other way (``step()`` posts what no hook did)."""
        self.posted[bucket] = True

    @property
    def is_holding(self) -> bool:
        return self._holding

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Inside: backward passes accumulate and post nothing (DDP's ``no_sync``)."""
        before = self._holding
        self._holding = True
        try:
            yield
        finally:
            self._holding = before

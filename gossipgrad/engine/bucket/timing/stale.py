"""Staleness 1: the exchange posted at step t completes at step t + 1 and is applied there
as the correction ``(mixed - own)_t``, which keeps the mean over ranks exact; on the
communication thread it runs through the whole next forward and backward. Deterministic
(the same result whatever the timing), unlike bounded lag, and available to the
collective allreduce too, which is why it is a timing of its own and not ``max_lag=1``.
"""

from __future__ import annotations

import torch

from gossipgrad.choices import respell, spell
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.timing.base import Timing, TimingContext
from gossipgrad.engine.commthread import CommThread
from gossipgrad.registry import TIMINGS
from gossipgrad.specs import TimingSpec


class Stale(Timing):
    """Args:
    mixer: the bucket exchange.
    thread: the communication thread (None: posted and completed by the caller).
    collective: the exchange is a collective, posted in order by the caller.
    """

    def __init__(self, mixer: BucketMixer, thread: CommThread | None, collective: bool) -> None:
        self.mixer, self.thread, self.collective = mixer, thread, collective
        self._posted: list[tuple[int, Pending | None, torch.Tensor]] = []  # key, pending, target
        self._done: set[int] = set()  # posted keys already completed (settle_), not applied
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []  # (sent -> mixed, own)

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        """Apply last step's exchange as a correction, then post this step's."""
        for key, pending, target in self._posted:
            mixed, own = self._copies[key]
            self._complete(key, pending)  # mixed <- mix of own_{t-1} with the peer's
            target.add_(mixed.sub_(own))  # buf_t += (mixed - own)_{t-1}
        self._posted, self._done = [], set()
        if [m.shape for m, _ in self._copies] != [b.shape for b in bufs]:
            self._copies = [(torch.empty_like(b), torch.empty_like(b)) for b in bufs]
        for i, buf in enumerate(bufs):
            mixed, own = self._copies[i]
            own.copy_(buf)
            mixed.copy_(buf)
            if self.thread is None:
                self._posted.append((i, self.mixer.start(mixed, i, step, tag + i), buf))
            else:
                self.thread.submit(
                    i,
                    lambda i=i, mixed=mixed: self.mixer.start(mixed, i, step, tag + i),
                    eager=not mixed.is_cuda,
                    collective=self.collective,
                )
                self._posted.append((i, None, buf))

    def _complete(self, key: int, pending: Pending | None) -> None:
        if key in self._done:
            return
        self._done.add(key)
        if pending is None:
            self.thread.wait(key)  # the thread has run the mixer's finish
        else:
            self.mixer.finish(pending)

    @property
    def in_flight(self) -> int:
        return len(self._posted)

    def drain_(self, step: int) -> bool:
        """Complete the exchange still in flight without applying it."""
        self.settle_(step)
        self._posted, self._done = [], set()
        return False

    def settle_(self, step: int) -> bool:
        """Complete the exchange still in flight; the next step still applies it."""
        for key, pending, _ in self._posted:
            self._complete(key, pending)
        return False

    def close(self, step: int) -> None:
        if self.thread is not None:
            self.thread.close()
            self.thread = None

    def abandon(self) -> None:
        self._posted, self._done = [], set()
        self.close(-1)


class StaleTiming(TimingSpec):
    name = "stale"
    summary = "the exchange posted at step t is applied at t + 1 as a correction (staleness 1)"
    carries_factors = False  # applied as a correction of whole buckets

    def aliases(self, args: tuple[int, ...]) -> dict[str, int]:
        return {"staleness": 1}

    def check(self, args: tuple[int, ...], opts: object) -> None:
        spec = opts.spec  # type: ignore[attr-defined]
        if "staleness" not in spec.uses:
            why = respell(spec.refusals.get("staleness", f"{spec.name} does not take it"))
            raise ValueError(
                f"{spell('--timing', 'stale')} does not apply to "
                f"{spell('--strategy', spec.name)} ({why}); drop it"
            )

    def amp_refusal(self, args: tuple[int, ...], mix: str) -> str | None:
        if mix == "grad":
            return "a late gradient would be mixed at another scale"
        return None

    def build(self, ctx: TimingContext) -> Stale:
        return Stale(ctx.mixer, ctx.thread, ctx.collective)


TIMINGS.register(StaleTiming.name, StaleTiming(), replace=True)

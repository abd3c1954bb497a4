"""A toy timing, outside the package: ``--timing toy-every:H`` exchanges at every H-th step
only (H - 1 local steps, then one exchange), each exchange completed within its step. It
proves the timing seam: one module, registered from the tests, nothing under gossipgrad/
names it. (The real local-steps timing with an outer optimizer is the package's own.)"""

from __future__ import annotations

from typing import Any

from gossipgrad.engine.bucket.timing import Lockstep, Timing, TimingContext
from gossipgrad.registry import TIMINGS
from gossipgrad.specs import TimingSpec

NAME = "toy-every"


class EveryH(Timing):
    """Lockstep at steps H - 1, 2H - 1, ...; nothing at the others."""

    def __init__(self, inner: Lockstep, every: int) -> None:
        self.inner, self.every = inner, every
        self.exchanges = 0

    def exchange_(self, bufs: list[Any], tag: int, step: int) -> None:
        if (step + 1) % self.every == 0:
            self.inner.exchange_(bufs, tag, step)
            self.exchanges += 1


class EveryHTiming(TimingSpec):
    name = NAME
    summary = "a toy: H - 1 local steps, then one exchange"
    argument = "H"
    polls_itself = True  # blocking: no communication thread is built for it

    def parse(self, arg: str | None) -> tuple[int, ...]:
        if not (arg or "").isdigit() or int(arg) < 1:
            raise ValueError(f"--timing {NAME}:H needs H >= 1, got {arg!r}")
        return (int(arg),)

    def send_share(self, args: tuple[int, ...]) -> float:
        return 1.0 / args[0]

    def build(self, ctx: TimingContext) -> EveryH:
        return EveryH(Lockstep(ctx.mixer, ctx.mix_params, None, ctx.collective), ctx.args[0])


TIMINGS.register(NAME, EveryHTiming(), replace=True)

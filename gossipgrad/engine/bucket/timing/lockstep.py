"""Staleness 0: every bucket posted at step t is mixed in within step t (``lockstep``, and
``early``: the same, with the parameter mix's per-bucket update moved into backward).

Blocking (no communication thread): ``exchange_`` posts every bucket and waits for each.
Overlapped (a :class:`~gossipgrad.engine.commthread.CommThread`): gradient buckets are
posted from backward hooks as they fill (:meth:`Lockstep.ready`) and ``exchange_`` waits
for them; parameter buckets are posted after the optimizer step in forward order (the
layout is in backward order: the first layer's bucket last) and waited for by forward
pre-hooks, so the exchange hides behind the next forward. Both give bit-identical results.
"""

from __future__ import annotations

import torch

from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.timing.base import Timing, TimingContext
from gossipgrad.engine.commthread import CommThread
from gossipgrad.registry import TIMINGS
from gossipgrad.specs import TimingSpec

PARAM_WINDOW = 2
"""Parameter buckets on the wire at once (``CommThread`` window). Posted all at once they
interleave on the connection and the first layer's bucket arrives last; in forward order
two at a time, each arrives as early as the link allows."""


class Lockstep(Timing):
    """The gradient mix completes at the end of backward (``completes_in_backward``).

    Args:
    mixer: the bucket exchange (transport, codec, rule).
    mix_params: parameter buckets (posted after the update) rather than gradients.
    thread: the communication thread (None: blocking).
    collective: the exchange is a collective, posted in order by the caller.
    early: with the parameter mix on the thread, the shell may update a bucket from
        backward and post it here at once (:meth:`ready`, ``timing="early"``); what it
        did not update is posted after the step, as without.
    """

    completes_in_backward = True

    def __init__(
        self,
        mixer: BucketMixer,
        mix_params: bool,
        thread: CommThread | None,
        collective: bool,
        early: bool = False,
    ) -> None:
        self.mixer, self.thread, self.collective = mixer, thread, collective
        self.mix_params = mix_params
        self.ready_hooks = thread is not None and not mix_params
        self.forward_waits = thread is not None and mix_params
        self.steps_in_backward = self.forward_waits and early
        self._window = thread.window if thread is not None else None
        self._submitted: set[int] = set()  # this step's buckets already posted
        self._inflight: set[int] = set()

    def reset_step(self) -> None:
        if not self.mix_params:  # parameter buckets posted from backward stay posted
            self._submitted.clear()

    def ready(self, index: int, buf: torch.Tensor, tag: int, step: int) -> None:
        if self.mix_params:  # updated from backward: on the wire at once, no window
            self.thread.window = None
            self._inflight.add(index)
        self._submit(index, buf, tag, step)

    def _submit(self, index: int, buf: torch.Tensor, tag: int, step: int) -> None:
        self._submitted.add(index)
        self.thread.submit(
            index,
            lambda: self.mixer.start(buf, index, step, tag + index),
            eager=not buf.is_cuda,
            collective=self.collective,
        )

    def before_update(self, step: int) -> None:
        # parameter buckets no forward used since the last step (not this step's own)
        self.wait_([i for i in sorted(self._inflight) if i not in self._submitted])

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        if self.thread is None:
            pending = [self.mixer.start(b, i, step, tag + i) for i, b in enumerate(bufs)]
            for p in pending:
                self.mixer.finish(p)
        elif self.mix_params:
            if not self._submitted:  # all after the step: in forward order, windowed
                self.thread.window = self._window
            for i in reversed(range(len(bufs))):  # forward order
                if i not in self._submitted:  # not already posted from backward
                    self._submit(i, bufs[i], tag, step)
                    self._inflight.add(i)
            self._submitted.clear()
        else:
            for i, buf in enumerate(bufs):
                if i not in self._submitted:  # parameters unused this step: no hook fired
                    self._submit(i, buf, tag, step)
            for i in range(len(bufs)):
                self.thread.wait(i)

    def wait_(self, indices: list[int] | None = None) -> None:
        if not self._inflight:
            return
        for i in sorted(self._inflight) if indices is None else indices:
            if i in self._inflight:
                self.thread.wait(i)
                self._inflight.discard(i)

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def close(self, step: int) -> None:
        if self.thread is not None:
            self.thread.close()
            self.thread = None

    def abandon(self) -> None:
        self._inflight.clear()
        self._submitted.clear()
        self.close(-1)


class LockstepTiming(TimingSpec):
    name = "lockstep"
    summary = "every bucket posted at a step is mixed within that step"
    forward_window = PARAM_WINDOW

    def build(self, ctx: TimingContext) -> Lockstep:
        return Lockstep(ctx.mixer, ctx.mix_params, ctx.thread, ctx.collective)


class EarlyTiming(LockstepTiming):
    """Lockstep's arithmetic; with the parameter mix each bucket's update and send move
    into backward (:mod:`gossipgrad.engine.bucket.early`)."""

    name = "early"
    summary = (
        "lockstep's result (the default); with --mix param each bucket is updated and sent "
        "from backward as soon as its gradient is complete, and the next forward waits for it"
    )

    def build(self, ctx: TimingContext) -> Lockstep:
        return Lockstep(ctx.mixer, ctx.mix_params, ctx.thread, ctx.collective, early=True)


TIMINGS.register(LockstepTiming.name, LockstepTiming(), replace=True)
TIMINGS.register(EarlyTiming.name, EarlyTiming(), replace=True)

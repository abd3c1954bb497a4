"""Scripted arrivals: a communicator whose bounded-lag frames arrive when a pattern says.

Real ranks under ``max_lag`` mix a frame whenever it happens to have arrived, so two runs
differ. Wrapped in :class:`Gate`, a rank's runtime sees a frame of step s from rank q
complete only once the rank's step has reached ``s + delay[s, q]`` (then it waits for the
bytes, which every rank posted long before), and every frame at a drain. The lagged timing,
its link, push-sum and gradient shares all run unchanged: only *when* a receive completes
is fixed, which is what makes a lagged run comparable with the simulator's (and
repeatable). Only receives on duplicates of the wrapped communicator with a step in their
context are gated (the lagged link's); collectives and the rest pass through.

    gate = Gate(comm, delay)          # delay[s, q]: steps after s that q's frame is due
    opt = build_optimizer(sgd, model, gate, max_lag=2, mix="param")
    gate.now = t                      # before every step
    with gate.open():                 # around a drain: every frame is due
        opt.drain()
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from gossipgrad.tools.simulate.runtime import Communicator, ReduceOp, Request, Tag, WaitContext


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0


class GatedRequest:
    """A receive that completes no earlier than step ``due`` of its rank's clock."""

    def __init__(self, inner: Request, due: float, clock: _Clock, timeout: float) -> None:
        self.inner, self.due, self.clock, self.timeout = inner, due, clock, timeout
        self.done = False

    def test(self) -> bool:
        if not self.done and self.clock.now >= self.due:
            self.inner.wait(self.timeout)  # due: its sender posted it steps ago
            self.done = True
        return self.done

    def wait(self, timeout: float) -> None:
        if not self.test():
            raise RuntimeError(
                f"a frame due at step {self.due} was waited for at step {self.clock.now}: "
                "the delay pattern exceeds the lag bound"
            )

    @property
    def ctx(self) -> Any:
        return getattr(self.inner, "ctx", None)


class Gate:
    """Wraps ``comm``; ``delay[s, q]`` is when (steps after s) rank q's frame of step s is
    mixed (frames of steps beyond the table are due at the drain)."""

    def __init__(
        self, comm: Communicator, delay: np.ndarray, gated: bool = False, clock: Any = None
    ) -> None:
        self.inner, self.delay, self.gated = comm, delay, gated
        self.clock = clock or _Clock()
        self.rank, self.size = comm.rank, comm.size

    @property
    def now(self) -> float:
        return self.clock.now

    @now.setter
    def now(self, step: float) -> None:
        self.clock.now = step

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        """Every frame is due inside (a drain delivers everything sent)."""
        before = self.clock.now
        self.clock.now = math.inf
        try:
            yield
        finally:
            self.clock.now = before

    def __getattr__(self, name: str) -> Any:  # timeout, policy, parent_ranks, ...
        return getattr(self.inner, name)

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Request:
        return self.inner.isend(buf, dst, tag, ctx)

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Request:
        req = self.inner.irecv(buf, src, tag, ctx)
        bucket = Tag.GRAD_BUCKET <= tag < Tag.PS_PUSH
        if not self.gated or not bucket or ctx is None or ctx.step is None:
            return req
        s = ctx.step
        due = s + self.delay[s, src] if s < len(self.delay) else math.inf
        return GatedRequest(req, float(due), self.clock, self.inner.timeout)

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> Request:
        return self.inner.iallreduce_(buf, op)

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self.inner.iallgather(sendbuf, recvbuf)

    def bcast_(self, buf: Any, root: int = 0) -> None:
        self.inner.bcast_(buf, root)

    def barrier(self) -> None:
        self.inner.barrier()

    def abort(self, code: int = 1) -> None:
        self.inner.abort(code)

    def dup(self) -> Gate:
        return Gate(self.inner.dup(), self.delay, gated=True, clock=self.clock)

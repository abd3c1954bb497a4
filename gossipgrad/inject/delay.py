"""Latency injection: hand each outgoing message to the transport ``delay`` seconds late.

The emulated cluster (``scripts/emucluster.py --delay-ms D``) shapes bandwidth with ``tbf``
but the kernel may lack ``netem``, so latency is injected here instead, from the environment
variable ``GOSSIPGRAD_INJECT_DELAY_MS`` (milliseconds, default 0 = off; ``gossipgrad.settings``)::

    GOSSIPGRAD_INJECT_DELAY_MS=5 mpiexec -n 2 gossipgrad bench exchange

Semantics: a one-way latency of D ms per point-to-point message. ``isend`` returns at once;
a single background thread posts the real send D ms later, in the order the sends were made
(so MPI's non-overtaking rule still holds). The receiver therefore sees each message D ms
(plus the link's own time) after it was sent, and the sender's request completes no earlier
than that. Receives are posted immediately. Collectives (allreduce, broadcast, barrier) are
not delayed: their real latency depends on the algorithm MPI picks, which this layer cannot
see. When the variable is unset or 0, no thread exists and ``isend`` takes its usual path
(one attribute test).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from gossipgrad.comm.base import CommTimeout, Request, WaitContext, WaitPolicy, poll


class DelayedRequest:
    """A send not yet handed to the transport; then the transport's own request."""

    def __init__(self, ctx: WaitContext, rank: int, policy: WaitPolicy) -> None:
        self.ctx, self.rank, self.policy = ctx, rank, policy
        self.inner: Request | None = None
        self.error: BaseException | None = None

    def test(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.inner is not None and self.inner.test()

    def wait(self, timeout: float) -> None:
        poll(
            self.test,
            timeout,
            lambda: CommTimeout(self.ctx.describe(self.rank, timeout)),
            self.policy,
        )


class DelayedPoster:
    """Runs ``post`` callables ``delay_s`` after they were queued, first in first out.

    One daemon thread per poster. A callable that raises marks its request failed; the
    error is raised by that request's ``test``/``wait`` (never swallowed).
    """

    def __init__(self, delay_s: float, rank: int = 0, policy: WaitPolicy | None = None) -> None:
        if delay_s <= 0:
            raise ValueError(f"delay must be > 0 s, got {delay_s}")
        self.delay_s, self.rank, self.policy = delay_s, rank, policy or WaitPolicy()
        self._queue: deque[tuple[float, Callable[[], Request], DelayedRequest]] = deque()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gossipgrad-delay", daemon=True)
        self._thread.start()

    def post(self, start: Callable[[], Request], ctx: WaitContext) -> DelayedRequest:
        req = DelayedRequest(ctx, self.rank, self.policy)
        with self._cond:
            self._queue.append((time.monotonic() + self.delay_s, start, req))
            self._cond.notify()
        return req

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                due, start, req = self._queue[0]
                left = due - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._queue.popleft()
            try:
                req.inner = start()
            except BaseException as exc:  # noqa: BLE001 - raised by req.test() in the caller
                req.error = exc

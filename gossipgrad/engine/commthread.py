"""A communication thread that posts bucket exchanges and drives them to completion.

Backward hands it a bucket as soon as the bucket's last gradient is ready; the thread calls
``exchange.start``, polls the in-flight requests (MPI progresses only inside MPI calls), and
runs ``exchange.finish`` when they complete, so the mix happens while backward continues on
other buckets. An error in the thread is kept and re-raised in the caller of :meth:`wait`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from gossipgrad.comm.base import POLL_MAX_PAUSE_S, PROGRESS_BURST, CommTimeout
from gossipgrad.comm.exchange import Exchange, Pending


class CommThread:
    """Runs bucket exchanges off the training thread.

    Args:
        exchange: the strategy.
        timeout: seconds a bucket may stay in flight before the step fails.
    """

    def __init__(self, exchange: Exchange, timeout: float, name: str = "gossipgrad-comm") -> None:
        self.exchange = exchange
        self.timeout = timeout
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._done: dict[int, threading.Event] = {}
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: int, start: Callable[[], Pending]) -> None:
        """Queue a bucket exchange under ``key``; ``start()`` posts it (called in the thread)."""
        self._done[key] = threading.Event()
        self._tasks.put((key, start))

    def wait(self, key: int) -> None:
        """Block until exchange ``key`` is finished; re-raise the thread's error, if any."""
        event = self._done[key]
        deadline = time.monotonic() + self.timeout + 1.0
        while not event.wait(0.05):
            if self._error is not None:
                raise self._error
            if time.monotonic() > deadline:  # the thread itself enforces per-request deadlines
                raise CommTimeout(f"bucket exchange {key} did not finish within {self.timeout:g} s")
        if self._error is not None:
            raise self._error
        del self._done[key]

    def close(self) -> None:
        self._stop = True
        self._tasks.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        inflight: list[tuple[int, Pending, float]] = []
        pause = 0.0
        try:
            while True:
                try:
                    task = self._tasks.get_nowait() if inflight else self._tasks.get()
                except queue.Empty:
                    task = False
                if task is None:
                    return
                if task:
                    key, start = task
                    inflight.append((key, start(), time.monotonic() + self.timeout))
                    pause = 0.0
                    continue
                if self._progress(inflight):
                    pause = 0.0
                else:
                    time.sleep(pause)
                    pause = min(max(pause * 2, 2e-5), POLL_MAX_PAUSE_S)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            self._error = exc
            for ev in list(self._done.values()):
                ev.set()

    def _progress(self, inflight: list[tuple[int, Pending, float]]) -> bool:
        """Finish every exchange whose requests completed; True if any did. When none has,
        drive MPI's progress with a burst of tests on the oldest request first (progress is
        global: a test of one request moves every transfer; see ``base.PROGRESS_BURST``)."""
        if self._sweep(inflight):
            return True
        oldest = next((r for r in inflight[0][1].requests if not r.test()), None)
        if oldest is not None:
            for _ in range(PROGRESS_BURST - 1):
                if oldest.test():
                    break
        return self._sweep(inflight)

    def _sweep(self, inflight: list[tuple[int, Pending, float]]) -> bool:
        progressed = False
        for item in list(inflight):
            key, pending, deadline = item
            waiting = [r for r in pending.requests if not r.test()]
            if not waiting:
                self.exchange.finish(pending)
                inflight.remove(item)
                self._done[key].set()
                progressed = True
            elif time.monotonic() > deadline:
                r = waiting[0]
                raise CommTimeout(r.ctx.describe(self.exchange.comm.rank, self.timeout))
        return progressed

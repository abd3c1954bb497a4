"""A communication thread that drives bucket exchanges to completion off the training thread.

Backward hands it a bucket as soon as the bucket's last gradient is ready. The exchange is
posted (``exchange.start``; in the caller's thread for host buffers, so the transfer starts
at once), then this thread polls the in-flight requests (MPI progresses only inside MPI
calls) and runs ``exchange.finish`` (the mix) as each completes, while backward continues on
other buckets. A caller blocked in :meth:`wait` polls too, under the same lock, so the last
bucket's completion is seen without a hand-off between threads. An error in the thread is
kept and re-raised in the caller of :meth:`wait`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from gossipgrad.comm.base import PROGRESS_BURST, WAIT_SPIN_S, Backoff, CommTimeout
from gossipgrad.comm.exchange import Exchange, Pending

Inflight = tuple[int, Pending, float]  # key, exchange, deadline


class CommThread:
    """Runs bucket exchanges off the training thread.

    Args:
        exchange: the strategy.
        timeout: seconds a bucket may stay in flight before the step fails.

    Invariant: a request is only ever tested by the thread holding ``_lock`` (MPI forbids
    two threads testing one request); a finished exchange is removed from the in-flight
    list under the lock and mixed by that thread alone, outside it.
    """

    def __init__(self, exchange: Exchange, timeout: float, name: str = "gossipgrad-comm") -> None:
        self.exchange = exchange
        self.timeout = timeout
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._done: dict[int, threading.Event] = {}
        self._inflight: list[Inflight] = []
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: int, start: Callable[[], Pending], eager: bool = False) -> None:
        """Queue a bucket exchange under ``key``; ``start()`` posts it.

        ``eager``: call ``start()`` here, in the caller's thread, so the transfer begins
        without waiting for this thread to be scheduled (on a loaded machine that can take
        milliseconds); this thread then only polls and mixes. Leave it False when posting
        is expensive (e.g. a device-to-host staging copy) and should stay off the caller.
        """
        self._done[key] = threading.Event()
        if eager:
            pending = start()
            self._tasks.put((key, lambda: pending))
        else:
            self._tasks.put((key, start))

    def wait(self, key: int) -> None:
        """Block until exchange ``key`` is finished, driving progress meanwhile; re-raise
        the thread's error, if any."""
        event = self._done[key]
        deadline = time.monotonic() + self.timeout + 1.0
        backoff = Backoff(WAIT_SPIN_S)
        while not event.is_set():
            if self._error is not None:
                raise self._error
            if self._poll(block=False):
                continue
            if time.monotonic() > deadline:  # each request also has its own deadline
                raise CommTimeout(f"bucket exchange {key} did not finish within {self.timeout:g} s")
            backoff.sleep()
        if self._error is not None:
            raise self._error
        del self._done[key]

    def close(self) -> None:
        self._tasks.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = Backoff()  # no spinning: this thread runs beside compute
        try:
            while True:
                if not self._inflight:
                    task = self._tasks.get()  # nothing to poll: sleep until work arrives
                    if task is None:
                        return
                    self._admit_one(task)
                    backoff.reset()
                    continue
                if self._poll(block=True):
                    backoff.reset()
                else:
                    backoff.sleep()
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            self._error = exc
            for ev in list(self._done.values()):
                ev.set()

    def _admit_one(self, task: tuple[int, Callable[[], Pending]]) -> None:
        key, start = task
        with self._lock:  # in queue order, also against a caller admitting in wait()
            self._inflight.append((key, start(), time.monotonic() + self.timeout))

    def _poll(self, block: bool) -> bool:
        """Admit queued exchanges, test the in-flight ones and finish those done; True if
        anything happened. With ``block=False`` give up at once if another thread polls."""
        if not self._lock.acquire(blocking=block):
            return False
        try:
            admitted = self._admit()
            done = self._completed()
        finally:
            self._lock.release()
        for key, pending, _ in done:  # removed from the list: this thread owns them
            self.exchange.finish(pending)
            self._done[key].set()
        return admitted or bool(done)

    def _admit(self) -> bool:
        """Move queued exchanges to the in-flight list (under the lock)."""
        admitted = False
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                return admitted
            if task is None:  # close(): leave it for the thread's own loop
                self._tasks.put(None)
                return admitted
            key, start = task
            self._inflight.append((key, start(), time.monotonic() + self.timeout))
            admitted = True

    def _completed(self) -> list[Inflight]:
        """Remove and return the exchanges whose requests completed (under the lock). When
        none has, drive MPI's progress with a burst of tests on the oldest request first
        (progress is global: a test of one request moves every transfer; see
        ``base.PROGRESS_BURST``)."""
        done = self._sweep()
        if done or not self._inflight:
            return done
        oldest = next((r for r in self._inflight[0][1].requests if not r.test()), None)
        if oldest is not None:
            for _ in range(PROGRESS_BURST - 1):
                if oldest.test():
                    break
        return self._sweep()

    def _sweep(self) -> list[Inflight]:
        done = []
        for item in list(self._inflight):
            _, pending, deadline = item
            waiting = [r for r in pending.requests if not r.test()]
            if not waiting:
                self._inflight.remove(item)
                done.append(item)
            elif time.monotonic() > deadline:
                raise CommTimeout(waiting[0].ctx.describe(self.exchange.comm.rank, self.timeout))
        return done

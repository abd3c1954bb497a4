"""A communication thread that drives bucket exchanges to completion off the training thread.

Backward hands it a bucket as soon as the bucket's last gradient is ready. The exchange is
posted (``exchange.start``; in the caller's thread for host buffers, so the transfer starts
at once), then this thread polls the in-flight requests (MPI progresses only inside MPI
calls) and runs ``exchange.finish`` (the mix) as each completes, while backward continues on
other buckets. A caller blocked in :meth:`wait` polls too, under the same lock, so the last
bucket's completion is seen without a hand-off between threads. An error in the thread is
kept and re-raised in the caller of :meth:`wait`.

``window`` bounds how many exchanges are on the wire at once; the rest wait in submission
order. The transport interleaves concurrent messages on one connection, so posting 16
buckets at once makes all of them arrive near the end; with a window they arrive one after
another, which is what a consumer in order (the forward pass waiting for parameter buckets)
needs. Every rank must then submit the same keys in the same order, or the window deadlocks
until the deadline; the optimizer uses a window only where the order is fixed.

``block`` (``GOSSIPGRAD_COMM_WAIT=block``, point-to-point exchanges only) replaces the
polling: this thread waits inside MPI (``MPI_Wait``, the GIL released) for the oldest
unfinished request, holding the lock, and a caller of :meth:`wait` sleeps on the bucket's
event instead of polling. The caller keeps the deadline: past it, it raises naming the peer
and tag this thread is blocked on, and the job ends (nothing can interrupt an MPI wait).
"""

# Over 300 lines on purpose: the thread, its lock and its wait protocol must be read together to
# check they cannot deadlock.

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from gossipgrad.choices import timeout_hint
from gossipgrad.comm.base import Backoff, CommTimeout, Communicator, WaitContext, blocking
from gossipgrad.comm.transport import Pending

Inflight = tuple[int, Pending, float]  # key, exchange, deadline


class Finisher(Protocol):
    """What completes an exchange: a bucket mixer, a transport, a router of both."""

    comm: Communicator

    def finish(self, pending: Pending) -> None: ...


class CommThread:
    """Runs bucket exchanges off the training thread.

    Args:
        exchange: what finishes each exchange (mixes it, or only completes it).
        timeout: seconds a bucket may stay in flight before the step fails.
        window: the most exchanges in flight at once (None: no limit).
        block: wait inside the transport instead of polling (see the module docstring);
            only for point-to-point exchanges, whose posting never needs the lock.

    Invariant: a request is only ever tested by the thread holding ``_lock`` (MPI forbids
    two threads testing one request); a finished exchange is removed from the in-flight
    list under the lock and mixed by that thread alone, outside it.
    """

    def __init__(
        self,
        exchange: Finisher,
        timeout: float,
        window: int | None = None,
        name: str = "gossipgrad-comm",
        block: bool = False,
    ) -> None:
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        self.exchange = exchange
        self.policy = exchange.comm.policy
        self.timeout = timeout
        self.window = window
        self.block = block
        self._blocked_on: WaitContext | None = None  # what a blocking wait is waiting for
        self._queued: deque[tuple[int, Callable[[], Pending]]] = deque()
        self._inflight: list[Inflight] = []
        self._done: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._work = threading.Event()
        self._closing = False
        self._waiters = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, key: int, start: Callable[[], Pending], eager: bool = False, collective: bool = False
    ) -> None:
        """Queue a bucket exchange under ``key``; ``start()`` posts it.

        ``eager``: call ``start()`` here, in the caller's thread, when the window has room
        and no other thread is polling (never wait for the lock: a poll can take a while),
        so the transfer begins without waiting for this thread to be scheduled (on a loaded
        machine that can take milliseconds). Leave it False when posting is expensive (e.g.
        a device-to-host staging copy) and should stay off the caller.

        ``collective``: the exchange is a collective (allreduce). MPI needs every rank to
        issue the collectives of a communicator in one order, and the caller may issue
        others (a barrier, an agreement) while this one is in flight: so it is posted here,
        now, waiting for the lock and ignoring the window, never later by this thread.
        """
        done = self._done.get(key)  # one Event per key, reused (creating one costs ~9 us)
        if done is None:
            self._done[key] = threading.Event()
        else:
            done.clear()
        if collective:
            with self._lock:
                self._inflight.append((key, start(), time.monotonic() + self.timeout))
            self._work.set()
            return
        if eager and self._lock.acquire(blocking=False):  # busy: the poller will post it
            try:
                if not self._queued and self._room():
                    self._inflight.append((key, start(), time.monotonic() + self.timeout))
                    start = None
            finally:
                self._lock.release()
        if start is not None:
            self._queued.append((key, start))  # deque.append is atomic
        self._work.set()

    def wait(self, key: int) -> None:
        """Block until exchange ``key`` (submitted since the last wait for it) is finished,
        driving progress meanwhile; re-raise the thread's error, if any."""
        event = self._done[key]
        deadline = time.monotonic() + self.timeout + 1.0
        with blocking():  # the training thread waits on the wire: the step's exposed time
            if self.block:
                self._sleep_until(event, key, deadline)
            else:
                self._drive_until(event, key, deadline)
        if self._error is not None:
            raise self._error

    def _drive_until(self, event: threading.Event, key: int, deadline: float) -> None:
        """Poll mode: drive progress from this thread until ``event`` is set (or an error,
        or the deadline)."""
        backoff = Backoff(self.policy.spin_for_this_thread(), self.policy.max_pause_s)
        self._waiters += 1  # the thread stands back: one poller, no GIL ping-pong
        try:
            while not event.is_set():
                if self._error is not None:
                    raise self._error
                if self._poll():
                    continue
                if time.monotonic() > deadline:  # each request also has its own deadline
                    raise CommTimeout(self._describe_stall(key))
                backoff.sleep()
        finally:
            self._waiters -= 1

    def done(self, key: int) -> bool:
        """True once exchange ``key`` (submitted since the last wait for it) has finished;
        never blocks; re-raises the thread's error, if any."""
        if self._error is not None:
            raise self._error
        return self._done[key].is_set()

    def poll(self) -> bool:
        """Drive progress once from the caller's thread (what :meth:`wait` does while it
        blocks), for a caller that waits on a condition of its own; True if anything
        happened. Re-raises the thread's error."""
        if self._error is not None:
            raise self._error
        return self._poll()

    def _sleep_until(self, event: threading.Event, key: int, deadline: float) -> None:
        """Block mode: sleep on ``event`` (this thread drives progress), in slices so that an
        error or the deadline is noticed."""
        while not event.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if self._error is not None:
                break
            if time.monotonic() > deadline:
                raise CommTimeout(self._describe_stall(key))
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop the thread once nothing is in flight or queued; raise RuntimeError naming
        the rank if it has not ended within ``timeout`` + 5 s (each exchange on the wire
        ends by its deadline, so a live thread then is stuck)."""
        self._closing = True
        self._work.set()
        limit = self.timeout + 5.0
        self._thread.join(timeout=limit)
        if self._thread.is_alive():
            raise RuntimeError(
                f"rank {self.exchange.comm.rank}: communication thread {self._thread.name!r} "
                f"did not stop within {limit:g} s of close() ({len(self._inflight)} bucket "
                f"exchange(s) in flight, {len(self._queued)} queued); it may be stuck in an "
                "MPI call: end the job"
            )

    def _describe_stall(self, key: int) -> str:
        """Why the wait for bucket ``key`` expired: its first unfinished request's context
        (rank, step, peer, tag) while it is on the wire, else this rank and the bucket."""
        rank = self.exchange.comm.rank
        blocked = self._blocked_on
        if blocked is not None:  # this thread sits in an MPI wait, holding the lock
            return blocked.describe(rank, self.timeout)
        if self._lock.acquire(timeout=1.0):  # only the lock holder may test a request
            try:
                for k, pending, _ in self._inflight:
                    waiting = [r for r in pending.requests if not r.test()] if k == key else []
                    ctx = getattr(waiting[0], "ctx", None) if waiting else None
                    if ctx is not None:
                        return ctx.describe(rank, self.timeout)
            finally:
                self._lock.release()
        where = (
            "queued, not yet posted"
            if any(k == key for k, _ in self._queued)
            else "posted, not yet mixed"
        )
        return (
            f"rank {rank}: bucket exchange {key} did not finish within {self.timeout:g} s "
            f"({where}); is every rank alive and at the same step? {timeout_hint()}"
        )

    def _room(self) -> bool:
        return self.window is None or len(self._inflight) < self.window

    def _run(self) -> None:
        backoff = Backoff(0.0, self.policy.max_pause_s)  # no spinning: runs beside compute
        try:
            while True:
                self._work.clear()
                if not self._inflight and not self._queued:
                    if self._closing:
                        return
                    self._work.wait()  # nothing to poll: sleep until work arrives
                    backoff.reset()
                    continue
                if self._waiters and not self.block:  # a caller in wait() polls for both
                    time.sleep(self.policy.max_pause_s)
                elif self._poll():
                    backoff.reset()
                elif not (self.block and self._block()):
                    backoff.sleep()
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            self._error = exc
            for ev in list(self._done.values()):
                ev.set()

    def _poll(self) -> bool:
        """Post what the window allows, test the in-flight exchanges and finish those done;
        True if anything happened. Gives up at once if another thread holds the lock (it is
        polling; waiting for it would only add a wake-up to its release)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            admitted = self._admit()
            done = self._completed()
            admitted = self._admit() or admitted  # slots freed by what completed
        finally:
            self._lock.release()
        for key, pending, _ in done:  # removed from the list: this thread owns them
            self.exchange.finish(pending)
            self._done[key].set()
        return admitted or bool(done)

    def _block(self) -> bool:
        """Wait inside the transport for the oldest exchange's first unfinished request,
        holding the lock; True if it did (False: the request cannot block, or the lock is
        busy)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if not self._inflight:
                return False
            waiting = [r for r in self._inflight[0][1].requests if not r.test()]
            block = getattr(waiting[0], "block", None) if waiting else None
            if block is None:
                return False
            self._blocked_on = getattr(waiting[0], "ctx", None)
            return bool(block())
        finally:
            self._blocked_on = None
            self._lock.release()

    def _admit(self) -> bool:
        """Post queued exchanges, in order, while the window has room (under the lock)."""
        admitted = False
        while self._queued and self._room():
            key, start = self._queued.popleft()
            self._inflight.append((key, start(), time.monotonic() + self.timeout))
            admitted = True
        return admitted

    def _completed(self) -> list[Inflight]:
        """Remove and return the exchanges whose requests completed (under the lock). When
        none has, drive MPI's progress with a burst of tests on the oldest request first
        (progress is global: a test of one request moves every transfer; see
        ``WaitPolicy.burst``)."""
        done = self._sweep()
        if done or not self._inflight:
            return done
        oldest = next((r for r in self._inflight[0][1].requests if not r.test()), None)
        if oldest is not None:
            for _ in range(self.policy.burst - 1):
                if oldest.test():
                    break
        return self._sweep()

    def _sweep(self) -> list[Inflight]:
        done = []
        for item in list(self._inflight):
            _, pending, deadline = item
            waiting = [r for r in pending.requests if not r.test()]
            if not waiting and pending.advance():  # a next stage is on the wire now
                continue
            if not waiting:
                self._inflight.remove(item)
                done.append(item)
            elif time.monotonic() > deadline:
                raise CommTimeout(waiting[0].ctx.describe(self.exchange.comm.rank, self.timeout))
        return done

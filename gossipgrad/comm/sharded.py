"""Moving a bucket's shards point to point: what an allreduce that decodes before it adds
sends (:mod:`gossipgrad.engine.bucket.sharded`). Bytes only; the engine decodes and sums.

    >>> import torch
    >>> from gossipgrad.comm.local import run_ranks
    >>> def body(comm):
    ...     t = ShardTransport(comm)
    ...     wires = [torch.full((4,), comm.rank, dtype=torch.uint8)] * comm.size
    ...     requests, recvs = t.scatter(wires, 4, torch.empty(0), index=0, step=0, tag=1000)
    ...     for r in requests:
    ...         r.wait(10.0)
    ...     return [None if b is None else int(b[0]) for b in recvs]
    >>> run_ranks(3, body)
    [[None, 1, 2], [0, None, 2], [0, 1, None]]
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Request, Tag, WaitContext
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Transport


class ShardTransport(Transport):
    """Point-to-point moves of a bucket's shards, one shard per rank (shard ``r`` is
    ``bounds(numel)[r]``): :meth:`scatter` sends shard ``s`` of this rank's wires to rank
    ``s`` and receives every other rank's wire of this rank's shard; :meth:`gather` sends
    one wire (this rank's shard) to every rank and receives theirs. What an allreduce that
    decodes before it adds moves (:mod:`gossipgrad.engine.bucket.sharded`): ``2 (size - 1) / size``
    of the encoded bucket per rank, as a ring does.

    The gather's tag is the scatter's plus :attr:`Tag.SHARD_GATHER`, so a rank's two
    stages to one peer never match each other's receives.
    """

    moves = True

    def __init__(self, comm: Communicator, stager: Stager | None = None) -> None:
        super().__init__(comm, stager)
        self._recv: dict[tuple[Any, ...], Any] = {}
        self._send: dict[Any, Any] = {}

    def bounds(self, numel: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` of each rank's shard of ``numel`` values (sizes differ by one at
        most; empty where ``numel < size``)."""
        p = self.comm.size
        return [(r * numel // p, (r + 1) * numel // p) for r in range(p)]

    def scatter(
        self,
        wires: list[Any],
        recv_nbytes: int,
        like: torch.Tensor,
        index: int,
        step: int,
        tag: int,
    ) -> tuple[list[Request], list[Any]]:
        """Send ``wires[s]`` to rank ``s`` (``s`` != this rank), receive ``recv_nbytes`` from
        every other rank; the requests and the receive buffers (None at this rank)."""
        recvs = self._receive_buffers("s", index, [recv_nbytes] * self.comm.size, like)
        return self._post(wires, recvs, index, step, tag, "s"), recvs

    def gather(
        self,
        wire: Any,
        recv_nbytes: list[int],
        like: torch.Tensor,
        index: int,
        step: int,
        tag: int,
    ) -> tuple[list[Request], list[Any]]:
        """Send ``wire`` to every other rank, receive rank ``r``'s (``recv_nbytes[r]``
        bytes); the requests and the receive buffers (None at this rank)."""
        recvs = self._receive_buffers("g", index, recv_nbytes, like)
        wires = [wire] * self.comm.size
        return self._post(wires, recvs, index, step, tag + Tag.SHARD_GATHER, "g"), recvs

    def _receive_buffers(
        self, stage: str, index: int, nbytes: list[int], like: torch.Tensor
    ) -> list[Any]:
        me = self.comm.rank
        return [
            None if r == me else self._buffer((stage, index, r), nbytes[r], like)
            for r in range(self.comm.size)
        ]

    def _post(
        self, wires: list[Any], recvs: list[Any], index: int, step: int, tag: int, stage: str
    ) -> list[Request]:
        me, requests = self.comm.rank, []
        for r in range(self.comm.size):
            if r == me:
                continue
            ctx = WaitContext("sent nothing", r, tag, step)
            requests.append(self.comm.irecv(host_or_device(recvs[r]), r, tag, ctx))
        for r in range(self.comm.size):
            if r == me:
                continue
            wire = wires[r]
            self.stager.ready(wire)
            if self.stager.staging(wire):
                wire = self.stager.outgoing(wire, self._send, (stage, index, r))
            ctx = WaitContext("received nothing", r, tag, step)
            requests.append(self.comm.isend(host_or_device(wire), r, tag, ctx))
        return requests

    def _buffer(self, key: tuple[Any, ...], nbytes: int, like: torch.Tensor) -> Any:
        hit = self._recv.get(key)
        if hit is None or hit.numel() != nbytes:
            wire = torch.empty(nbytes, dtype=torch.uint8, device=like.device)
            hit = self._recv[key] = self.stager.empty_like(wire)
        return hit

    def incoming(self, recv: Any, like: torch.Tensor) -> torch.Tensor:
        """A received wire on ``like``'s device."""
        return self.stager.incoming(recv, like)


def host_or_device(t: torch.Tensor) -> Any:
    """What a communicator takes: a numpy view of a host tensor, a device tensor as it is."""
    return t if t.is_cuda else host_array(t)

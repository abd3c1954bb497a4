"""Moving one Linear layer's sufficient factors (bytes only; the engine rebuilds and mixes).

The weight gradient of a Linear layer (``M x N``) over ``K`` rows of input is
``G = dY^T X`` (``dY``: ``K x M`` output gradients, ``X``: ``K x N`` inputs). Instead of
``G`` a rank sends the block ``[dY | X]`` (``K (M + N)`` numbers, zero rows padding it to
the agreed ``rows``), through the wire codec:

- ``peer`` (gossip): to this step's ``dst``, from its ``src``; :meth:`FactorTransport.unpack`
  gives the peer's ``(dY, X)``;
- ``allgather`` (allreduce, ps): every rank's block to every rank; ``unpack`` gives the
  concatenated ``([dY_0; ...; dY_p-1], [X_0; ...; X_p-1])``.

Zero rows add exact zeros to any product, so padding changes no sum. ``rows`` must be the
same on every rank (the engine agrees on it once). Only raw buffers travel
(``isend``/``irecv``/``iallgather``).

    >>> import torch
    >>> from gossipgrad.comm.local import run_ranks
    >>> def body(comm):
    ...     dy, x = torch.full((2, 3), float(comm.rank)), torch.ones(2, 4)
    ...     t = FactorTransport(comm, one_peer=False)
    ...     pending = t.start(torch.zeros(3, 4), [dy], [x], rows=2, index=0, step=0)
    ...     t.wait(pending)
    ...     dys, xs = t.unpack(pending)
    ...     return dys.shape, float(dys.sum()), xs.shape
    >>> run_ranks(2, body)[0]
    (torch.Size([4, 3]), 6.0, torch.Size([4, 4]))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Tag, WaitContext
from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Pending

Factors = tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]  # (dYs, Xs): one layer's rows


@dataclass
class FactorPending(Pending):
    """One layer's exchange in flight: ``buf`` is the layer's gradient (``M x N``);
    ``inner`` is set for the matrix form (a bucket exchange of the gradient)."""

    rows: int = 0
    inner: Pending | None = None
    sent: Any = None  # the encoded block this rank sent (a lossy codec's "sent" values)

    def advance(self) -> bool:
        """The matrix form's next stage is its bucket exchange's (see :class:`Pending`)."""
        if self.inner is None or not self.inner.advance():
            return False
        self.requests = list(self.inner.requests)
        return True


class FactorTransport:
    """Moves Linear layers' factor blocks over ``comm``: to this step's peer, or all-gathered.

    Args:
        comm: the communicator (the engine gives factors a duplicate of its own, so their
            all-gathers are ordered apart from the buckets' allreduces).
        one_peer: to the peer (gossip), else an all-gather from every rank.
        schedule: the partner schedule (peer).
        stager: how device tensors reach MPI (default: direct).
        codec: the wire codec of the blocks (default: the identity); its error feedback
            is switched off (a block's rows are new inputs and gradients every step, and
            a product of remainders would not add up to anything).

    Buffers are cached per layer ``index`` and reused step to step; a buffer is not written
    while its exchange is in flight (every exchange finishes within its step).
    """

    def __init__(
        self,
        comm: Communicator,
        one_peer: bool,
        schedule: Schedule | None = None,
        stager: Stager | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.comm, self.one_peer = comm, one_peer
        self.schedule = schedule or Schedule(comm.size, "auto", 0, True)
        self.stager = stager or Stager(cuda_aware=False)
        self.codec = codec or Codec()
        if self.codec.feedback:
            self.codec.set_feedback(False)
        self._blocks: dict[int, torch.Tensor] = {}
        self._wires: dict[int, torch.Tensor] = {}
        self._staged: dict[int, torch.Tensor] = {}
        self._recv: dict[int, torch.Tensor] = {}

    def start(
        self,
        grad: torch.Tensor,
        dys: Sequence[torch.Tensor],
        xs: Sequence[torch.Tensor],
        rows: int,
        index: int,
        step: int,
    ) -> FactorPending:
        """Pack ``dys`` (each ``k_i x M``) and ``xs`` (each ``k_i x N``), zero-padded to
        ``rows`` rows in all, and post their exchange. ``grad`` is not read. ValueError if
        the pieces hold more than ``rows`` rows."""
        block = self._pack(grad, (dys, xs), rows, index)
        if self.comm.size == 1:
            return FactorPending(grad, rows=rows)
        wire = (
            block
            if self.codec.in_place
            else self.codec.encode_(block, self._wire(index, block), index)
        )
        self.stager.ready(wire)
        out = self.stager.outgoing(wire, self._staged, index) if self.stager.staging(wire) else wire
        tag = Tag.FACTOR + index
        if self.one_peer:
            peers = self.schedule.peers(self.comm.rank, step)
            if peers is None or peers.idle:
                return FactorPending(grad, rows=rows)
            recv = self._receive_buffer(index, out, 1)
            rq = self.comm.irecv(
                recv, peers.src, tag, WaitContext("sent nothing", peers.src, tag, step)
            )
            sq = self.comm.isend(
                out, peers.dst, tag, WaitContext("received nothing", peers.dst, tag, step)
            )
            return FactorPending(
                grad,
                [rq, sq],
                wire=block,
                recv=recv,
                weight=peers.weight,
                key=index,
                rows=rows,
                sent=None if self.codec.lossless else wire,
            )
        recv = self._receive_buffer(index, out, self.comm.size)
        return FactorPending(
            grad, [self.comm.iallgather(out, recv)], wire=block, recv=recv, key=index, rows=rows
        )

    def wait(self, pending: FactorPending) -> None:
        for r in pending.requests:
            r.wait(self.comm.timeout)

    def unpack(self, pending: FactorPending) -> tuple[torch.Tensor, torch.Tensor] | None:
        """After :meth:`wait`: the received ``(dY, X)`` (peer: one block; allgather: every
        rank's, concatenated in rank order), or None when nothing was received."""
        if pending.recv is None:
            return None
        grad, rows, block = pending.buf, pending.rows, pending.wire
        m, n = grad.shape
        recv = self.stager.incoming(pending.recv, grad)
        senders = 1 if self.one_peer else self.comm.size
        parts = recv.view(senders, -1)
        values = [self.codec.decode(parts[i], block, pending.key) for i in range(senders)]
        if self.codec.in_place:  # the identity: the received buffer is the blocks
            blocks = parts
        else:
            blocks = torch.stack(values)
        return _split(blocks, rows, m, n)

    def unpack_sent(self, pending: FactorPending) -> tuple[torch.Tensor, torch.Tensor] | None:
        """After :meth:`wait`, peer pattern: this rank's block as the peer decodes it (None
        for a lossless codec: the peer got it exactly)."""
        if pending.sent is None or pending.recv is None:
            return None
        m, n = pending.buf.shape
        block = self.codec.decode(pending.sent, pending.wire, pending.key)
        return _split(block.view(1, -1), pending.rows, m, n)

    def _pack(self, grad: torch.Tensor, factors: Factors, rows: int, index: int) -> torch.Tensor:
        """``factors`` into this layer's send block (allocated once per shape)."""
        dys, xs = factors
        m, n = grad.shape
        k = sum(int(d.shape[0]) for d in dys)
        if k > rows or len(dys) != len(xs):
            raise ValueError(f"layer {index}: {k} rows of factors do not fit the agreed {rows}")
        numel = rows * (m + n)
        send = self._blocks.get(index)
        if send is None or send.numel() != numel or send.device != grad.device:
            send = self._blocks[index] = torch.zeros(numel, dtype=grad.dtype, device=grad.device)
        dy_all, x_all = send[: rows * m].view(rows, m), send[rows * m :].view(rows, n)
        at = 0
        for dy, x in zip(dys, xs, strict=True):
            if dy.shape[0] != x.shape[0] or dy.shape[1] != m or x.shape[1] != n:
                raise ValueError(
                    f"layer {index}: factors {tuple(dy.shape)} and "
                    f"{tuple(x.shape)} do not make a {m} x {n} gradient"
                )
            dy_all[at : at + dy.shape[0]].copy_(dy)
            x_all[at : at + x.shape[0]].copy_(x)
            at += int(dy.shape[0])
        dy_all[at:].zero_()
        x_all[at:].zero_()
        return send

    def _wire(self, index: int, block: torch.Tensor) -> torch.Tensor:
        wire = self._wires.get(index)
        nbytes = self.codec.wire_nbytes(block)
        if (
            wire is None
            or wire.numel() * wire.element_size() != nbytes
            or wire.device != block.device
        ):
            wire = self._wires[index] = self.codec.wire_like(block)
        return wire

    def _receive_buffer(self, index: int, like: torch.Tensor, copies: int) -> torch.Tensor:
        numel = like.numel() * copies
        buf = self._recv.get(index)
        if (
            buf is None
            or buf.numel() != numel
            or buf.device != like.device
            or buf.dtype != like.dtype
        ):
            buf = self._recv[index] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return buf

    def block_nbytes(self, rows: int, out_features: int, in_features: int, itemsize: int) -> int:
        """Wire bytes of one layer's block of ``rows`` rows."""
        return self.codec.wire_nbytes((rows * (out_features + in_features), itemsize))


def _split(blocks: torch.Tensor, rows: int, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dY, X)`` of blocks ``[dY | X]`` (one per row of ``blocks``), concatenated."""
    return blocks[:, : rows * m].reshape(-1, m), blocks[:, rows * m :].reshape(-1, n)

"""Exchanging one Linear layer's weight gradient as sufficient factors, or as the matrix.

The weight gradient of a Linear layer (``M x N``) over ``K`` rows of input is
``G = dY^T X`` (``dY``: ``K x M`` output gradients, ``X``: ``K x N`` inputs). Instead of
``G`` a rank sends ``[dY | X]`` (``K (M + N)`` numbers, packed into one buffer, zero rows
padding it to the agreed ``rows``) and the receiver rebuilds:

- gossip (:data:`Pattern.PEER`): send to this step's ``dst``, receive from ``src``;
  ``grad <- (grad + dY_src^T X_src) / 2``: one product, the peer's (``grad`` already holds
  this rank's own product, from autograd);
- allreduce (:data:`Pattern.ALLGATHER`): an all-gather of every rank's block;
  ``grad <- (1/size) [dY_0; ...; dY_p-1]^T [X_0; ...; X_p-1]``: one product of the
  concatenated factors, the same on every rank (so the ranks stay bit-identical; the own
  autograd gradient is replaced).

Zero rows add exact zeros, so padding changes no sum. ``rows`` must be the same on every
rank (the engine agrees on it once). Only raw buffers travel (``isend``/``irecv``/
``iallgather``). A layer may also go as the matrix (``start_matrix``): the strategy's
ordinary bucket exchange of ``grad`` under the layer's tag. :func:`exchange_layer_` is the
whole thing for one layer, blocking: decide (``plan.factors.decide``), exchange, rebuild.

    >>> import torch
    >>> from gossipgrad.comm.local import run_ranks
    >>> def body(comm):
    ...     gen = torch.Generator().manual_seed(comm.rank)
    ...     dy, x = torch.randn(3, 4, generator=gen), torch.randn(3, 5, generator=gen)
    ...     grad = dy.t() @ x                       # what autograd left in p.grad
    ...     ex = FactorExchange(comm, "allreduce")
    ...     d = exchange_layer_(ex, "on", grad, [dy], [x], rows=3, index=0, step=0)
    ...     return d.form, grad
    >>> (form, g0), (_, g1) = run_ranks(2, body)
    >>> form, torch.allclose(g0, g1), g0.shape
    ('factors', True, torch.Size([4, 5]))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Request, Tag, WaitContext
from gossipgrad.comm.exchange import Exchange, Pending, make_exchange
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.options import Strategy, SufficientFactors
from gossipgrad.plan.factors import Decision, Form, Pattern, decide, pattern


@dataclass
class FactorPending(Pending):
    """One layer's exchange in flight: ``buf`` is the layer's gradient (``M x N``), rebuilt
    in place by :meth:`FactorExchange.finish`; ``inner`` is set for the matrix form."""

    rows: int = 0
    inner: Pending | None = None
    requests: list[Request] = field(default_factory=list)


class FactorExchange:
    """Moves Linear layers' factors (or matrices) for one strategy over ``comm``.

    Args:
        comm: the communicator (the engine gives factors a duplicate of its own, so their
            all-gathers are ordered apart from the buckets' allreduces).
        strategy: gossip (the peer), allreduce or ps (all-gather); see
            ``plan.factors.pattern``.
        schedule: gossip's partner schedule (default: the auto topology, seed 0).
        stager: how device tensors reach MPI (default: direct).

    Buffers are cached per layer ``index`` and reused step to step; a buffer is not written
    while its exchange is in flight (every exchange finishes within its step).
    """

    def __init__(
        self,
        comm: Communicator,
        strategy: Strategy | str,
        schedule: Schedule | None = None,
        stager: Stager | None = None,
    ) -> None:
        self.comm = comm
        self.strategy = Strategy(strategy)
        self.pattern = pattern(self.strategy)
        self.schedule = schedule or Schedule(comm.size, "auto", 0, True)
        self.stager = stager or Stager(cuda_aware=False)
        # ps: a layer decided "matrix" is averaged by allreduce, as many bytes as ps's push
        # and pull, and updated on every rank like its factor-form neighbours
        matrix = Strategy.ALLREDUCE if self.strategy is Strategy.PS else self.strategy
        self.matrix: Exchange = make_exchange(matrix, comm, self.schedule, self.stager)
        self._send: dict[int, torch.Tensor] = {}
        self._staged: dict[int, Any] = {}
        self._recv: dict[int, torch.Tensor] = {}

    # -- the matrix ------------------------------------------------------------------
    def start_matrix(self, grad: torch.Tensor, index: int, step: int) -> FactorPending:
        """Post the ordinary exchange of ``grad`` (contiguous) under tag ``FACTOR + index``."""
        inner = self.matrix.start(grad.view(-1), index, step, Tag.FACTOR + index)
        return FactorPending(grad, list(inner.requests), inner=inner)

    # -- the factors -----------------------------------------------------------------
    def start_factors(
        self,
        grad: torch.Tensor,
        dys: Sequence[torch.Tensor],
        xs: Sequence[torch.Tensor],
        rows: int,
        index: int,
        step: int,
    ) -> FactorPending:
        """Pack ``dys`` (each ``k_i x M``) and ``xs`` (each ``k_i x N``), zero-padded to
        ``rows`` rows in all, and post their exchange. ``grad`` is not read until
        :meth:`finish`. ValueError if the pieces hold more than ``rows`` rows."""
        send = self._pack(grad, dys, xs, rows, index)
        if self.comm.size == 1:
            return FactorPending(grad, rows=rows)
        self.stager.ready(send)
        wire = (
            self.stager.outgoing(send, self._staged, index) if self.stager.staging(send) else send
        )
        tag = Tag.FACTOR + index
        if self.pattern is Pattern.PEER:
            peers = self.schedule.peers(self.comm.rank, step)
            if peers is None:
                return FactorPending(grad, rows=rows)
            recv = self._buffer(index, wire, 1)
            rq = self.comm.irecv(
                recv, peers.src, tag, WaitContext("sent nothing", peers.src, tag, step)
            )
            sq = self.comm.isend(
                wire, peers.dst, tag, WaitContext("received nothing", peers.dst, tag, step)
            )
            return FactorPending(grad, [rq, sq], recv=recv, rows=rows)
        recv = self._buffer(index, wire, self.comm.size)
        return FactorPending(grad, [self.comm.iallgather(wire, recv)], recv=recv, rows=rows)

    def _pack(
        self,
        grad: torch.Tensor,
        dys: Sequence[torch.Tensor],
        xs: Sequence[torch.Tensor],
        rows: int,
        index: int,
    ) -> torch.Tensor:
        m, n = grad.shape
        k = sum(int(d.shape[0]) for d in dys)
        if k > rows or len(dys) != len(xs):
            raise ValueError(f"layer {index}: {k} rows of factors do not fit the agreed {rows}")
        numel = rows * (m + n)
        send = self._send.get(index)
        if send is None or send.numel() != numel or send.device != grad.device:
            send = self._send[index] = torch.zeros(numel, dtype=grad.dtype, device=grad.device)
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

    def _buffer(self, index: int, like: torch.Tensor, copies: int) -> torch.Tensor:
        numel = like.numel() * copies
        buf = self._recv.get(index)
        if buf is None or buf.numel() != numel or buf.device != like.device:
            buf = self._recv[index] = torch.empty(
                numel, dtype=like.dtype, device=like.device, pin_memory=False
            )
        return buf

    # -- completion ------------------------------------------------------------------
    def finish(self, pending: FactorPending) -> None:
        """Wait (with the communicator's deadline) and leave the mixed gradient in
        ``pending.buf``, in place."""
        if pending.inner is not None:
            self.matrix.finish(pending.inner)
            return
        for r in pending.requests:
            r.wait(self.comm.timeout)
        if pending.recv is None:
            return
        grad, rows = pending.buf, pending.rows
        m, n = grad.shape
        recv = self.stager.incoming(pending.recv, grad)
        if self.pattern is Pattern.PEER:
            dy, x = recv[: rows * m].view(rows, m), recv[rows * m :].view(rows, n)
            grad.addmm_(dy.t(), x, beta=0.5, alpha=0.5)  # (own + peer's) / 2
            return
        blocks = recv.view(self.comm.size, rows * (m + n))
        dy = blocks[:, : rows * m].reshape(-1, m)  # [dY_0; ...; dY_p-1]: a copy, K p x M
        x = blocks[:, rows * m :].reshape(-1, n)
        grad.addmm_(dy.t(), x, beta=0.0, alpha=1.0 / self.comm.size)

    @staticmethod
    def bytes_sent(decision: Decision) -> float:
        """Bytes this rank sends per step for a layer exchanged as ``decision`` says."""
        return decision.factor_bytes if decision.form == Form.FACTORS else decision.matrix_bytes


def exchange_layer_(
    exchange: FactorExchange,
    mode: SufficientFactors | str,
    grad: torch.Tensor,
    dys: Sequence[torch.Tensor],
    xs: Sequence[torch.Tensor],
    rows: int,
    index: int,
    step: int,
) -> Decision:
    """Decide one layer's form for ``rows`` rows (the same on every rank), exchange it and
    rebuild ``grad`` (this rank's own gradient on entry, the mixed one on return) in place.
    Blocking; collective for the all-gather pattern. Returns the decision."""
    m, n = grad.shape
    d = decide(mode, exchange.strategy, exchange.comm.size, rows, m, n, grad.element_size())
    if d.form == Form.FACTORS:
        exchange.finish(exchange.start_factors(grad, dys, xs, rows, index, step))
    else:
        exchange.finish(exchange.start_matrix(grad, index, step))
    return d

"""Gossip between nodes, a node's ranks averaged first (``--strategy gossip-node``).

One bucket's step, in three stages (the moves are :class:`~gossipgrad.comm.nodes.NodeTransport`'s):

1. scatter: every rank sends each other rank of its node that rank's shard of the bucket;
2. each rank sums its shard over the node (float32, local-index order, its own first) and
   divides by the node's ranks: the node's mean of that shard. Then it exchanges that shard
   with the rank of the same local index on the schedule's partner node (a schedule over
   nodes, hypercube or dissemination, rotated every cycle) and mixes with the rule's
   weight: ``shard <- (1 - w) shard + w peer``. A wire codec (``--wire``) encodes this
   exchange only, the one that crosses the node's network interface; with a lossy one the
   shard moves by ``w (peer - sent)``, the decoded difference its partner applies with the
   other sign, as plain gossip does, so the mean is kept;
3. gather: every rank sends its mixed shard to the node's other ranks, which write it into
   place.

Every rank of a node then holds the same bucket, the pairwise mix of two nodes' means: the
mean over all ranks is kept (nodes hold as many ranks; each mix moves both partners by the
same difference), and with a hypercube over a power-of-two number of nodes every rank holds
the global mean after log2(nodes) steps, as plain gossip does over ranks. One node (every
rank on one host): the node's mean each step, an allreduce by another road.

The second and third stages are posted by whoever finds the one before complete (the
communication thread, or the caller's wait), through :meth:`Pending.advance`.

A device bucket with an MPI that is not CUDA-aware is staged whole: copied to pinned host
memory at the start, the three stages run there (the sums and the mix on the host), and the
result is copied back at the finish, so the bucket is only read until then.
"""

from __future__ import annotations

import torch

from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.nodes import NodeTransport
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.bucket.rules import Average


class NodeMix:
    """Args:
    transport: the node-level moves.
    rule: its ``mix_`` mixes a shard with the partner node's.
    codec: what the exchange between nodes looks like on the wire (default: float32 as
        it is); the moves within the node are float32 whatever it is.
    """

    def __init__(self, transport: NodeTransport, rule: Average, codec: Codec | None = None):
        self.transport, self.rule = transport, rule
        self.codec = codec or Codec()
        self._wires: dict[int, torch.Tensor] = {}  # encoded shards by bucket index
        self.comm = transport.comm
        self.stager = transport.stager
        self._host: dict[int, torch.Tensor] = {}  # staged buckets by index

    @property
    def schedule(self) -> Schedule:
        """The schedule over nodes (the exchange's topology is this one's)."""
        return self.transport.schedule

    def bytes_per_step(self, nbytes: int, wire_nbytes: int) -> float:
        """Within the node float32, between nodes the codec's bytes
        (:meth:`NodeTransport.bytes_per_step`)."""
        return self.transport.bytes_per_step(nbytes, wire_nbytes)

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        """Post stage 1 (stages 2 and 3 follow by :meth:`Pending.advance`); ``buf`` is
        read, and its own shard written (staged: only read), until :meth:`finish`."""
        staged = None
        if self.stager.staging(buf):  # ``staged``: the device bucket the host copy returns to
            staged, buf = buf, self.stager.outgoing(buf, self._host, index)
        else:
            self.stager.ready(buf)  # a device bucket MPI reads directly is complete
        pending = Pending(buf, key=index, staged=staged)
        if self.transport.layout.ranks_per_node == 1:
            self._between(pending, step, tag)  # no node to average: gossip as it is
            return pending
        pending.requests = self.transport.scatter(buf, index, step, tag)
        pending.then = lambda p: self._between(p, step, tag, summed=False)
        return pending

    def _between(self, pending: Pending, step: int, tag: int, summed: bool = True) -> None:
        """Stage 2: the node's mean of this rank's shard, then its exchange with the partner
        node's (stage 3 follows it, or, with nothing to exchange, is posted now)."""
        buf, index = pending.buf, pending.key
        lo, hi = self.transport.bounds(buf.numel())[self.transport.local]
        shard = buf[lo:hi]
        if not summed:
            for other in self.transport.received(index):
                shard.add_(other)
            self.rule.mean_(shard, self.transport.layout.ranks_per_node)
        peers = self.transport.peers(step)
        if peers is None:  # one node, or idle this step: gather the node's mean
            self._gather(pending, step, tag)
            return
        wire = (
            shard
            if self.codec.in_place
            else self.codec.encode_(shard, self._wire(index, shard), index)
        )
        self.stager.ready(wire)
        pending.requests, recv = self.transport.exchange(wire, peers, index, step, tag)
        pending.then = lambda p: self._mix(p, wire, recv, peers.weight, step, tag)

    def _wire(self, index: int, like: torch.Tensor) -> torch.Tensor:
        wire = self._wires.get(index)
        nbytes = self.codec.wire_nbytes(like)
        if (
            wire is None
            or wire.device != like.device
            or wire.numel() * wire.element_size() != nbytes
        ):
            wire = self._wires[index] = self.codec.wire_like(like)
        return wire

    def _mix(
        self,
        pending: Pending,
        wire: torch.Tensor,
        recv: torch.Tensor,
        weight: float,
        step: int,
        tag: int,
    ) -> None:
        """Stage 3: mix the shard with the partner node's, then gather every shard."""
        buf, key = pending.buf, pending.key
        lo, hi = self.transport.bounds(buf.numel())[self.transport.local]
        shard = buf[lo:hi]
        peer = self.codec.decode(recv, shard, key)
        sent = None if self.codec.lossless else self.codec.decode(wire, shard, key)
        self.rule.mix_(shard, peer, weight, sent)
        self._gather(pending, step, tag)

    def _gather(self, pending: Pending, step: int, tag: int) -> None:
        if self.transport.layout.ranks_per_node == 1:
            pending.requests, pending.then = [], None
            return
        self.stager.ready(pending.buf)
        pending.requests = self.transport.gather(pending.buf, pending.key, step, tag)
        pending.then = None

    def finish(self, pending: Pending) -> None:
        """Wait for every stage; the bucket then holds the mix (a staged one copied back)."""
        self.transport.wait(pending)
        if pending.staged is not None:
            pending.staged.copy_(pending.buf)
            pending.buf, pending.staged = pending.staged, None

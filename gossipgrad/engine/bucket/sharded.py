"""An allreduce that decodes before it adds: the mean over ranks of a bucket sent through a
lossy wire codec, summed in float32 once (``--strategy allreduce --wire bf16|fp16|fp8``).

An MPI allreduce of bf16 or fp16 buffers rounds every partial sum back to the wire type
(size - 1 roundings along a ring) and cannot sum buffers with different scales at all. So
a codec that is not ``summable`` takes two stages instead, each rank owning one shard of
the bucket (``ShardTransport.bounds``):

1. scatter: every rank encodes each other rank's shard of its bucket and sends it there;
2. the owner adds the decoded shards to its own (float32, rank order), takes the rule's
   mean, encodes the mean once, and keeps the decoding of that encoding itself;
3. gather: every owner sends its encoded mean to every rank, which decodes it into place.

Every rank then holds the same values bit for bit (what each decodes is the one encoding
its owner made), so ``allreduce`` keeps the ranks identical with any codec. Bytes per rank:
``2 (size - 1) / size`` of the encoded bucket, as a ring. Error feedback keys: ``(bucket,
shard)`` for the scatter's encodings, ``(bucket, "mean")`` for the owner's.

The second stage is posted by whoever finds the first complete (the communication thread,
or the caller's wait), through :meth:`~gossipgrad.comm.transport.Pending.advance`, so no
thread blocks inside a stage and ranks may finish buckets in any order.
"""

from __future__ import annotations

import torch

from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.sharded import ShardTransport
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.bucket.rules import Average


class ShardedMean:
    """Mean over ranks of buckets through ``codec``, in two stages (module docstring).

    Args:
        transport: moves the shards' wires.
        codec: a codec that is not summable (else a plain allreduce is cheaper).
        rule: its ``mean_`` turns the owner's sum into the mean.
    """

    schedule = None  # the ranks' (it has no schedule of its own)

    def __init__(self, transport: ShardTransport, codec: Codec, rule: Average) -> None:
        self.transport, self.codec, self.rule = transport, codec, rule
        self.comm = transport.comm
        self._wires: dict[tuple, torch.Tensor] = {}

    def bytes_per_step(self, nbytes: int, wire_nbytes: int) -> None:
        """None: it moves a ring's bytes, as the strategy's pattern counts them."""
        return None

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        """Encode every other rank's shard of ``buf`` and post the scatter; the gather is
        posted by :meth:`Pending.advance` (``buf`` is not written until then)."""
        if self.comm.size == 1:
            return Pending(buf, key=index)
        me, spans = self.comm.rank, self.transport.bounds(buf.numel())
        wires = [
            None if r == me else self._encode(buf[lo:hi], (index, r))
            for r, (lo, hi) in enumerate(spans)
        ]
        lo, hi = spans[me]
        nbytes = self.codec.wire_nbytes(buf[lo:hi])
        requests, recvs = self.transport.scatter(wires, nbytes, buf, index, step, tag)
        pending = Pending(buf, requests, wire=wires, recv=recvs, key=index)
        pending.then = lambda p: self._reduce(p, step, tag)
        return pending

    def _encode(self, shard: torch.Tensor, key: tuple) -> torch.Tensor:
        wire = self._wires.get(key)
        if wire is None or wire.numel() != self.codec.wire_nbytes(shard):
            wire = self._wires[key] = self.codec.wire_like(shard)
        return self.codec.encode_(shard, wire, key)

    def _reduce(self, pending: Pending, step: int, tag: int) -> None:
        """Stage 2: the owner's float32 sum and mean of its shard, encoded once; post the
        gather of every owner's mean."""
        buf, index, me = pending.buf, pending.key, self.comm.rank
        spans = self.transport.bounds(buf.numel())
        lo, hi = spans[me]
        mine = buf[lo:hi]
        for r, recv in enumerate(pending.recv):
            if r != me:
                wire = self.transport.incoming(recv, mine)
                mine.add_(self.codec.decode(wire, mine, (index, me)))
        self.rule.mean_(mine, self.comm.size)
        wire = self._encode(mine, (index, "mean"))
        mine.copy_(self.codec.decode(wire, mine, (index, "mean")))  # what every rank gets
        sizes = [self.codec.wire_nbytes(buf[a:b]) for a, b in spans]
        pending.requests, pending.recv = self.transport.gather(wire, sizes, buf, index, step, tag)

    def finish(self, pending: Pending) -> None:
        """Wait for both stages, then decode every other owner's mean into ``buf``."""
        self.transport.wait(pending)
        if pending.recv is None:
            return
        buf, me = pending.buf, self.comm.rank
        for r, (lo, hi) in enumerate(self.transport.bounds(buf.numel())):
            if r != me:
                shard = buf[lo:hi]
                wire = self.transport.incoming(pending.recv[r], shard)
                shard.copy_(self.codec.decode(wire, shard, (pending.key, r)))

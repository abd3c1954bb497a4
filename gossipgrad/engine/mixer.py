"""One bucket's exchange, whole: encode (codec), move (transport), decode and mix (rule).

    mixer = BucketMixer(PeerTransport(comm, schedule), make_codec("fp32"), make_rule("average"))
    pending = mixer.start(bucket, index=0, step=t, tag=Tag.GRAD_BUCKET)
    mixer.finish(pending)          # the bucket now holds the mix, in place

What ``finish`` leaves in the bucket, by the transport's pattern:

- ``peer``: the rule's mix of the bucket with what this step's ``src`` sent, with the
  schedule's weight (a lossy codec: ``own + w (peer - sent)``, which keeps the mean);
- ``ring``: the mean over ranks (the decoded sum of the encodings, divided by ``size``;
  a codec that is not summable decodes before it adds: :mod:`gossipgrad.engine.sharded`);
- ``none``: the bucket unchanged.

The communication thread calls ``finish`` from its own thread (:mod:`.commthread`); every
rank must post the same buckets in the same order for the ring pattern.
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.codecs import Codec, make_codec
from gossipgrad.comm.sharded import ShardTransport
from gossipgrad.comm.transport import Pending, Transport, make_transport
from gossipgrad.engine.nodemix import NodeMix
from gossipgrad.engine.rules import Average, make_rule
from gossipgrad.engine.sharded import ShardedMean


class BucketMixer:
    """Transport + codec + rule for flat buckets.

    Args:
        transport: moves the wires (:mod:`gossipgrad.comm.transport`).
        codec: what a bucket looks like on the wire; its per-bucket state is keyed by the
            bucket's index (a separate instance per kind of bucket and optimizer).
        rule: how own and received values combine.
    """

    def __init__(self, transport: Transport, codec: Codec, rule: Average) -> None:
        self.transport, self.codec, self.rule = transport, codec, rule
        self.comm = transport.comm
        self._wires: dict[int, torch.Tensor] = {}
        self.sharded: ShardedMean | NodeMix | None = None
        if transport.pattern == "ring" and not codec.summable:
            self.sharded = ShardedMean(ShardTransport(self.comm, transport.stager), codec, rule)
        elif transport.pattern == "node":  # the codec between nodes only
            self.sharded = NodeMix(transport, rule, codec)

    @property
    def pattern(self) -> str:
        return self.transport.pattern

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        """Encode ``buf`` and post its exchange (``buf`` is read, not written, until
        :meth:`finish`)."""
        if self.transport.pattern == "none" or self.transport.idle(step):
            return Pending(buf, key=index)  # nothing to send: nothing to encode either
        if self.sharded is not None:
            return self.sharded.start(buf, index, step, tag)
        if self.codec.in_place:
            wire = buf  # the identity: send (or allreduce) the bucket itself
        else:
            wire = self.codec.encode_(buf, self._wire(index, buf), index)
        return self.transport.start(buf, wire, index, step, tag)

    def _wire(self, index: int, like: torch.Tensor) -> torch.Tensor:
        wire = self._wires.get(index)
        if wire is None or wire.device != like.device or self._stale(wire, like):
            wire = self._wires[index] = self.codec.wire_like(like)
        return wire

    def _stale(self, wire: torch.Tensor, like: torch.Tensor) -> bool:
        return self.codec.wire_nbytes(like) != wire.numel() * wire.element_size()

    def finish(self, pending: Pending) -> None:
        """Wait for ``pending`` and mix what arrived into its bucket, in place."""
        if self.sharded is not None:
            self.sharded.finish(pending)
            return
        self.transport.wait(pending)
        if pending.recv is None:
            return
        buf, key = pending.buf, pending.key
        if self.transport.pattern == "ring":
            total = self.codec.decode(pending.recv, buf, key)
            if total.data_ptr() != buf.data_ptr():
                buf.copy_(total)
            self.rule.mean_(buf, self.comm.size)
            return
        peer = self.codec.decode(pending.recv, buf, key)
        # a lossy codec: what the peer got from this rank (the send has completed)
        sent = None if self.codec.lossless else self.codec.decode(pending.wire, buf, key)
        self.rule.mix_(buf, peer, pending.weight, sent)

    def bytes_sent(self, like: torch.Tensor | tuple[int, int], pattern_bytes: Any) -> float:
        """Bytes this rank sends per step for one bucket: the codec's wire bytes moved by
        ``pattern_bytes(nbytes, size)`` (the strategy's accounting)."""
        return pattern_bytes(self.codec.wire_nbytes(like), self.comm.size)


def make_mixer(
    pattern: str,
    comm: Any,
    schedule: Any,
    stager: Any = None,
    wire: str = "fp32",
    rule: str = "average",
    feedback: bool | None = None,
) -> BucketMixer:
    """A bucket mixer for ``pattern`` (``peer``, ``ring``, ``none``) with the codec ``wire``
    (error ``feedback`` on, off or its default) and the rule ``rule``: what a strategy's
    optimizer builds, for benchmarks and checks."""
    return BucketMixer(
        make_transport(pattern, comm, schedule, stager),
        make_codec(wire, feedback),
        make_rule(rule),
    )

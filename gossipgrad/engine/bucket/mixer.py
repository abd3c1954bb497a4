"""One bucket's exchange, whole: encode (codec), move (transport), decode and mix (rule).

    mixer = BucketMixer(PeerTransport(comm, schedule), make_codec("fp32"), make_rule("average"))
    pending = mixer.start(bucket, index=0, step=t, tag=Tag.GRAD_BUCKET)
    mixer.finish(pending)          # the bucket now holds the mix, in place

What ``finish`` leaves in the bucket, by how the transport moves the wires:

- ``peer``: the rule's mix of the bucket with what this step's ``src`` sent, with the
  schedule's weight (a lossy codec: ``own + w (peer - sent)``, which keeps the mean);
- ``ring``: the mean over ranks (the decoded sum of the encodings, divided by ``size``;
  a codec that is not summable decodes before it adds: :mod:`gossipgrad.engine.bucket.sharded`);
- ``none``: the bucket unchanged.

A strategy whose bucket moves in several stages of its own (gossip-node's, over nodes)
hands in ``whole``: a mix that posts and finishes a bucket itself (``start``/``finish``,
as :class:`~gossipgrad.engine.bucket.sharded.ShardedMean` does for a codec that cannot be
summed) and says what it sends (``bytes_per_step``) and along which schedule.

The communication thread calls ``finish`` from its own thread (:mod:`.commthread`); every
rank must post the same buckets in the same order for an allreduce (a collective shape).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from gossipgrad.comm.codecs import Codec, make_codec
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.sharded import ShardTransport
from gossipgrad.comm.transport import Pending, Transport
from gossipgrad.engine.bucket.rules import Average, make_rule
from gossipgrad.engine.bucket.sharded import ShardedMean
from gossipgrad.registry import SHAPES


class WholeMix(Protocol):
    """A bucket's exchange and mix in stages of its own (``BucketMixer(whole=...)``)."""

    schedule: Schedule | None  # the exchange's own schedule (None: the ranks')

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending: ...

    def finish(self, pending: Pending) -> None: ...

    def bytes_per_step(self, nbytes: int, wire_nbytes: int) -> float | None:
        """Bytes this rank sends per step for a bucket of ``nbytes`` (``wire_nbytes``
        encoded); None: as the strategy's shape counts them."""


class BucketMixer:
    """Transport + codec + rule for flat buckets.

    Args:
        transport: moves the wires (:mod:`gossipgrad.comm.transport`).
        codec: what a bucket looks like on the wire; its per-bucket state is keyed by the
            bucket's index (a separate instance per kind of bucket and optimizer).
        rule: how own and received values combine.
        whole: a mix that moves and mixes whole buckets itself (default: none, except
            the sharded mean for a ring whose codec cannot be summed).
    """

    def __init__(
        self, transport: Transport, codec: Codec, rule: Average, whole: WholeMix | None = None
    ) -> None:
        self.transport, self.codec, self.rule = transport, codec, rule
        self.comm = transport.comm
        self._wires: dict[int, torch.Tensor] = {}
        self.whole: WholeMix | None = whole
        if whole is None and transport.sums and not codec.summable:
            self.whole = ShardedMean(ShardTransport(self.comm, transport.stager), codec, rule)

    @property
    def schedule(self) -> Schedule | None:
        """The exchange's own schedule where it keeps one (gossip-node's, over nodes)."""
        return None if self.whole is None else self.whole.schedule

    def bucket_bytes(self, nbytes: int, wire_nbytes: int) -> float | None:
        """Bytes this rank sends per step for one bucket, where the whole-bucket mix counts
        them itself; None: the strategy's shape counts them (:meth:`bytes_sent`)."""
        return None if self.whole is None else self.whole.bytes_per_step(nbytes, wire_nbytes)

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        """Encode ``buf`` and post its exchange (``buf`` is read, not written, until
        :meth:`finish`)."""
        if not self.transport.moves or self.transport.idle(step):
            return Pending(buf, key=index)  # nothing to send: nothing to encode either
        if self.whole is not None:
            return self.whole.start(buf, index, step, tag)
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
        if self.whole is not None:
            self.whole.finish(pending)
            return
        self.transport.wait(pending)
        if pending.recv is None:
            return
        buf, key = pending.buf, pending.key
        if self.transport.sums:
            total = self.codec.decode(pending.recv, buf, key)
            if total.data_ptr() != buf.data_ptr():
                buf.copy_(total)
            self.rule.mean_(buf, self.comm.size)
            return
        peer = self.codec.decode(pending.recv, buf, key)
        # a lossy codec: what the peer got from this rank (the send has completed)
        sent = None if self.codec.lossless else self.codec.decode(pending.wire, buf, key)
        self.rule.mix_(buf, peer, pending.weight, sent)


def shape_mixers(shape: Any) -> Callable[..., BucketMixer]:
    """What builds a strategy's mixer on a communicator, ``(comm, schedule, stager,
    topology, codec, rule)``, from its exchange shape's transport."""

    def build(comm: Any, schedule: Any, stager: Any, topology: str, codec: Codec, rule: Any):
        return BucketMixer(shape.transport(comm, schedule, stager, topology), codec, rule)

    return build


def make_mixer(
    shape: str,
    comm: Any,
    schedule: Any,
    stager: Any = None,
    wire: str = "fp32",
    rule: str = "average",
    feedback: bool | None = None,
) -> BucketMixer:
    """A bucket mixer for the registered exchange shape ``shape`` (``peer``, ``ring``,
    ``none``, ...) with the codec ``wire`` (error ``feedback`` on, off or its default) and
    the rule ``rule``: what a strategy's optimizer builds, for benchmarks and checks."""
    transport = SHAPES.get(shape).transport(comm, schedule, stager, "auto")
    return BucketMixer(transport, make_codec(wire, feedback), make_rule(rule))

"""A toy bucketed strategy with an exchange shape of its own, registered from the tests alone
(no change under gossipgrad/): ranks 2k and 2k+1 average each bucket, every step, and never
mix with another pair (a last odd rank keeps its own). It rides the bucket shell (hooks,
overlap, timing) and brings its mix, which counts its own bytes (a bucket each step to the
pair's other rank), and its shape, which the planner prices (``gossipgrad plan
--strategies toy-pairs``). Load it with ``import toy_pairs``."""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import WaitContext
from gossipgrad.comm.buffers import host_array
from gossipgrad.comm.transport import Pending, Transport
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.registry import SHAPES, STRATEGIES
from gossipgrad.specs import ShapeSpec
from gossipgrad.strategies.bucketed import BucketStrategy

NAME = "toy-pairs"


class PairMean:
    """Whole-bucket mix (``BucketMixer(whole=...)``): the mean with the pair's other rank."""

    schedule = None  # no schedule of its own: the run reports the ranks'

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self._recv: dict[int, torch.Tensor] = {}

    @property
    def peer(self) -> int | None:
        other = self.comm.rank ^ 1
        return other if other < self.comm.size else None

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        if self.peer is None:
            return Pending(buf, key=index)
        recv = self._recv.get(index)
        if recv is None or recv.shape != buf.shape:
            recv = self._recv[index] = torch.empty_like(buf)
        ctx = WaitContext("sent nothing", self.peer, tag, step)
        requests = [
            self.comm.irecv(host_array(recv), self.peer, tag, ctx),
            self.comm.isend(host_array(buf), self.peer, tag, ctx),
        ]
        return Pending(buf, requests, recv=recv, key=index)

    def finish(self, pending: Pending) -> None:
        for r in pending.requests:
            r.wait(self.comm.timeout)
        if pending.recv is not None:  # a + b == b + a: both ranks hold the same bits
            pending.buf.add_(pending.recv).div_(2)

    def bytes_per_step(self, nbytes: int, wire_nbytes: int) -> float:
        return 0.0 if self.peer is None else float(nbytes)


class PairLink(Transport):
    """The shell's handle on the pair's communicator; :class:`PairMean` moves the bytes."""

    moves = True


class PairShape(ShapeSpec):
    """The pair exchange as the planner prices it: one send and one receive of the bucket
    with the pair's other rank (a last odd rank sends nothing)."""

    name = NAME
    summary = "toy: one bucket to the pair's other rank and one back"
    forward_wait = True
    exchange_factor = "gossip"

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> PairLink:
        return PairLink(comm, stager)

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        return (size - size % 2) / size * nbytes

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        wire = link.alpha_s + link.duplex * link.beta_s_per_byte * nbytes
        return link.gossip_factor * wire + link.host_s_per_byte * nbytes

    def memory(self, load: Any) -> list:
        return [("pair receive buffers", load.grads)]


class Pairs(BucketStrategy):
    name = NAME
    summary = "toy: each pair of ranks averages every bucket every step"
    uses = frozenset({"mix", "bucket_mb", "overlap"})
    shape = NAME
    factor_pattern = None
    shrink = False

    def mixer(
        self, comm: Any, schedule: Any, stager: Any, topology: str, codec: Any, rule: Any
    ) -> BucketMixer:
        transport = self.transport(comm, schedule, stager, topology)
        return BucketMixer(transport, codec, rule, whole=PairMean(comm))


SHAPES.register(NAME, PairShape(), replace=True)
STRATEGIES.register(NAME, Pairs(), replace=True)

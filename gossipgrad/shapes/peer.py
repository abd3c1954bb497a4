"""``peer``: one simultaneous send and receive with this step's peer (gossip).

Time of a bucket of ``n`` bytes at ``p`` ranks, ``r`` ranks per node on ``m`` nodes,
``alpha``/``beta`` between nodes, ``d`` the duplex factor, ``s`` the fabric's shared seconds
per byte: ``alpha + n max(d beta k, p s)`` with ``k`` the expected ranks of a node sending
off it at once (the fabric's ``peer_streams``); one node: ``alpha_i + d beta_i n``.

    >>> from gossipgrad.registry import SHAPES
    >>> SHAPES.get("peer").bytes_per_step(100, 4), SHAPES.get("peer").bytes_per_step(100, 1)
    (100.0, 0.0)
"""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.transport import PeerTransport
from gossipgrad.registry import SHAPES
from gossipgrad.shapes.common import intra, send_copies
from gossipgrad.specs import ExchangeLoad, ShapeSpec


def peer_s(n: float, size: int, alpha: float, beta: float, duplex: float, fabric: Any) -> float:
    """One bucket exchanged with this step's peer (see the module)."""
    if size < 2:
        return 0.0
    if fabric.nodes(size) == 1:
        a, b = intra(fabric, alpha, beta)
        return a + duplex * b * n
    return alpha + n * max(duplex * beta * fabric.peer_streams(size), fabric.shared_beta(size))


def one_peer_codec_memory(load: ExchangeLoad, share: int = 1) -> list[tuple[str, int]]:
    """A lossy codec's buffers for a one-peer exchange of ``1 / share`` of the buckets:
    send and receive wires, error-feedback residuals and last decodings, and buckets of
    decoding scratch (2 without feedback, 5 with)."""
    grads = load.grads / share
    parts = [("wire buffers (send and receive)", round(2 * load.ratio * grads))]
    if load.feedback:
        parts.append(("error-feedback residuals and last decodings", round(2 * grads)))
    parts.append(("codec scratch", round((5 if load.feedback else 2) * load.largest / share)))
    return parts


class Peer(ShapeSpec):
    name = "peer"
    summary = "one send to this step's peer and one receive from its source"
    one_peer = True
    forward_wait = True
    exchange_factor = "gossip"

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> PeerTransport:
        return PeerTransport(comm, schedule, stager)

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        return 0.0 if size == 1 else float(nbytes)

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        a, b, f = link.alpha_s, link.beta_s_per_byte, link.fabric
        cost = link.gossip_factor * peer_s(nbytes, size, a, b, link.duplex, f)
        return cost + link.host_s_per_byte * nbytes

    def memory(self, load: ExchangeLoad) -> list[tuple[str, int]]:
        stale = send_copies(load.grads, load.staleness)
        if not load.lossy:
            return [("receive buffers", load.grads), *stale]
        return [*stale, *one_peer_codec_memory(load)]


SHAPES.register(Peer.name, Peer(), replace=True)

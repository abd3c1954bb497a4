"""``node``: gossip between nodes, each node's ranks averaged first (gossip-node).

Time of a bucket of ``n`` bytes, ``r`` ranks a node on ``m`` nodes: within the node each
rank sends its ``r - 1`` peers their shards and its mixed shard back, ``2 ((r-1) alpha_i +
(r-1)/r n beta_i)``; between nodes every rank sends its ``n / r`` shard at once, so a
network interface carries ``n``: ``alpha + n max(d beta, m s)``; one node: the first term
only. A wire codec encodes only what crosses the interface: the node's own moves stay
float32.

    >>> from gossipgrad.registry import SHAPES
    >>> SHAPES.get("node").bytes_per_step(100, 4)   # what a node's interface carries
    100.0
"""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.nodes import node_transport
from gossipgrad.registry import SHAPES
from gossipgrad.shapes.common import placed, send_copies
from gossipgrad.shapes.peer import one_peer_codec_memory
from gossipgrad.specs import ExchangeLoad, ShapeSpec


def node_s(
    n: float,
    size: int,
    alpha: float,
    beta: float,
    duplex: float,
    fabric: Any,
    wire_ratio: float = 1.0,
) -> float:
    """One bucket of a node-level gossip (see the module). ``wire_ratio``: the codec's,
    already in the per-byte times (the planner's ``on_the_wire``); the moves within the
    node are float32 whatever the codec, so their per-byte time is divided by it."""
    if size < 2:
        return 0.0
    r, m, a_i, b_i = placed(fabric, size, alpha, beta)
    b_i /= wire_ratio
    within = 2 * ((r - 1) * a_i + (r - 1) / r * n * b_i) if r > 1 else 0.0
    if m == 1:
        return within
    return within + alpha + n * max(duplex * beta, m * fabric.shared_s_per_byte)


class Node(ShapeSpec):
    name = "node"
    summary = "a node's ranks averaged, one shard a rank exchanged with the partner node"
    own_schedule = True
    forward_wait = True
    exchange_factor = "gossip"

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Any:
        """Finds the nodes (collective) and gossips between them along ``topology``."""
        return node_transport(comm, schedule, stager, topology)

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        return 0.0 if size == 1 else float(nbytes)

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        a, b, f = link.alpha_s, link.beta_s_per_byte, link.fabric
        node = node_s(nbytes, size, a, b, link.duplex, f, link.wire_ratio)
        return link.gossip_factor * node + link.host_s_per_byte * nbytes

    def memory(self, load: ExchangeLoad) -> list[tuple[str, int]]:
        """Without a lossy codec as gossip; with one, the node's float32 copies of this
        rank's shard and the shard's codec buffers between nodes (one node: nothing is
        encoded)."""
        stale = send_copies(load.grads, load.staleness)
        if not load.lossy:
            return [("receive buffers", load.grads), *stale]
        r = load.ranks_per_node
        parts = [*stale]
        if r > 1:
            parts.append(("receive buffers (the node's shards)", round((r - 1) * load.grads / r)))
        if r >= load.size:
            return parts
        return parts + one_peer_codec_memory(load, share=r)


SHAPES.register(Node.name, Node(), replace=True)

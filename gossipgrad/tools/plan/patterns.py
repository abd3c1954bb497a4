"""Seconds one step's buckets take on the wire, per strategy pattern, on a :class:`Fabric`.

The strategy's spec says how it moves a bucket (``pattern``); the costs below are the
slowest rank's, for buckets of ``n`` bytes at ``p`` ranks, ``r`` ranks per node on ``m``
nodes, ``alpha``/``beta`` between nodes (one stream), ``alpha_i``/``beta_i`` within one,
``d`` the duplex factor, ``s`` the fabric's shared seconds per byte:

- **peer** (gossip): ``alpha + n max(d beta k, p s)`` with ``k`` the expected ranks of a
  node sending off it at once (:meth:`Fabric.peer_streams`); one node: ``alpha_i + d
  beta_i n``.
- **node** (gossip-node): within the node, each rank sends its ``r - 1`` peers their
  shards and its mixed shard back, ``2 ((r-1) alpha_i + (r-1)/r n beta_i)``; between
  nodes every rank sends its ``n / r`` shard at once, so a NIC carries ``n``: ``alpha +
  n max(d beta, m s)``; one node: the first term only.
- **ring** (allreduce, horovod, ddp): ``2 (p-1) alpha + 2 (p-1)/p n beta`` (ranks placed
  node by node, so each NIC carries one edge of the ring), not below ``2 (p-1) n s`` (all
  ranks' bytes through the shared bottleneck). Hierarchical: ``2 (r-1) alpha_i + 2 (r-1)/r
  n beta_i`` within nodes plus ``2 (m-1) alpha + 2 (m-1)/m n beta`` across them.
- **sharded** (gossipgrad's allreduce through a lossy codec, whose encodings cannot be
  summed: :mod:`gossipgrad.engine.bucket.sharded`): two stages, each rank posting its ``p - 1``
  shards of ``n / p`` at once (to their owners, then the owners' means back). With ``r > 1``
  ranks a node a NIC carries ``r (p - r) / p n`` each way a stage, where a ring's edge
  carries ``2 (p-1)/p n`` for the whole allreduce: ``2 (alpha + max(d beta r (p-r)/p n,
  (r-1)/p n beta_i))``, not below ``(p-1) n s`` a stage. One rank a node moves a ring's
  bytes and is priced as the ring (:meth:`~gossipgrad.tools.plan.model.CommModel.bucket_s`).
- **server** (ps): every bucket has one owner (largest first to the least loaded rank, as
  the engine assigns them); the owner receives every other rank's push and sends them its
  pull, so the busiest node's NIC carries ``W`` bytes each way per step, more than the
  ring's ``2 (p-1)/p`` of the model wherever one bucket is larger than ``1/p`` of it
  (VGG-16's first Linear layer is 74 % of the model, unless split: the engine splits a
  parameter larger than ``1/p`` into parts, :func:`split_parts`, with an elementwise
  optimizer, and the planner prices ps that way). The step's wire time ``max(W beta,
  2 (p-1) G s)`` is shared out over the buckets by bytes, and each bucket pays two rounds
  of latency (push, then pull): ``c_b = 2 alpha + n_b / G x wire``. That is the step's
  busy time (what a rank without a spare core pays). On the timeline the two rounds of one
  bucket run one after the other (:func:`server_rounds`): the push is an incast, every
  other rank's ``n_b`` into the owner (``(p-1) n_b`` through the owner's port, ``n_b``
  out of every other), the pull the same bytes the other way, and every round active at
  once shares the ports it crosses (:mod:`gossipgrad.tools.plan.fluid`): a rank's inbound link
  takes the pushes into the buckets it owns and the pulls of every other owner's.

PURE: stdlib only.

    >>> from gossipgrad.tools.plan.fabric import Fabric
    >>> server_loads([6, 1, 1], 2)      # owners [0, 1, 1]: rank 0 serves 6 of the 8 bytes
    ([8, 8], [6, 2])
    >>> server_wire_bytes([6, 1, 1], 2, Fabric())
    8
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gossipgrad.engine.ps.shards import (  # noqa: F401 - the engine's rule, re-exported
    PUSH_POOL_BYTES,
    assign_owners,
    push_pool,
)
from gossipgrad.tools.plan.fabric import Fabric
from gossipgrad.tools.plan.fluid import IN, OUT, Network, Round


def split_parts(nbytes: int, cap_bytes: int) -> list[int]:
    """The sizes of the parts a ps bucket of ``nbytes`` (one parameter larger than the cap)
    is split into: as many as the cap needs, as equal as whole bytes allow (the engine splits
    by elements, which differs by less than one element a part).

    >>> split_parts(10, 4), split_parts(8, 4), split_parts(3, 4)
    ([3, 3, 4], [4, 4], [3])
    """
    k = max(1, -(-nbytes // cap_bytes))
    bounds = [nbytes * i // k for i in range(k + 1)]
    return [hi - lo for lo, hi in zip(bounds, bounds[1:], strict=False)]


def ps_cap(total_bytes: int, size: int, cap_bytes: int | None) -> int | None:
    """The bucket cap a parameter server uses: the configured one, but at most ``1/size`` of
    the model (the engine's ``ps_bucket_cap``); None keeps the profile's buckets."""
    share = -(-total_bytes // size)
    return share if cap_bytes is None else max(1, min(cap_bytes, share))


def server_loads(nbytes: Sequence[int], size: int) -> tuple[list[int], list[int]]:
    """(bytes each rank sends per step, bytes each rank serves): the pushes of the buckets
    it does not own plus ``size - 1`` pulls of each one it owns."""
    owners = assign_owners(nbytes, size)
    served = [0] * size
    for nb, o in zip(nbytes, owners, strict=True):
        served[o] += nb
    total = sum(nbytes)
    return [total - served[r] + (size - 1) * served[r] for r in range(size)], served


def server_wire_bytes(nbytes: Sequence[int], size: int, fabric: Fabric) -> int:
    """Bytes the busiest node's NIC carries each way per step (off-node traffic only; with
    one node, the busiest rank's)."""
    if size < 2:
        return 0
    owners = assign_owners(nbytes, size)
    r = fabric.ranks_per_node
    if fabric.nodes(size) == 1:
        return max(server_loads(nbytes, size)[0])
    ranks = [min(size, (m + 1) * r) - m * r for m in range(fabric.nodes(size))]
    homed = [0] * len(ranks)  # bytes of the buckets each node's ranks own
    for nb, o in zip(nbytes, owners, strict=True):
        homed[o // r] += nb
    total = sum(nbytes)
    # a node sends the pulls of what it owns to every rank off it, and its ranks' pushes of
    # everything else to the owners
    return max(
        (size - ranks[m]) * homed[m] + ranks[m] * (total - homed[m]) for m in range(len(ranks))
    )


def _intra(fabric: Fabric, alpha: float, beta: float) -> tuple[float, float]:
    a = alpha if fabric.intra_alpha_s is None else fabric.intra_alpha_s
    b = beta if fabric.intra_beta_s_per_byte is None else fabric.intra_beta_s_per_byte
    return a, b


def _placed(fabric: Fabric, size: int, alpha: float, beta: float) -> tuple[int, int, float, float]:
    """Ranks a node, nodes, and the intra-node link's alpha and beta at ``size`` ranks."""
    return (fabric.per_node(size), fabric.nodes(size), *_intra(fabric, alpha, beta))


def peer_s(n: float, size: int, alpha: float, beta: float, duplex: float, fabric: Fabric) -> float:
    """One bucket exchanged with this step's peer (see the module)."""
    if size < 2:
        return 0.0
    if fabric.nodes(size) == 1:
        a, b = _intra(fabric, alpha, beta)
        return a + duplex * b * n
    return alpha + n * max(duplex * beta * fabric.peer_streams(size), fabric.shared_beta(size))


def node_s(
    n: float,
    size: int,
    alpha: float,
    beta: float,
    duplex: float,
    fabric: Fabric,
    wire_ratio: float = 1.0,
) -> float:
    """One bucket of a node-level gossip (see the module). ``wire_ratio``: the codec's,
    already in the per-byte times (:func:`~gossipgrad.tools.plan.model.on_the_wire`); the moves
    within the node are float32 whatever the codec, so their per-byte time is divided by it."""
    if size < 2:
        return 0.0
    r, m, a_i, b_i = _placed(fabric, size, alpha, beta)
    b_i /= wire_ratio
    within = 2 * ((r - 1) * a_i + (r - 1) / r * n * b_i) if r > 1 else 0.0
    if m == 1:
        return within
    return within + alpha + n * max(duplex * beta, m * fabric.shared_s_per_byte)


def ring_s(
    n: float,
    size: int,
    alpha: float,
    beta: float,
    fabric: Fabric,
    latency_factor: float = 1.0,
    bandwidth_factor: float = 1.0,
) -> float:
    """One bucket allreduced by a ring, or hierarchically (see the module)."""
    p = size
    if p < 2:
        return 0.0
    r, m, a_i, b_i = _placed(fabric, p, alpha, beta)
    if m == 1:
        latency, bandwidth = 2 * (p - 1) * a_i, 2 * (p - 1) / p * n * b_i
    elif fabric.hierarchical and r > 1:
        latency = 2 * (r - 1) * a_i + 2 * (m - 1) * alpha
        bandwidth = 2 * (r - 1) / r * n * b_i + 2 * (m - 1) / m * n * beta
    else:  # one ring through every rank: the slowest hop sets the pace
        latency = 2 * (p - 1) * max(alpha, a_i)
        bandwidth = 2 * (p - 1) / p * n * max(beta, b_i)
    bandwidth = max(bandwidth, 2 * (p - 1) * n * fabric.shared_s_per_byte)
    return latency_factor * latency + bandwidth_factor * bandwidth


def sharded_s(
    n: float, size: int, alpha: float, beta: float, duplex: float, fabric: Fabric
) -> float:
    """One bucket's decoded allreduce, shards point to point (see the module)."""
    if size < 2:
        return 0.0
    r, m, a_i, b_i = _placed(fabric, size, alpha, beta)
    shard = n / size
    if m == 1:  # every shard over the node's own links
        stage = a_i + (size - 1) * shard * b_i
    else:  # r ranks' shards to the other nodes' owners through one NIC, the rest within
        stage = alpha + max(duplex * beta * r * (size - r) * shard, (r - 1) * shard * b_i)
    return 2 * max(stage, (size - 1) * n * fabric.shared_s_per_byte)


def server_s(
    nbytes: Sequence[int], size: int, alpha: float, beta: float, fabric: Fabric
) -> list[float]:
    """Each bucket's share of a parameter server's step (see the module), buckets as the
    server holds them (:func:`ps_cap`)."""
    if size < 2 or not nbytes:
        return [0.0] * len(nbytes)
    total = sum(nbytes)
    a, b = (alpha, beta) if fabric.nodes(size) > 1 else _intra(fabric, alpha, beta)
    wire = max(
        server_wire_bytes(nbytes, size, fabric) * b,
        2 * (size - 1) * total * fabric.shared_s_per_byte,
    )
    return [2 * a + wire * nb / total for nb in nbytes]


def server_rounds(
    nbytes: Sequence[int], size: int, alpha: float, beta: float, fabric: Fabric
) -> tuple[Network, list[tuple[Round, Round]]]:
    """The network a parameter server's rounds share and, per bucket, its push and its pull
    (:mod:`gossipgrad.tools.plan.fluid`, ready at 0: the timeline sets when). Owners as the
    engine assigns them. Ports are the nodes' NICs (``1 / beta`` bytes per second each way;
    with every rank on one node, each rank's own link at the intra rate). A push is every
    other rank's ``n`` bytes into the owner: ``(p - r) n`` into its node's port from the
    ``p - r`` ranks of other nodes, which each send ``n`` out of theirs, and ``(r - 1) n``
    over the owner's intra-node link; a pull is the same bytes the other way. Off-node
    bytes also cross the shared bottleneck, if any (all bytes with one node). A round
    ends ``alpha`` after its last byte.

        >>> net, [(push, pull)] = server_rounds([100], 3, 0.5, 0.01, Fabric())
        >>> net.counts, push.hot, (push.spread, push.node, push.spread_bytes)
        ((1, 1, 1), ((('in', 0), 200),), ('out', 0, 100))
        >>> from gossipgrad.tools.plan.fluid import run
        >>> [end for _, end in run(net, [push])]   # 200 bytes into rank 0 at 100 bytes/s
        [2.5]
    """
    if size < 2:
        return Network((1,)), [(Round(0.0, 0.0), Round(0.0, 0.0)) for _ in nbytes]
    one_node = fabric.nodes(size) == 1
    a_i, b_i = _intra(fabric, alpha, beta)
    r = 1 if one_node else fabric.ranks_per_node
    counts = tuple(min(size, (m + 1) * r) - m * r for m in range(-(-size // r)))
    port_beta, latency = (b_i, a_i) if one_node else (beta, alpha)
    capacity: dict[Hashable, float] = {}
    if port_beta > 0:
        capacity.update({(d, m): 1 / port_beta for d in (IN, OUT) for m in range(len(counts))})
    if fabric.shared_s_per_byte > 0:
        capacity["shared"] = 1 / fabric.shared_s_per_byte
    pairs = []
    for nb, owner in zip(nbytes, assign_owners(nbytes, size), strict=True):
        m = owner // r
        off, on = (size - counts[m]) * nb, (counts[m] - 1) * nb
        rounds = []
        for d, back in ((IN, OUT), (OUT, IN)):
            hot: list[tuple[Hashable, float]] = [((d, m), off)]
            if "shared" in capacity:
                hot.append(("shared", off if r > 1 else (size - 1) * nb))
            if on and b_i > 0:
                hot.append(((f"intra-{d}", owner), on))
                capacity[(f"intra-{d}", owner)] = 1 / b_i
            rounds.append(Round(0.0, latency, tuple(hot), back, m, nb))
        pairs.append((rounds[0], rounds[1]))
    return Network(counts, capacity), pairs

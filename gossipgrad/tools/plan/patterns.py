"""What the planner prices beyond a shape's own bucket costs (``gossipgrad/shapes/``): a
parameter server's bucket splitting and cap, and the two rounds of each bucket of an
``incast`` shape on the shared network (:mod:`gossipgrad.tools.plan.fluid`).

The push of a bucket is an incast, every other rank's ``n_b`` into the owner (``(p-1) n_b``
through the owner's port, ``n_b`` out of every other), the pull the same bytes the other
way; every round active at once shares the ports it crosses: a rank's inbound link takes
the pushes into the buckets it owns and the pulls of every other owner's. PURE: stdlib only.

    >>> from gossipgrad.tools.plan.fabric import Fabric
    >>> split_parts(10, 4), ps_cap(100, 4, None)
    ([3, 3, 4], 25)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gossipgrad.engine.ps.shards import assign_owners
from gossipgrad.shapes.common import intra
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
    a_i, b_i = intra(fabric, alpha, beta)
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

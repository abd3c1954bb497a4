"""``server``: each bucket has one owner; every other rank pushes its gradient to the owner
and pulls the parameters back (ps). Owners are assigned as the engine assigns them
(:func:`gossipgrad.engine.ps.shards.assign_owners`: largest bucket first to the least loaded
rank), so the busiest node's network interface carries ``W`` bytes each way per step, more
than the ring's ``2 (p-1)/p`` of the model wherever one bucket is larger than ``1/p`` of it.

Time: the step's wire time ``max(W beta, 2 (p-1) G s)`` (``G`` the model's bytes, ``s`` the
shared seconds per byte) shared out over the buckets by bytes, and two rounds of latency
per bucket (push, then pull): ``c_b = 2 alpha + n_b / G x wire``; a bucket alone is priced
as a share of evenly loaded servers. The planner times the two rounds of each bucket on the
shared network too (``incast``).

    >>> from gossipgrad.registry import SHAPES
    >>> SHAPES.get("server").bytes_per_step(100, 4)
    150.0
    >>> server_loads([6, 1, 1], 2)      # owners [0, 1, 1]: rank 0 serves 6 of the 8 bytes
    ([8, 8], [6, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gossipgrad.comm.collectives import allreduce_bytes
from gossipgrad.engine.ps.shards import assign_owners, push_pool
from gossipgrad.registry import SHAPES
from gossipgrad.shapes.common import intra
from gossipgrad.specs import ExchangeLoad, ShapeSpec


def server_loads(nbytes: Sequence[int], size: int) -> tuple[list[int], list[int]]:
    """(bytes each rank sends per step, bytes each rank serves): the pushes of the buckets
    it does not own plus ``size - 1`` pulls of each one it owns."""
    owners = assign_owners(nbytes, size)
    served = [0] * size
    for nb, o in zip(nbytes, owners, strict=True):
        served[o] += nb
    total = sum(nbytes)
    return [total - served[r] + (size - 1) * served[r] for r in range(size)], served


def server_wire_bytes(nbytes: Sequence[int], size: int, fabric: Any) -> int:
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


def server_s(
    nbytes: Sequence[int], size: int, alpha: float, beta: float, fabric: Any
) -> list[float]:
    """Each bucket's share of a parameter server's step (see the module), buckets as the
    server holds them."""
    if size < 2 or not nbytes:
        return [0.0] * len(nbytes)
    total = sum(nbytes)
    a, b = (alpha, beta) if fabric.nodes(size) > 1 else intra(fabric, alpha, beta)
    wire = max(
        server_wire_bytes(nbytes, size, fabric) * b,
        2 * (size - 1) * total * fabric.shared_s_per_byte,
    )
    return [2 * a + wire * nb / total for nb in nbytes]


def owned(nbytes: Sequence[int], size: int) -> list[list[int]]:
    """The bucket sizes each owning rank serves (ranks that own none left out), in one pass
    over the buckets, not one per rank."""
    mine: dict[int, list[int]] = {}
    for n, o in zip(nbytes, assign_owners(nbytes, size), strict=True):
        mine.setdefault(o, []).append(n)
    return [mine[r] for r in sorted(mine)]


def owner_wires(nbytes: Sequence[int], size: int, slack: int, ratio: float) -> int:
    """A lossy codec's wires on the busiest owner: a push and a pull wire per step in flight
    for every bucket another rank serves, a wire per pool buffer of every push slot of its
    own buckets and one for each pull it sends (``slack``: the stale-synchronous slack)."""
    total, owners = sum(nbytes), owned(nbytes, size)
    if len(owners) < size:
        owners.append([])  # a rank that owns nothing sends every push and pull wire
    most = 0
    for mine in owners:
        served = sum((slack + 2) * push_pool(n, size) * n + n for n in mine)
        most = max(most, round(ratio * (2 * (slack + 1) * (total - sum(mine)) + served)))
    return most


class Server(ShapeSpec):
    name = "server"
    summary = "a push of each bucket to its owner and a pull of the parameters back"
    incast = True

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        """A push of every bucket not owned and ``size - 1`` pulls of each owned one: the
        ring's bytes in the mean over ranks (an owner of more than 1/size sends more)."""
        return allreduce_bytes(nbytes, size)

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        if size == 1:
            return 0.0
        even = (
            2
            * (size - 1)
            / size
            * nbytes
            * max(link.beta_s_per_byte, link.fabric.shared_beta(size))
        )
        return 2 * link.alpha_s + even + link.host_s_per_byte * nbytes

    def step_costs(self, link: Any, strategy: Any, nbytes: list[int], size: int) -> list[float]:
        if size == 1:
            return [self.bucket_s(link, strategy, n, size) for n in nbytes]
        wire = server_s(nbytes, size, link.alpha_s, link.beta_s_per_byte, link.fabric)
        return [c + link.host_s_per_byte * n for c, n in zip(wire, nbytes, strict=True)]

    def memory(self, load: ExchangeLoad) -> list[tuple[str, int]]:
        """A lossy codec's wires on the busiest owner (its served buffers: the planner's
        busiest-owner accounting, as for every ``incast`` shape)."""
        if not load.lossy:
            return []
        wires = owner_wires(load.buckets, load.size, load.staleness, load.ratio)
        parts = [("wire buffers", wires)]
        if load.feedback:
            parts.append(("error-feedback residuals and last decodings", round(2 * load.grads)))
        parts.append(("codec scratch", round((4 if load.feedback else 1) * load.largest)))
        return parts


SHAPES.register(Server.name, Server(), replace=True)

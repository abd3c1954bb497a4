"""``ring``: an allreduce of each bucket (allreduce, allreduce-param, horovod, ddp).

Time of a bucket of ``n`` bytes at ``p`` ranks (``r`` a node on ``m`` nodes, ``alpha``/``beta``
between nodes, ``alpha_i``/``beta_i`` within one, ``s`` the fabric's shared seconds per byte):

- a ring, ranks placed node by node so each network interface carries one edge:
  ``2 (p-1) alpha + 2 (p-1)/p n beta``, not below ``2 (p-1) n s`` (all ranks' bytes through
  the shared bottleneck); hierarchical: ``2 (r-1) alpha_i + 2 (r-1)/r n beta_i`` within
  nodes plus ``2 (m-1) alpha + 2 (m-1)/m n beta`` across them; each term times the link's
  measured allreduce factors (not for a library's own collective);
- gossipgrad's allreduce through a lossy codec, whose encodings cannot be summed
  (:mod:`gossipgrad.engine.bucket.sharded`), with several ranks a node: two stages, each rank
  posting its ``p - 1`` shards of ``n / p`` at once; a node's interface carries
  ``r (p - r) / p n`` each way a stage: ``2 (alpha + max(d beta r (p-r)/p n, (r-1)/p n
  beta_i))``, not below ``(p-1) n s`` a stage. With one rank a node it moves a ring's bytes
  and is priced as the ring.

    >>> from gossipgrad.registry import SHAPES
    >>> SHAPES.get("ring").bytes_per_step(100, 4)
    150.0
"""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.collectives import allreduce_bytes
from gossipgrad.comm.transport import AllreduceTransport
from gossipgrad.registry import SHAPES
from gossipgrad.shapes.common import placed, send_copies
from gossipgrad.specs import ExchangeLoad, ShapeSpec


def ring_s(
    n: float,
    size: int,
    alpha: float,
    beta: float,
    fabric: Any,
    latency_factor: float = 1.0,
    bandwidth_factor: float = 1.0,
) -> float:
    """One bucket allreduced by a ring, or hierarchically (see the module)."""
    p = size
    if p < 2:
        return 0.0
    r, m, a_i, b_i = placed(fabric, p, alpha, beta)
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


def sharded_s(n: float, size: int, alpha: float, beta: float, duplex: float, fabric: Any) -> float:
    """One bucket's decoded allreduce, shards point to point (see the module)."""
    if size < 2:
        return 0.0
    r, m, a_i, b_i = placed(fabric, size, alpha, beta)
    shard = n / size
    if m == 1:  # every shard over the node's own links
        stage = a_i + (size - 1) * shard * b_i
    else:  # r ranks' shards to the other nodes' owners through one NIC, the rest within
        stage = alpha + max(duplex * beta * r * (size - r) * shard, (r - 1) * shard * b_i)
    return 2 * max(stage, (size - 1) * n * fabric.shared_s_per_byte)


def _sharded(link: Any, strategy: Any, size: int) -> bool:
    """gossipgrad's own allreduce through a lossy codec on nodes of several ranks: the
    decoded sharded mean, not a ring."""
    return link.wire_ratio < 1 and not strategy.library and link.fabric.per_node(size) > 1


class Ring(ShapeSpec):
    name = "ring"
    summary = "an allreduce of each bucket"
    collective = True
    sums = True

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Any:
        return AllreduceTransport(comm, stager)

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        return allreduce_bytes(nbytes, size)

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        if size == 1:
            return 0.0
        a, b, f = link.alpha_s, link.beta_s_per_byte, link.fabric
        host = link.host_s_per_byte * nbytes
        latency, bandwidth = link.allreduce_latency_factor, link.allreduce_bandwidth_factor
        if strategy.own_collective:  # not MPI's allreduce: no MPI factors
            latency = bandwidth = 1.0
        elif _sharded(link, strategy, size):
            return sharded_s(nbytes, size, a, b, link.duplex, f) + host
        return ring_s(nbytes, size, a, b, f, latency, bandwidth) + host

    def queued_costs(
        self, link: Any, strategy: Any, nbytes: list[int], size: int, mix: str
    ) -> list[float] | None:
        """The ring at netfit's queued factors, for gossipgrad's own allreduce of gradients
        posted as the buckets fill (a library keeps its own order; a parameter mix at most
        two in flight); None without them."""
        if strategy.fixed_mix is not None:
            mix = strategy.fixed_mix.value
        if (
            link.queued_latency_factor is None
            or link.queued_bandwidth_factor is None
            or strategy.library
            or strategy.own_collective
            or mix != "grad"
            or size < 2
            or _sharded(link, strategy, size)  # shards, no ring
        ):
            return None
        a, b, f = link.alpha_s, link.beta_s_per_byte, link.fabric
        lat, bw = link.queued_latency_factor, link.queued_bandwidth_factor
        return [ring_s(n, size, a, b, f, lat, bw) + link.host_s_per_byte * n for n in nbytes]

    def memory(self, load: ExchangeLoad) -> list[tuple[str, int]]:
        stale = send_copies(load.grads, load.staleness)
        if not load.lossy:
            return [("allreduce staging", load.largest), *stale]
        shards = load.ratio * load.grads * (3 * load.size - 2) / load.size
        parts = [*stale, ("wire buffers (shards sent and received)", round(shards))]
        if load.feedback:
            parts.append(("error-feedback residuals and last decodings", round(2 * load.grads)))
            parts.append(("codec scratch", round(3 * load.largest)))
        return parts


SHAPES.register(Ring.name, Ring(), replace=True)

"""How a job's ranks share the network: the terms the alpha-beta fit of one pair leaves out.

A ping-pong between two ranks measures one link with nothing else on it. A training step
loads every link at once, and ranks share more than their links:

- **Achieved bandwidth falls as more ranks send at once** (``shared_s_per_byte``): whatever
  all ranks' traffic crosses together (a switch's backplane, an oversubscribed uplink, on
  the emulated cluster the host's cores doing every namespace's TCP) moves at most
  ``1 / shared_s_per_byte`` bytes per second in all. Measured by ``netfit``'s concurrent
  sweep (every rank sending at once, :func:`shared_from_concurrent`).
- **Several ranks behind one NIC** (``ranks_per_node`` r): between nodes the p2p fit is one
  stream's; r ranks sending off the node at once share it. Within a node ranks talk over
  ``intra`` (NVLink, PCIe, shared memory). Measured by ``netfit`` (ranks per node: a host,
  or a network namespace of one).
- **Hierarchical allreduce** (``hierarchical``): reduce within each node, allreduce across
  the nodes (each of the r ranks one r-th of the buffer, so the NIC carries the buffer
  once), gather within each node, as Horovod's ``HOROVOD_HIERARCHICAL_ALLREDUCE`` and
  NCCL's trees do, instead of one ring through every rank.

Every cost here is per step and per rank (the slowest rank's, which the step waits for),
for ``n`` bytes of one bucket at ``p`` ranks; :mod:`gossipgrad.tools.plan.model` puts them on
the timeline. PURE: stdlib only.

    >>> f = Fabric(ranks_per_node=4, intra_beta_s_per_byte=1e-11)
    >>> f.nodes(16), round(f.peer_streams(16), 6)   # a gossip peer is off the node 80 % of the time
    (4, 3.2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: A concurrent sweep counts as a shared bottleneck only when it is this much slower than
#: one pair's exchange: below that it is the link itself (noise on a loaded host).
SHARED_THRESHOLD = 1.25


@dataclass(frozen=True)
class Fabric:
    """How the ranks share the network (every default: the plain alpha-beta model).

    Args:
        ranks_per_node: ranks behind one network interface (>= 1).
        intra_alpha_s, intra_beta_s_per_byte: the link between two ranks of one node
            (None: the same as between nodes, the p2p fit).
        shared_s_per_byte: seconds per byte of everything all ranks send at once
            (``1 / aggregate bandwidth``; 0: no shared bottleneck).
        hierarchical: allreduce within nodes, then across nodes, then within again.
    """

    ranks_per_node: int = 1
    intra_alpha_s: float | None = None
    intra_beta_s_per_byte: float | None = None
    shared_s_per_byte: float = 0.0
    hierarchical: bool = False

    def __post_init__(self) -> None:
        r = self.ranks_per_node
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"ranks_per_node must be an integer >= 1, got {r!r}")
        for name in ("intra_alpha_s", "intra_beta_s_per_byte", "shared_s_per_byte"):
            v = getattr(self, name)
            if v is None and name.startswith("intra"):
                continue
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not (math.isfinite(v) and v >= 0)
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    def nodes(self, size: int) -> int:
        """Nodes a job of ``size`` ranks fills (ranks placed node by node)."""
        return -(-size // self.ranks_per_node)

    def per_node(self, size: int) -> int:
        """Ranks on the fullest node."""
        return min(size, self.ranks_per_node)

    def peer_streams(self, size: int) -> float:
        """Expected ranks of one node sending off it at once when each has a peer drawn
        from the others (gossip's schedule is re-permuted every cycle): ``r (p - r) /
        (p - 1)``, at least 1 while there is another node."""
        r = self.per_node(size)
        if self.nodes(size) == 1 or size < 2:
            return 0.0
        return max(1.0, r * (size - r) / (size - 1))

    def shared_beta(self, size: int) -> float:
        """Seconds per byte each rank gets when all ``size`` ranks send at once through the
        shared bottleneck."""
        return size * self.shared_s_per_byte


def shared_from_concurrent(
    concurrent_beta: float, size: int, exchange_beta: float, threshold: float = SHARED_THRESHOLD
) -> float:
    """``shared_s_per_byte`` from netfit's concurrent sweep at ``size`` ranks: each rank's
    ``concurrent_beta`` when all send at once, against ``exchange_beta`` of one pair
    sending both ways. Slower by more than ``threshold``: the ranks share a bottleneck of
    ``size / concurrent_beta`` bytes per second; else none is seen (0.0).

    >>> shared_from_concurrent(9.6e-9, 8, 3.5e-9), shared_from_concurrent(9.2e-9, 4, 8.5e-9)
    (1.2e-09, 0.0)
    """
    for name, v in (("concurrent_beta", concurrent_beta), ("exchange_beta", exchange_beta)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if size < 2:
        raise ValueError(f"a concurrent sweep needs size >= 2, got {size}")
    if concurrent_beta <= threshold * exchange_beta:
        return 0.0
    return concurrent_beta / size

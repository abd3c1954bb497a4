"""What the shapes' time models share: where ranks sit on the link's fabric. PURE.

A link's ``fabric`` (:class:`gossipgrad.tools.plan.fabric.Fabric`) says how many ranks share
a node and its network interface, the intra-node link's latency and per-byte time (None:
the network's), and a shared bottleneck; these read it."""

from __future__ import annotations

from typing import Any


def intra(fabric: Any, alpha: float, beta: float) -> tuple[float, float]:
    """The intra-node link's (alpha, beta); the network's where the fabric gives none."""
    a = alpha if fabric.intra_alpha_s is None else fabric.intra_alpha_s
    b = beta if fabric.intra_beta_s_per_byte is None else fabric.intra_beta_s_per_byte
    return a, b


def placed(fabric: Any, size: int, alpha: float, beta: float) -> tuple[int, int, float, float]:
    """Ranks a node, nodes, and the intra-node link's alpha and beta at ``size`` ranks."""
    return (fabric.per_node(size), fabric.nodes(size), *intra(fabric, alpha, beta))


def send_copies(grads: int, staleness: int) -> list[tuple[str, int]]:
    """A stale exchange's copies of what it sent (every bucket, until the next step)."""
    return [("send copies", grads)] if staleness == 1 else []

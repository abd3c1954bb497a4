"""Synthetic profiles from a layer table, for projections before any measurement exists.

Each layer's gradient is assumed ready when backward has done the work of every layer after
it (backward runs in reverse), with backward time split across layers in proportion to
their FLOPs. One bucket per layer that has parameters; the planner merges them.

    >>> p = synthetic_profile("toy", [Layer("a", 10, 3.0), Layer("b", 5, 1.0)],
    ...                       batch_size=1, forward_s=1.0, backward_s=2.0, optimizer_s=0.0)
    >>> [(b.bytes, b.ready_s) for b in p.buckets]
    [(20, 0.5), (40, 2.0)]

This is an approximation: real backward time per layer also depends on memory-bound
operations (batch norm, activations) that FLOP counts miss. Replace with a measured profile
(``gossipgrad profile``) as soon as one exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gossipgrad.tools.plan.formats import Bucket, Profile


@dataclass(frozen=True)
class Layer:
    """A layer in forward order: parameter count and forward FLOPs (any consistent unit)."""

    name: str
    params: int
    flops: float


def synthetic_profile(
    model: str,
    layers: Sequence[Layer],
    *,
    batch_size: int,
    forward_s: float,
    backward_s: float,
    optimizer_s: float,
    device: str = "synthetic",
    bytes_per_param: int = 4,
) -> Profile:
    total_flops = sum(layer.flops for layer in layers)
    if not layers or total_flops <= 0:
        raise ValueError("layers must be non-empty with a positive FLOP total")
    buckets, done = [], 0.0
    for layer in reversed(layers):
        done += layer.flops
        if layer.params > 0:
            ready = min(backward_s, backward_s * done / total_flops)
            buckets.append(Bucket(len(buckets), layer.params * bytes_per_param, ready))
    param_bytes = sum(layer.params for layer in layers) * bytes_per_param
    return Profile.from_json(
        Profile(
            model,
            batch_size,
            device,
            forward_s,
            backward_s,
            optimizer_s,
            param_bytes,
            tuple(buckets),
        ).to_json()
    )

"""Device-memory check of a configuration: does it fit, and by how much.

Accounting (bytes), with ``P`` = ``param_bytes`` and ``G`` = bytes in gradient buckets:

- base: the profile's measured peak ``memory_bytes`` when present (a local step: params,
  grads, optimizer state and activations). Otherwise ``P`` (params) + ``G`` (grads, which
  live in the buckets) + ``optimizer_state_factor * P`` — activations are then *not*
  counted, and the estimate says so;
- the exchange's buffers: what the strategy's exchange shape says it holds (its
  ``memory`` of an ``ExchangeLoad``, a lossy codec included: ``gossipgrad/shapes/``): gossip
  a receive buffer per bucket, allreduce a staging buffer of the largest, staleness 1 a
  send copy of every bucket, a lossy codec's wires, residuals and decoding scratch (counts
  read off the tensors of small runs: tests/inprocess/test_codec_memory.py);
- an ``incast`` shape (ps), on its busiest owner (``S`` = the bytes it serves, ``s`` = the
  slack): master copies ``S`` and their mean gradient ``S``; ``s + 2`` push slots per owned
  bucket ``b``, each ``(2 + pool_b) n_b`` (the sum, its own push and the receive pool,
  :func:`~gossipgrad.engine.ps.shards.push_pool`); its optimizer state is
  ``optimizer_state_factor * S`` instead of ``* P`` (only owners keep it; a measured peak
  of a local step keeps the whole model's, so it overstates);
- size 1 or local: no communication buffers.

    >>> from gossipgrad.tools.plan.formats import Bucket, Profile
    >>> p = Profile("m", 1, "cpu", 0.1, 0.2, 0.0, 100, (Bucket(0, 100, 0.2),))
    >>> estimate_memory(p, "gossip", size=2, staleness=1, device_memory_bytes=500).fits
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from gossipgrad.engine.ps.shards import push_pool
from gossipgrad.shapes.server import owned
from gossipgrad.specs import ExchangeLoad
from gossipgrad.tools.plan.formats import Profile
from gossipgrad.tools.plan.model import shape_of


@dataclass(frozen=True)
class MemoryEstimate:
    """Required device bytes by part; ``fits`` is None when the capacity is unknown."""

    breakdown: tuple[tuple[str, int], ...]
    available_bytes: int | None
    activations_included: bool

    @property
    def required_bytes(self) -> int:
        return sum(n for _, n in self.breakdown)

    @property
    def fits(self) -> bool | None:
        if self.available_bytes is None:
            return None
        return self.required_bytes <= self.available_bytes

    def describe(self) -> str:
        parts = ", ".join(f"{name} {_gb(n)}" for name, n in self.breakdown)
        need = f"needs {_gb(self.required_bytes)} ({parts})"
        if not self.activations_included:
            need += " not counting activations"
        if self.available_bytes is None:
            return f"{need}; device memory unknown, not checked"
        verdict = "fits in" if self.fits else "does NOT fit in"
        return f"{need}; {verdict} {_gb(self.available_bytes)}"


def _gb(n: int) -> str:
    return f"{n / 1e9:.3g} GB"


def estimate_memory(
    profile: Profile,
    strategy: str,
    *,
    size: int,
    staleness: int = 0,
    device_memory_bytes: int | None = None,
    optimizer_state_factor: float = 1.0,
    wire_ratio: float = 1.0,
    feedback: bool = False,
    ranks_per_node: int = 1,
) -> MemoryEstimate:
    """Estimate device memory for ``profile`` (already re-bucketed) under ``strategy``.

    ``optimizer_state_factor`` is optimizer state per parameter byte (SGD with momentum 1,
    Adam 2, plain SGD 0); it is ignored when the profile has a measured peak.
    ``wire_ratio``: wire bytes per float32 byte of a lossy codec (1.0: none, fp32);
    ``feedback``: the codec keeps error-feedback residuals.
    ``ranks_per_node``: ranks behind one network interface (gossip-node's shards are a
    bucket's ``1 / ranks_per_node``).
    """
    shape = shape_of(strategy)
    if staleness not in (0, 1):
        raise ValueError(f"staleness must be 0 or 1, got {staleness!r}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size!r}")
    if not optimizer_state_factor >= 0:
        raise ValueError(f"optimizer_state_factor must be >= 0, got {optimizer_state_factor}")
    if device_memory_bytes is not None and device_memory_bytes < 0:
        raise ValueError(f"device_memory_bytes must be >= 0, got {device_memory_bytes}")
    if not 0 < wire_ratio <= 1:
        raise ValueError(f"wire_ratio must be in (0, 1], got {wire_ratio!r}")
    _whole_number(ranks_per_node, "ranks_per_node")
    grads = profile.grad_bytes
    parts: list[tuple[str, int]]
    if profile.memory_bytes is not None:
        parts = [("measured peak", profile.memory_bytes)]
    else:
        parts = [
            ("params", profile.param_bytes),
            ("grads", grads),
            ("optimizer state", round(optimizer_state_factor * profile.param_bytes)),
        ]
    moves = size > 1 and shape.moves
    lossy = wire_ratio < 1 and moves
    nbytes = [b.bytes for b in profile.buckets]
    if moves and shape.incast:
        parts = _busiest_owner(parts, profile, size, staleness, optimizer_state_factor)
    if moves:
        ratio = wire_ratio if lossy else 1.0
        load = ExchangeLoad(grads, tuple(nbytes), size, staleness, ratio, feedback, ranks_per_node)
        parts += shape.memory(load)
    return MemoryEstimate(tuple(parts), device_memory_bytes, profile.memory_bytes is not None)


def _whole_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _busiest_owner(
    parts: list[tuple[str, int]], profile: Profile, size: int, max_lag: int, state: float
) -> list[tuple[str, int]]:
    """``parts`` with the server's buffers of the rank that needs the most of them."""
    best: list[tuple[str, int]] = []
    # a rank that owns nothing needs nothing
    for mine in owned([b.bytes for b in profile.buckets], size) or [[]]:
        served = sum(mine)
        slots = (max_lag + 2) * sum((2 + push_pool(n, size)) * n for n in mine)
        extra = [("served masters and mean gradients", 2 * served), ("push slots", slots)]
        if profile.memory_bytes is None:
            extra.append(("optimizer state", round(state * served)))
        if not best or sum(n for _, n in extra) > sum(n for _, n in best):
            best = extra
    if profile.memory_bytes is None:  # only the owners keep optimizer state
        parts = [p for p in parts if p[0] != "optimizer state"]
    return parts + best

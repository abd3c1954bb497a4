"""Device-memory check of a configuration: does it fit, and by how much.

Accounting (bytes), with ``P`` = ``param_bytes`` and ``G`` = bytes in gradient buckets:

- base: the profile's measured peak ``memory_bytes`` when present (a local step: params,
  grads, optimizer state and activations). Otherwise ``P`` (params) + ``G`` (grads, which
  live in the buckets) + ``optimizer_state_factor * P`` — activations are then *not*
  counted, and the estimate says so;
- gossip: one receive buffer per bucket, ``G`` in all (gossip-node: the shards of it
  from the node's other ranks and the partner node's, ``G`` too);
- allreduce / horovod: one staging buffer the size of the largest bucket;
- staleness 1: a send copy of every bucket, ``G``, so the next backward can write the grads;
- ps, on its busiest owner (``S`` = the bytes it serves, ``s`` = ``max_lag``): master copies
  ``S`` and their mean gradient ``S``; ``s + 2`` push slots per owned bucket ``b``, each
  ``(2 + pool_b) n_b`` (the sum, its own push and the receive pool, :func:`push_pool`);
  its optimizer state is ``optimizer_state_factor * S`` instead of ``* P`` (only owners
  keep it; a measured peak of a local step keeps the whole model's, so it overstates);
- a lossy wire codec (``wire_ratio`` < 1, ``r``; ``n`` ranks, ``m`` the largest bucket):
  its byte buffers, kept per bucket: gossip a send and a receive wire, ``2 r G`` (instead
  of the float32 receive buffers); allreduce every shard sent and received over two stages,
  ``r G (3n - 2) / n``; ps a push and a pull wire per step in flight for each bucket served
  elsewhere, ``2 (s + 1) r (G - S)``, and on its owner a wire per pool buffer and one for
  its pull. Decoding scratch, grown to the largest bucket on whichever thread encodes:
  gossip ``2 m``, ps ``m``, allreduce none (it decodes in place). With error feedback
  (fp8's default) the residuals and the last decoding of every bucket, ``2 G``, and more
  scratch (float32 and int32): gossip ``5 m``, allreduce ``3 m``, ps ``4 m``. The scratch
  counts were read off the tensors two small runs held, and checked on other models and
  sizes (tests/inprocess/test_codec_memory.py). gossip-node encodes only its exchange
  between nodes, a ``1/k`` shard on ``k`` ranks a node: the node's other ranks' float32
  copies of this rank's shard ``(k - 1) G / k``, the shard's send and receive wires
  ``2 r G / k``, and gossip's residuals and scratch for the shards (``/ k``; one node
  encodes nothing; ``ranks_per_node``: the planner's fabric);
- size 1 or local: no communication buffers.

    >>> from gossipgrad.tools.plan.formats import Bucket, Profile
    >>> p = Profile("m", 1, "cpu", 0.1, 0.2, 0.0, 100, (Bucket(0, 100, 0.2),))
    >>> estimate_memory(p, "gossip", size=2, staleness=1, device_memory_bytes=500).fits
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from gossipgrad.tools.plan.formats import Profile
from gossipgrad.tools.plan.model import pattern_of
from gossipgrad.tools.plan.patterns import assign_owners, push_pool


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
    pattern = pattern_of(strategy)
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
    lossy = wire_ratio < 1 and size > 1 and pattern != "none"
    if size > 1 and pattern == "server":
        parts = _busiest_owner(parts, profile, size, staleness, optimizer_state_factor)
    elif size > 1 and pattern != "none":
        if pattern in ("peer", "node") and not lossy:  # a lossy codec's wires instead
            parts.append(("receive buffers", grads))
        elif not lossy:
            parts.append(("allreduce staging", max(b.bytes for b in profile.buckets)))
        if staleness == 1:
            parts.append(("send copies", grads))
    if lossy:
        parts += _codec_parts(
            profile, pattern, size, staleness, wire_ratio, feedback, ranks_per_node
        )
    return MemoryEstimate(tuple(parts), device_memory_bytes, profile.memory_bytes is not None)


def _whole_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _busiest_owner(
    parts: list[tuple[str, int]], profile: Profile, size: int, max_lag: int, state: float
) -> list[tuple[str, int]]:
    """``parts`` with the server's buffers of the rank that needs the most of them."""
    best: list[tuple[str, int]] = []
    for mine in _owned(profile, size) or [[]]:  # a rank that owns nothing needs nothing
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


def _codec_parts(
    profile: Profile,
    pattern: str,
    size: int,
    staleness: int,
    ratio: float,
    feedback: bool,
    ranks_per_node: int = 1,
) -> list[tuple[str, int]]:
    """A lossy codec's buffers on one rank (the module's accounting)."""
    grads = profile.grad_bytes
    if pattern == "peer":
        parts = [("wire buffers (send and receive)", round(2 * ratio * grads))]
    elif pattern == "node":  # the node's other ranks' copies of this rank's shard (float32),
        r = ranks_per_node  # and the shard's send and receive wires between nodes
        parts = (
            [("receive buffers (the node's shards)", round((r - 1) * grads / r))] if r > 1 else []
        )
        if r >= size:  # one node: nothing crosses a network interface, nothing is encoded
            return parts
        parts.append(("wire buffers (send and receive)", round(2 * ratio * grads / r)))
    elif pattern == "ring":
        shards = ratio * grads * (3 * size - 2) / size
        parts = [("wire buffers (shards sent and received)", round(shards))]
    else:
        parts = [("wire buffers", _ps_wires(profile, size, staleness, ratio))]
    share = ranks_per_node if pattern == "node" else 1  # what is encoded: the shard
    if feedback:
        parts.append(("error-feedback residuals and last decodings", round(2 * grads / share)))
    # buckets of decoding scratch, by pattern: without feedback, with it
    scratch = {"peer": (2, 5), "node": (2, 5), "ring": (0, 3), "server": (1, 4)}[pattern][feedback]
    if scratch:
        largest = max(b.bytes for b in profile.buckets)
        parts.append(("codec scratch", round(scratch * largest / share)))
    return parts


def _owned(profile: Profile, size: int) -> list[list[int]]:
    """The bucket sizes each owning rank of ps serves (ranks that own none left out), in
    one pass over the buckets, not one per rank."""
    nbytes = [b.bytes for b in profile.buckets]
    mine: dict[int, list[int]] = {}
    for n, o in zip(nbytes, assign_owners(nbytes, size), strict=True):
        mine.setdefault(o, []).append(n)
    return [mine[r] for r in sorted(mine)]


def _ps_wires(profile: Profile, size: int, max_lag: int, ratio: float) -> int:
    """A lossy codec's wires on ps's busiest owner: a push and a pull wire per step in
    flight for every bucket another rank serves, a wire per pool buffer of every push slot
    of its own buckets and one for each pull it sends."""
    total = sum(b.bytes for b in profile.buckets)
    owned = _owned(profile, size)
    if len(owned) < size:
        owned.append([])  # a rank that owns nothing sends every push and pull wire
    most = 0
    for mine in owned:
        theirs = total - sum(mine)
        served = sum((max_lag + 2) * push_pool(n, size) * n + n for n in mine)
        most = max(most, round(ratio * (2 * (max_lag + 1) * theirs + served)))
    return most

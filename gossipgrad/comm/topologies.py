"""The built-in topologies, each a :class:`~gossipgrad.specs.TopologySpec` registered in
:data:`gossipgrad.registry.TOPOLOGIES`. PURE: stdlib only.

    >>> from gossipgrad.registry import TOPOLOGIES
    >>> [TOPOLOGIES.get("auto").resolve(n).name for n in (8, 6)]
    ['hypercube', 'base2']
    >>> TOPOLOGIES.get("dissemination").pair(8, 1, 0)   # position 0 at step 1 of a pass
    (2, 6, 0.5)
"""

from __future__ import annotations

from gossipgrad.comm.base2 import base2_partners
from gossipgrad.registry import TOPOLOGIES
from gossipgrad.specs import TopologySpec


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def cycle_length(size: int) -> int:
    """Steps per cycle: ceil(log2 size); 0 for size 1 (no communication)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return (size - 1).bit_length()


class Hypercube(TopologySpec):
    name = "hypercube"
    summary = "power-of-two sizes: pairs along one dimension a step, the exact mean in log2(size)"
    step_label = "dim"

    def refusal(self, size: int) -> str | None:
        if is_power_of_two(size):
            return None
        return (
            f"--topology hypercube needs a power-of-two number of ranks, got {size}; "
            "use --topology dissemination (any size) or --topology auto"
        )

    def period(self, size: int) -> int:
        return cycle_length(size)

    def exact(self, size: int) -> bool:
        return True

    def pair(self, size: int, t: int, v: int) -> tuple[int, int, float]:
        peer = v ^ (1 << t)
        return peer, peer, 0.5


class Dissemination(TopologySpec):
    name = "dissemination"
    summary = "any size: send 2^d ahead, receive 2^d behind; exact only for powers of two"
    step_label = "dim"

    def period(self, size: int) -> int:
        return cycle_length(size)

    def exact(self, size: int) -> bool:
        return is_power_of_two(size)

    def pair(self, size: int, t: int, v: int) -> tuple[int, int, float]:
        hop = 1 << t
        return (v + hop) % size, (v - hop) % size, 0.5


class Base2(TopologySpec):
    name = "base2"
    summary = "any size: the exact mean after one pass (comm/base2.py); some ranks idle"
    halves = False
    step_label = "round"

    def period(self, size: int) -> int:
        return len(base2_partners(size))

    def exact(self, size: int) -> bool:
        return True

    def pair(self, size: int, t: int, v: int) -> tuple[int, int, float]:
        partner, weight = base2_partners(size)[t][v]
        return partner, partner, weight


class Auto(TopologySpec):
    name = "auto"
    summary = "hypercube for power-of-two sizes, else base2 (both exact in finite time)"

    def resolve(self, size: int) -> TopologySpec:
        return TOPOLOGIES.get(best_exact_topology(size))


def best_exact_topology(size: int) -> str:
    """The built-in topology that gives the exact mean in the fewest steps at ``size``: the
    hypercube for powers of two (log2 size steps; base2 is the same schedule there), else
    base2.

        >>> best_exact_topology(8), best_exact_topology(6)
        ('hypercube', 'base2')
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return Hypercube.name if is_power_of_two(size) else Base2.name


for _spec in (Auto(), Hypercube(), Dissemination(), Base2()):
    if _spec.name not in TOPOLOGIES.names():
        TOPOLOGIES.register(_spec.name, _spec)

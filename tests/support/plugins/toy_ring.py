"""A toy topology, outside the package: ``--topology toy-ring`` sends to the next position and
receives from the previous one at every step, with weight 1/2 (a one-peer ring: it contracts,
exact only at two ranks). It proves the topology seam: one module, a pure function of the
step and position, registered from the tests."""

from __future__ import annotations

from gossipgrad.registry import TOPOLOGIES
from gossipgrad.specs import TopologySpec

NAME = "toy-ring"


class ToyRing(TopologySpec):
    name = NAME
    summary = "a toy: send to the next rank, receive from the previous one, weight 1/2"

    def period(self, size: int) -> int:
        return 1

    def exact(self, size: int) -> bool:
        return size <= 2

    def pair(self, size: int, t: int, v: int) -> tuple[int, int, float]:
        return (v + 1) % size, (v - 1) % size, 0.5


TOPOLOGIES.register(NAME, ToyRing(), replace=True)

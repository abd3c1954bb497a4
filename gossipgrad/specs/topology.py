"""What a topology is (``TOPOLOGIES.register(name, spec)``): a pure function of the step and
a rank's position that names its partners and weight. PURE.

A topology works in *virtual positions* ``0..size-1``; :class:`gossipgrad.comm.schedule.Schedule`
maps them to ranks through the seeded rotation of each period, checks the invariants
(:func:`gossipgrad.comm.schedule.check_schedule`) and serves ``peers(rank, step)``. A new
topology is one module::

    class Ring(TopologySpec):
        name = "ring"
        def period(self, size): return 1
        def exact(self, size): return size <= 2
        def pair(self, size, t, v): return (v + 1) % size, (v - 1) % size, 0.5
    TOPOLOGIES.register("ring", Ring())
"""

from __future__ import annotations

from typing import ClassVar


class TopologySpec:
    """One ``--topology``.

    Class attributes:
        name: the ``--topology`` value.
        summary: one line for ``--help``.
        halves: every rank has a partner at every step and mixes with weight 1/2 (the
            schedule's checks hold it to that).
        step_label: what one step within a period is called in ``gossipgrad schedule``.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    halves: ClassVar[bool] = True
    step_label: ClassVar[str] = "step"

    def refusal(self, size: int) -> str | None:
        """Why this topology cannot run at ``size`` ranks (one line), or None."""
        return None

    def resolve(self, size: int) -> TopologySpec:
        """The topology that runs at ``size`` (``auto`` picks one; others are themselves)."""
        return self

    def period(self, size: int) -> int:
        """Steps of one pass (>= 1 for ``size`` >= 2); the rotation changes every pass."""
        raise NotImplementedError

    def exact(self, size: int) -> bool:
        """Whether one pass of pure mixing gives every rank the exact mean."""
        return False

    def pair(self, size: int, t: int, v: int) -> tuple[int, int, float]:
        """Position ``v``'s ``(dst, src, weight)`` at step ``t`` of a pass (``0 <= t <
        period``): send to ``dst``, receive from ``src``, mix ``x = (1 - w) x + w x_src``.
        An idle position is ``(v, v, 0.0)``. Every step must pair positions into a
        permutation, and the receiver of ``v`` must use ``v``'s weight."""
        raise NotImplementedError

"""Rounds that share the network's ports at max-min fair rates: the fluid timeline of a
parameter server's pushes and pulls (:func:`gossipgrad.plan.model.step_time`).

A *round* moves bytes between one owner and every other rank at once. Its ``hot`` side
puts all of them on a few resources (the owner's port in one direction, its intra-node
link, a shared bottleneck); its ``spread`` side puts ``spread_bytes`` per rank on the port
of every other node, in the other direction (a push: every other rank sends ``n`` bytes
out of its port into the owner's; a pull: the owner's port sends them out, every other
port takes ``n`` in). Ports are full duplex: ``("in", m)`` and ``("out", m)`` of node
``m`` are separate resources, each moving at most its capacity in bytes per second, and a
port carries whatever rounds cross it at once, however many owners they belong to.

Rounds active at the same time progress at max-min fair rates (progressive filling: every
round's rate rises together until some resource is full, the rounds crossing it stop
rising, the rest go on), which is how TCP streams through switch ports share them to a
first approximation; a round moves as one (its per-rank streams are alike). A round ends
``latency_s`` after its last byte. Events are the rounds' starts and ends, so the cost is
about (rounds x active rounds), with the spread side summed per node, not per rank.

PURE: stdlib only.

    >>> net = Network(counts=(1, 1), capacity={("in", 0): 10.0, ("in", 1): 10.0,
    ...                                       ("out", 0): 10.0, ("out", 1): 10.0})
    >>> a = Round(0.0, 0.0, ((("in", 0), 10.0),), "out", 0, 10.0)   # rank 1 -> rank 0
    >>> b = Round(0.0, 0.0, ((("out", 1), 10.0),), "in", 1, 10.0)   # rank 1 -> rank 0 too
    >>> [end for _, end in run(net, [a, b])]   # both cross rank 1's out and rank 0's in
    [2.0, 2.0]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

IN, OUT = "in", "out"
_FULL = 1e-9  # a resource with less than this share of its capacity left is full


@dataclass(frozen=True)
class Round:
    """One round: ready at ``ready_s``, over ``latency_s`` after its last byte.

    ``hot``: ``(resource, bytes)`` pairs; ``spread`` (``"in"``, ``"out"`` or None): the
    direction of the ports of every node but ``node`` that carry ``spread_bytes`` per rank.
    """

    ready_s: float
    latency_s: float
    hot: tuple[tuple[Hashable, float], ...] = ()
    spread: str | None = None
    node: int = 0
    spread_bytes: float = 0.0

    @property
    def empty(self) -> bool:
        return not (any(x > 0 for _, x in self.hot) or (self.spread and self.spread_bytes > 0))


@dataclass(frozen=True)
class Network:
    """``counts[m]``: ranks behind port ``m``; ``capacity``: bytes per second of each
    limited resource (ports as ``("in", m)``/``("out", m)``; a resource not listed is
    unlimited)."""

    counts: tuple[int, ...]
    capacity: Mapping[Hashable, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for res, cap in self.capacity.items():
            if not cap > 0:
                raise ValueError(f"capacity of {res!r} must be > 0, got {cap!r}")


def fair_rates(net: Network, rounds: Sequence[Round]) -> list[float]:
    """Max-min fair progress rates (rounds per second; ``inf`` for a round no limited
    resource holds back) of ``rounds`` all active at once."""
    rate = [0.0] * len(rounds)
    used: dict[Hashable, float] = {}
    live = {i for i, r in enumerate(rounds) if not r.empty}
    for i, r in enumerate(rounds):
        if r.empty:
            rate[i] = math.inf
    while live:
        load = _loads(net, [rounds[i] for i in live])
        steps = [
            (net.capacity[res] - used.get(res, 0.0)) / x
            for res, x in load.items()
            if x > 0 and res in net.capacity
        ]
        if not steps:
            for i in live:
                rate[i] = math.inf
            return rate
        delta = max(0.0, min(steps))
        for i in live:
            rate[i] += delta
        full = set()
        for res, x in load.items():
            if x > 0 and res in net.capacity:
                used[res] = used.get(res, 0.0) + delta * x
                if net.capacity[res] - used[res] <= _FULL * net.capacity[res]:
                    full.add(res)
        live = {i for i in live if not _crosses(rounds[i], full)}
    return rate


def _loads(net: Network, rounds: Iterable[Round]) -> dict[Hashable, float]:
    """Bytes per unit of progress on each resource, of ``rounds`` together."""
    load: dict[Hashable, float] = {}
    total = {IN: 0.0, OUT: 0.0}
    own: dict[tuple[str, int], float] = {}
    for r in rounds:
        for res, x in r.hot:
            load[res] = load.get(res, 0.0) + x
        if r.spread and r.spread_bytes > 0:
            total[r.spread] += r.spread_bytes
            own[(r.spread, r.node)] = own.get((r.spread, r.node), 0.0) + r.spread_bytes
    for d in (IN, OUT):
        if total[d] > 0:
            for m, c in enumerate(net.counts):
                x = c * (total[d] - own.get((d, m), 0.0))
                if x > 0:
                    load[(d, m)] = load.get((d, m), 0.0) + x
    return load


def _crosses(r: Round, full: set[Hashable]) -> bool:
    if any(res in full for res, x in r.hot if x > 0):
        return True
    if not (r.spread and r.spread_bytes > 0):
        return False
    return any(
        isinstance(res, tuple) and len(res) == 2 and res[0] == r.spread and res[1] != r.node
        for res in full
    )


def run(
    net: Network,
    rounds: Iterable[Round],
    then: Callable[[int, float], Iterable[Round]] | None = None,
) -> list[tuple[float, float]]:
    """``(start, end)`` of every round, in the order given and then added: when round
    ``i`` ends at ``t``, ``then(i, t)`` may add rounds (each ready at ``>= t``)."""
    todo = list(rounds)
    spans: list[tuple[float, float]] = [(math.nan, math.nan)] * len(todo)
    pending = [(r.ready_s, i) for i, r in enumerate(todo)]
    heapq.heapify(pending)
    active: dict[int, float] = {}  # round -> share of its bytes still to move
    t = 0.0

    def finish(i: int, when: float) -> None:
        end = when + todo[i].latency_s
        spans[i] = (spans[i][0], end)
        for new in then(i, end) if then else ():
            if not new.ready_s >= end - 1e-12:
                raise ValueError(f"a round added at {end} is ready earlier ({new.ready_s})")
            todo.append(new)
            spans.append((math.nan, math.nan))
            heapq.heappush(pending, (new.ready_s, len(todo) - 1))

    while pending or active:
        if not active:
            t = max(t, pending[0][0])
        while pending and pending[0][0] <= t:
            _, i = heapq.heappop(pending)
            spans[i] = (t, math.nan)
            if todo[i].empty:
                finish(i, t)
            else:
                active[i] = 1.0
        if not active:
            continue
        ids = list(active)
        rates = fair_rates(net, [todo[i] for i in ids])
        dt = min(active[i] / v if v < math.inf else 0.0 for i, v in zip(ids, rates, strict=True))
        if pending:
            dt = min(dt, pending[0][0] - t)
        t += dt
        for i, v in zip(ids, rates, strict=True):
            active[i] = 0.0 if v == math.inf else active[i] - v * dt
            if active[i] <= 1e-9:
                del active[i]
                finish(i, t)
    return spans

"""Rounds that share the network's ports at max-min fair rates: the fluid timeline of a
parameter server's pushes and pulls (:func:`gossipgrad.tools.plan.model.step_time`).

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
about (rounds x (active rounds + nodes)), the ports as arrays over the nodes.

PURE (numpy for the ports' arrays).

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
from functools import cached_property

import numpy as np

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

    def port_capacity(self, direction: str) -> np.ndarray:
        """Bytes per second of every node's port in ``direction`` (inf: unlimited)."""
        return self._arrays[1][direction]

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The ranks per port and every port's capacity per direction, built once (every
        event of a timeline reads them)."""
        caps = {
            d: np.array([self.capacity.get((d, m), math.inf) for m in range(len(self.counts))])
            for d in (IN, OUT)
        }
        return np.array(self.counts, dtype=float), caps


def fair_rates(net: Network, rounds: Sequence[Round]) -> list[float]:
    """Max-min fair progress rates (rounds per second; ``inf`` for a round no limited
    resource holds back) of ``rounds`` all active at once."""
    return _Filling(net, rounds).rates()


class _Filling:
    """Progressive filling: the ports as arrays per direction (the spread side of a round
    loads every node's port but its own), the other resources by name."""

    def __init__(self, net: Network, rounds: Sequence[Round]) -> None:
        self.net, self.rounds = net, rounds
        self.counts, self.cap = net._arrays  # read-only here
        self.used = {d: np.zeros(len(net.counts)) for d in (IN, OUT)}
        self.used_other: dict[Hashable, float] = {}

    def rates(self) -> list[float]:
        rate = [0.0 if not r.empty else math.inf for r in self.rounds]
        live = [i for i, r in enumerate(self.rounds) if not r.empty]
        while live:
            ports, other = self._loads(live)
            delta = self._step(ports, other)
            if delta is None:
                for i in live:
                    rate[i] = math.inf
                break
            for i in live:
                rate[i] += delta
            full_ports, full_other = self._fill(ports, other, delta)
            live = [i for i in live if not self._crosses(self.rounds[i], full_ports, full_other)]
        return rate

    def _loads(self, live: list[int]) -> tuple[dict[str, np.ndarray], dict[Hashable, float]]:
        """Bytes per unit of progress of the ``live`` rounds together, per port direction
        (arrays over nodes) and per other resource."""
        n = len(self.counts)
        hot = {d: np.zeros(n) for d in (IN, OUT)}
        own = {d: np.zeros(n) for d in (IN, OUT)}
        other: dict[Hashable, float] = {}
        for i in live:
            r = self.rounds[i]
            for res, x in r.hot:
                if _is_port(res):
                    hot[res[0]][res[1]] += x
                else:
                    other[res] = other.get(res, 0.0) + x
            if r.spread and r.spread_bytes > 0:
                own[r.spread][r.node] += r.spread_bytes
        ports = {d: hot[d] + self.counts * (own[d].sum() - own[d]) for d in (IN, OUT)}
        return ports, other

    def _step(self, ports: dict[str, np.ndarray], other: dict[Hashable, float]) -> float | None:
        """How far every live round's rate can rise before a resource is full (None: no
        limited resource holds them)."""
        steps = []
        for d in (IN, OUT):
            held = (ports[d] > 0) & np.isfinite(self.cap[d])
            if held.any():
                steps.append(float(((self.cap[d] - self.used[d])[held] / ports[d][held]).min()))
        cap = self.net.capacity
        steps += [
            (cap[res] - self.used_other.get(res, 0.0)) / x
            for res, x in other.items()
            if x > 0 and res in cap
        ]
        return max(0.0, min(steps)) if steps else None

    def _fill(
        self, ports: dict[str, np.ndarray], other: dict[Hashable, float], delta: float
    ) -> tuple[dict[str, np.ndarray], set[Hashable]]:
        """Add ``delta`` of progress to the resources; the ones now full."""
        full_ports = {}
        for d in (IN, OUT):
            self.used[d] += delta * ports[d]
            left = self.cap[d] - self.used[d]
            full_ports[d] = (
                (ports[d] > 0) & np.isfinite(self.cap[d]) & (left <= _FULL * self.cap[d])
            )
        full_other = set()
        cap = self.net.capacity
        for res, x in other.items():
            if x > 0 and res in cap:
                self.used_other[res] = self.used_other.get(res, 0.0) + delta * x
                if cap[res] - self.used_other[res] <= _FULL * cap[res]:
                    full_other.add(res)
        return full_ports, full_other

    @staticmethod
    def _crosses(r: Round, full_ports: dict[str, np.ndarray], full_other: set[Hashable]) -> bool:
        for res, x in r.hot:
            if x > 0 and (full_ports[res[0]][res[1]] if _is_port(res) else res in full_other):
                return True
        if not (r.spread and r.spread_bytes > 0):
            return False
        full = full_ports[r.spread]
        return int(full.sum()) - int(full[r.node]) > 0


def _is_port(res: Hashable) -> bool:
    return isinstance(res, tuple) and len(res) == 2 and res[0] in (IN, OUT)


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

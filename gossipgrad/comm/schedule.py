"""Partner schedules: pure functions of (rank, step, size, seed). No transport, no torch.

Example, 4 ranks on a hypercube without rotation: at step 0 rank 0 pairs with 1, at step 1
with 2, then the next cycle starts again at dimension 0::

    >>> s = Schedule(size=4, topology="hypercube", rotate=False)
    >>> [s.peers(0, t).dst for t in range(3)]
    [1, 2, 1]

``base2`` (:mod:`gossipgrad.comm.base2`) pairs ranks with weights that are not all 1/2 and
leaves some ranks idle in some steps, and gives the exact mean after one pass for any size::

    >>> s = Schedule(size=3, topology="base2", rotate=False)
    >>> s.period, s.exact_steps, [s.peers(r, 1) for r in (2, 1)]  # doctest: +NORMALIZE_WHITESPACE
    (3, 3, [Peers(dst=0, src=0, dimension=1, weight=0.6666666666666666),
            Peers(dst=1, src=1, dimension=1, weight=0.0)])

Mixing rule of a step: ``x = (1 - weight) * x + weight * x_from_src``.

Invariant: at every step the map rank -> dst is a permutation and dst(src(r)) == r, so every
send has exactly one matching receive; the rank that receives from ``r`` uses ``r``'s
weight, so every step's mixing matrix is doubly stochastic (the mean is kept); an idle rank
is paired with itself with weight 0. Within a cycle (one period) the rank numbering is
permuted by a seeded permutation that is identical on every rank (no broadcast needed).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np

from gossipgrad.comm.base2 import base2_partners
from gossipgrad.options import Topology, choice

AUTO_PICKS_EXACT: Final = True
"""Whether ``auto`` resolves to :func:`best_exact_topology` (base2 for sizes that are not a
power of two) instead of dissemination: the engine mixes with ``Peers.weight`` and sends
nothing on an idle step, so base2 gives the exact mean after one period in training too
(powers of two get the hypercube either way). lab/records/schedules.md has the
digits runs at 6 and 7 ranks that checked it against dissemination."""


@dataclass(frozen=True)
class Peers:
    """This step's partners: send to ``dst``, receive from ``src`` (equal on a hypercube and
    on base2), and mix ``x = (1 - weight) * x + weight * x_from_src``.

    ``dimension`` is the hypercube or dissemination dimension, or for base2 the step within
    its period. An idle rank (base2 only) is ``Peers(dst=rank, src=rank, weight=0.0)``: it
    sends and receives nothing this step.
    """

    dst: int
    src: int
    dimension: int
    weight: float = 0.5

    @property
    def idle(self) -> bool:
        """True when this rank has no partner this step (then ``dst == src ==`` the rank;
        :func:`check_schedule` checks that weight 0 happens exactly there)."""
        return self.weight == 0.0


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def cycle_length(size: int) -> int:
    """Steps per cycle: ceil(log2 size); 0 for size 1 (no communication)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return (size - 1).bit_length()


def best_exact_topology(size: int) -> Topology:
    """The schedule that gives the exact mean in the fewest steps at ``size``: the hypercube
    for powers of two (log2 size steps; base2 is the same schedule there), else base2.

        >>> best_exact_topology(8).value, best_exact_topology(6).value
        ('hypercube', 'base2')
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return Topology.HYPERCUBE if is_power_of_two(size) else Topology.BASE2


def resolve_topology(topology: str | Topology, size: int) -> Topology:
    """Map ``auto`` to a concrete topology and reject impossible combinations."""
    topo = choice(Topology, topology, "--topology")
    if topo is Topology.AUTO:
        if AUTO_PICKS_EXACT:
            return best_exact_topology(size)
        return Topology.HYPERCUBE if is_power_of_two(size) else Topology.DISSEMINATION
    if topo is Topology.HYPERCUBE and not is_power_of_two(size):
        raise ValueError(
            f"--topology hypercube needs a power-of-two number of ranks, got {size}; "
            "use --topology dissemination (any size) or --topology auto"
        )
    return topo


class Schedule:
    """Who exchanges with whom at each step.

    Args:
        size: number of ranks (>= 1).
        topology: ``auto``, ``hypercube``, ``dissemination`` or ``base2``.
        seed: shared seed for the per-cycle rotation.
        rotate: re-permute the rank numbering every cycle (cycle 0 is the identity).

    Attributes:
        period: steps of one pass of the schedule; the rotation is applied per period.
        cycle_length: the same number (steps per cycle, as checkpoints record it).
        exact_steps: steps after which pure mixing from the start of a period gives the
            exact mean on every rank (hypercube: log2 size, base2: its period,
            dissemination: log2 size for powers of two), or None where it only contracts.
    """

    def __init__(
        self,
        size: int,
        topology: str | Topology = Topology.AUTO,
        seed: int = 0,
        rotate: bool = True,
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.topology = resolve_topology(topology, size)
        self.seed = seed
        self.rotate = rotate
        if self.topology is Topology.BASE2:
            self.period = len(base2_partners(size))
        else:
            self.period = cycle_length(size)
        self.cycle_length = self.period
        exact = self.topology is not Topology.DISSEMINATION or is_power_of_two(size)
        self.exact_steps: int | None = self.period if exact else None

    def __repr__(self) -> str:
        return (
            f"Schedule(size={self.size}, topology={self.topology.value!r}, "
            f"seed={self.seed}, rotate={self.rotate})"
        )

    @property
    def active_share(self) -> float:
        """The share of rank-steps with a partner, over one period (1.0 on the hypercube
        and dissemination; base2 idles 12-33 % of them at 3, 5, 6, 7, 12): what a rank
        sends per step on average, as a share of one exchange."""
        if self.size == 1 or self.topology is not Topology.BASE2:
            return 1.0
        rows = base2_partners(self.size)
        idle = sum(weight == 0.0 for row in rows for _, weight in row)
        return 1.0 - idle / (self.size * len(rows))

    def cycle(self, step: int) -> int:
        return step // self.cycle_length if self.cycle_length else 0

    def permutation(self, cycle: int) -> np.ndarray:
        """Virtual position -> rank for ``cycle``; identical on every rank."""
        return _permutation(self.size, self.seed, cycle if self.rotate else 0)

    def peers(self, rank: int, step: int) -> Peers | None:
        """This step's partners of ``rank``, or None when size is 1."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank must be in [0, {self.size}), got {rank}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.size == 1:
            return None
        if self.topology is Topology.BASE2:
            return _base2_peers(self.size, self.seed, self.rotate, rank, step)
        return _peers(self.size, self.topology, self.seed, self.rotate, rank, step)

    def table(self, steps: int) -> list[list[Peers | None]]:
        """``table[step][rank]`` for the first ``steps`` steps."""
        return [[self.peers(r, t) for r in range(self.size)] for t in range(steps)]

    def fingerprint(self, steps: int | None = None) -> int:
        """A 63-bit hash of the first ``steps`` steps (default: two cycles), for start-up checks."""
        steps = steps if steps is not None else max(2 * self.cycle_length, 1)
        h = hashlib.sha256(repr(self).encode())
        for row in self.table(steps):
            h.update(bytes(str([_fingerprinted(p) for p in row]), "ascii"))
        return int.from_bytes(h.digest()[:8], "little") >> 1


def _fingerprinted(p: Peers | None) -> tuple[int | float, ...] | None:
    """What the fingerprint hashes of one peer: the weight only where it is not 1/2, so
    hypercube and dissemination fingerprints are the ones they always were."""
    if p is None:
        return None
    return (p.dst, p.src) if p.weight == 0.5 else (p.dst, p.src, p.weight)


def _peers(size: int, topology: Topology, seed: int, rotate: bool, rank: int, step: int) -> Peers:
    """The partners of ``rank`` at ``step``: plain integer arithmetic on the cycle's cached
    numbering (the exchange asks once per step, inside the timed path; going through numpy
    cost ~20 us against ~250 us for a whole 1 MiB exchange)."""
    steps = cycle_length(size)
    d = step % steps
    perm, position = _numbering(size, seed, step // steps if rotate else 0)
    v = position[rank]
    if topology is Topology.HYPERCUBE:
        peer = perm[v ^ (1 << d)]
        return Peers(dst=peer, src=peer, dimension=d)
    hop = 1 << d
    return Peers(dst=perm[(v + hop) % size], src=perm[(v - hop) % size], dimension=d)


def _base2_peers(size: int, seed: int, rotate: bool, rank: int, step: int) -> Peers:
    """The partner of ``rank`` at ``step`` on base2: the pass's pair table, read in the
    period's numbering (an idle position maps to the rank itself)."""
    period = len(base2_partners(size))
    t = step % period
    perm, position = _numbering(size, seed, step // period if rotate else 0)
    partner, weight = base2_partners(size)[t][position[rank]]
    return Peers(dst=perm[partner], src=perm[partner], dimension=t, weight=weight)


@lru_cache(maxsize=64)
def _numbering(size: int, seed: int, cycle: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The cycle's permutation (virtual position -> rank) and its inverse, as Python ints."""
    perm = tuple(int(r) for r in _permutation(size, seed, cycle))
    position = [0] * size
    for v, r in enumerate(perm):
        position[r] = v
    return perm, tuple(position)


@lru_cache(maxsize=64)
def _permutation(size: int, seed: int, cycle: int) -> np.ndarray:
    if cycle == 0:
        perm = np.arange(size)
    else:
        perm = np.random.default_rng([seed, cycle]).permutation(size)
    perm.setflags(write=False)
    return perm


def check_schedule(schedule: Schedule, steps: int) -> list[str]:
    """Return the invariant violations in the first ``steps`` steps (empty when sound).

    Checked at every step: dst is a permutation of the ranks (idle self-pairs included) and
    dst(src(r)) == r; a rank is paired with itself exactly when it idles with weight 0;
    weights lie in [0, 1] and the rank that receives from ``r`` mixes with ``r``'s weight
    (so the step keeps the mean); hypercube and dissemination never idle and use 1/2.
    """
    if schedule.size == 1:
        return []
    halves = schedule.topology is not Topology.BASE2
    problems = []
    for t, row in enumerate(schedule.table(steps)):
        dsts = [p.dst for p in row]
        if sorted(dsts) != list(range(schedule.size)):
            problems.append(f"step {t}: destinations are not a permutation: {dsts}")
        for r in range(schedule.size):
            problems += [f"step {t}: rank {r} {what}" for what in _peer_problems(row, r, halves)]
    return problems


def _peer_problems(row: list[Peers | None], r: int, halves: bool) -> list[str]:
    p = row[r]
    assert p is not None
    if not (0 <= p.dst < len(row) and 0 <= p.src < len(row)):
        return [f"has partners outside the ranks ({p})"]
    if p.idle or p.dst == r or p.src == r:
        if not (p.idle and p.dst == p.src == r):
            return [f"is paired with itself but not idle ({p})"]
        return [f"idles on {p.dst} (this topology never idles)"] if halves else []
    problems = []
    if row[p.dst].src != r:
        problems.append(f"sends to {p.dst}, which receives from {row[p.dst].src}")
    if not 0.0 <= p.weight <= 1.0:
        problems.append(f"has weight {p.weight}, outside [0, 1]")
    if row[p.dst].weight != p.weight:
        problems.append(
            f"has weight {p.weight} but {p.dst}, which mixes its value, {row[p.dst].weight}"
        )
    if halves and p.weight != 0.5:
        problems.append(f"has weight {p.weight} (this topology mixes with 1/2)")
    return problems

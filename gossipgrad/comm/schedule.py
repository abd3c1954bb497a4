"""Partner schedules: pure functions of (rank, step, size, seed). No transport, no torch.

A schedule is a registered topology (:data:`gossipgrad.registry.TOPOLOGIES`, built-ins in
:mod:`gossipgrad.comm.topologies`) read through the seeded rotation of each pass.

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

import numpy as np

from gossipgrad.comm.topologies import best_exact_topology, cycle_length, is_power_of_two
from gossipgrad.registry import TOPOLOGIES
from gossipgrad.specs import TopologySpec

__all__ = [
    "Peers",
    "Schedule",
    "best_exact_topology",
    "check_schedule",
    "cycle_length",
    "is_power_of_two",
    "resolve_topology",
]


@dataclass(frozen=True)
class Peers:
    """This step's partners: send to ``dst``, receive from ``src`` (equal on a hypercube and
    on base2), and mix ``x = (1 - weight) * x + weight * x_from_src``.

    ``dimension`` is the step within the topology's pass (the hypercube or dissemination
    dimension, base2's round). An idle rank is ``Peers(dst=rank, src=rank, weight=0.0)``:
    it sends and receives nothing this step.
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


def resolve_topology(topology: object, size: int) -> TopologySpec:
    """The registered topology ``topology`` names, resolved for ``size`` ranks (``auto``
    picks one), or ValueError: an unknown name lists the choices, a topology that cannot
    run at ``size`` says why.

        >>> resolve_topology("auto", 6).name
        'base2'
    """
    spec = TOPOLOGIES.get(topology).resolve(size)
    why = spec.refusal(size)
    if why is not None:
        raise ValueError(why)
    return spec


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

    def __init__(self, size: int, topology: object = "auto", seed: int = 0, rotate: bool = True):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.spec = resolve_topology(topology, size)
        self.topology = self.spec.name
        self.seed = seed
        self.rotate = rotate
        self.period = self.spec.period(size) if size > 1 else 0
        self.cycle_length = self.period
        self.exact_steps: int | None = self.period if self.spec.exact(size) else None

    def __repr__(self) -> str:
        return (
            f"Schedule(size={self.size}, topology={self.topology!r}, "
            f"seed={self.seed}, rotate={self.rotate})"
        )

    @property
    def active_share(self) -> float:
        """The share of rank-steps with a partner, over one pass (1.0 where the topology
        never idles; base2 idles 12-33 % of them at 3, 5, 6, 7, 12): what a rank sends per
        step on average, as a share of one exchange."""
        if self.size == 1 or self.spec.halves:
            return 1.0
        return _active_share(self.spec, self.size)

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
        t = step % self.period
        perm, position = _numbering(self.size, self.seed, step // self.period if self.rotate else 0)
        dst, src, weight = self.spec.pair(self.size, t, position[rank])
        return Peers(dst=perm[dst], src=perm[src], dimension=t, weight=weight)

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


@lru_cache(maxsize=64)
def _active_share(spec: TopologySpec, size: int) -> float:
    period = spec.period(size)
    idle = sum(spec.pair(size, t, v)[2] == 0.0 for t in range(period) for v in range(size))
    return 1.0 - idle / (size * period)


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
    (so the step keeps the mean); a topology that says it halves (hypercube,
    dissemination) never idles and uses 1/2.
    """
    if schedule.size == 1:
        return []
    halves = schedule.spec.halves
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

"""Partner schedules: pure functions of (rank, step, size, seed). No transport, no torch.

Example, 4 ranks on a hypercube without rotation: at step 0 rank 0 pairs with 1, at step 1
with 2, then the next cycle starts again at dimension 0::

    >>> s = Schedule(size=4, topology="hypercube", rotate=False)
    >>> [s.peers(0, t).dst for t in range(3)]
    [1, 2, 1]

Invariant: at every step the map rank -> dst is a permutation and dst(src(r)) == r, so every
send has exactly one matching receive. Within a cycle the rank numbering is permuted by a
seeded permutation that is identical on every rank (no broadcast needed).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gossipgrad.options import Topology, choice


@dataclass(frozen=True)
class Peers:
    """This step's partners: send to ``dst``, receive from ``src`` (equal on a hypercube).

    ``weight`` is the peer's share in this step's mix, ``x <- (1 - weight) x + weight
    x_src``; a rank with no partner this step has ``dst == src ==`` itself and weight 0
    (:attr:`idle`): it sends and receives nothing."""

    dst: int
    src: int
    dimension: int
    weight: float = 0.5

    @property
    def idle(self) -> bool:
        return self.dst == self.src and self.weight == 0.0


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def cycle_length(size: int) -> int:
    """Steps per cycle: ceil(log2 size); 0 for size 1 (no communication)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return (size - 1).bit_length()


def resolve_topology(topology: str | Topology, size: int) -> Topology:
    """Map ``auto`` to a concrete topology and reject impossible combinations."""
    topo = choice(Topology, topology, "--topology")
    if topo is Topology.AUTO:
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
        topology: ``auto``, ``hypercube`` or ``dissemination``.
        seed: shared seed for the per-cycle rotation.
        rotate: re-permute the rank numbering every cycle (cycle 0 is the identity).
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
        self.cycle_length = cycle_length(size)

    def __repr__(self) -> str:
        return (
            f"Schedule(size={self.size}, topology={self.topology.value!r}, "
            f"seed={self.seed}, rotate={self.rotate})"
        )

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
        return _peers(self.size, self.topology, self.seed, self.rotate, rank, step)

    def table(self, steps: int) -> list[list[Peers | None]]:
        """``table[step][rank]`` for the first ``steps`` steps."""
        return [[self.peers(r, t) for r in range(self.size)] for t in range(steps)]

    def fingerprint(self, steps: int | None = None) -> int:
        """A 63-bit hash of the first ``steps`` steps (default: two cycles), for start-up checks."""
        steps = steps if steps is not None else max(2 * self.cycle_length, 1)
        h = hashlib.sha256(repr(self).encode())
        for row in self.table(steps):
            h.update(bytes(str([(p.dst, p.src) if p else None for p in row]), "ascii"))
        return int.from_bytes(h.digest()[:8], "little") >> 1


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
    """Return the invariant violations in the first ``steps`` steps (empty when sound)."""
    problems = []
    for t, row in enumerate(schedule.table(steps)):
        if schedule.size == 1:
            continue
        dsts = [p.dst for p in row]
        if sorted(dsts) != list(range(schedule.size)):
            problems.append(f"step {t}: destinations are not a permutation: {dsts}")
        for r, p in enumerate(row):
            if p.dst == r:
                problems.append(f"step {t}: rank {r} sends to itself")
            if row[p.dst].src != r:
                problems.append(
                    f"step {t}: rank {r} sends to {p.dst}, which receives from {row[p.dst].src}"
                )
    return problems

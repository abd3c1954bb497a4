"""Shuffle plans: which slots of a rank's shard go to which rank in each round. Pure.

A function of ``(seed, round, rank, size, shard_len, samples)`` only (stdlib + numpy, no
transport), so it is tested exhaustively in one process. Example, 3 ranks with 4 samples
each, swapping 2 per round::

    >>> plan = ShufflePlan(size=3, shard_len=4, samples=2, seed=0, topology="dissemination")
    >>> r = plan.round(rank=0, index=0)
    >>> (r.dst, r.src, len(r.slots))
    (1, 2, 2)

In round ``index`` every rank sends the samples in ``slots`` (in that order) to ``dst`` and
receives exactly as many samples from ``src``, which it writes into the same ``slots`` (in the
order received). Partners follow :class:`gossipgrad.comm.schedule.Schedule` with the round as
the step (dissemination, hypercube or base2, re-permuted every cycle), so they rotate and
every rank's samples can reach every other rank within one cycle. A rank that the schedule
leaves idle in a round (base2) gets ``dst == src == rank`` and no slots: it swaps nothing.

Invariant (nothing lost, nothing duplicated): ``dst`` is a permutation of the ranks with
``plan.round(dst, index).src == rank``, every rank sends and receives the same number of
samples (none when idle), and ``slots`` are distinct, so shard lengths never change and the
multiset of samples over all ranks is the same after every round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gossipgrad.comm.schedule import Schedule, resolve_topology
from gossipgrad.options import Topology

__all__ = ["RoundPlan", "ShufflePlan", "plan_round"]

_SALT = 0x5348_5546  # "SHUF": keeps slot choices independent of other seeded streams


@dataclass(frozen=True)
class RoundPlan:
    """One rank's part of one round: send ``slots`` to ``dst``, refill them from ``src``."""

    index: int
    dst: int
    src: int
    slots: np.ndarray  # int64, distinct, read-only


class ShufflePlan:
    """The shuffle plan of one run; identical on every rank without communication.

    Args:
        size: number of ranks (>= 1).
        shard_len: samples held by every rank (equal on all ranks, >= 1).
        samples: samples each rank swaps per round, ``0 <= samples <= shard_len``
            (``--shuffle-samples``).
        seed: shared non-negative seed.
        topology: partner schedule, ``auto`` (hypercube for powers of two, else
            dissemination: :func:`shuffle_topology`), ``hypercube``, ``dissemination`` or
            ``base2``.
    """

    def __init__(
        self,
        size: int,
        shard_len: int,
        samples: int,
        seed: int = 0,
        topology: str | Topology = Topology.AUTO,
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if shard_len < 1:
            raise ValueError(f"shard_len must be >= 1 (every rank needs samples), got {shard_len}")
        if not 0 <= samples <= shard_len:
            raise ValueError(
                f"--shuffle-samples must be in [0, {shard_len}] (the shard length), got {samples}"
            )
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.size, self.shard_len, self.samples, self.seed = size, shard_len, samples, seed
        self.schedule = Schedule(size, shuffle_topology(topology, size), seed=seed)

    def __repr__(self) -> str:
        return (
            f"ShufflePlan(size={self.size}, shard_len={self.shard_len}, "
            f"samples={self.samples}, seed={self.seed}, "
            f"topology={self.schedule.topology!r})"
        )

    @property
    def active(self) -> bool:
        """False when rounds move nothing (one rank, or zero samples per round)."""
        return self.size > 1 and self.samples > 0

    def round(self, rank: int, index: int) -> RoundPlan | None:
        """``rank``'s part of round ``index`` (>= 0), or None when the plan is not active."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank must be in [0, {self.size}), got {rank}")
        if index < 0:
            raise ValueError(f"round index must be >= 0, got {index}")
        if not self.active:
            return None
        peers = self.schedule.peers(rank, index)
        assert peers is not None
        if peers.idle:
            slots = np.empty(0, dtype=np.int64)
        else:
            rng = np.random.default_rng((self.seed, _SALT, index, rank))
            slots = rng.choice(self.shard_len, size=self.samples, replace=False).astype(np.int64)
        slots.setflags(write=False)
        return RoundPlan(index=index, dst=peers.dst, src=peers.src, slots=slots)


def shuffle_topology(topology: str, size: int) -> str:
    """The schedule a shuffle follows: what ``topology`` resolves to, except that ``auto``
    never leaves a rank idle: where it would pick a topology that idles some ranks (base2,
    when ``size`` is not a power of two) the shuffle takes dissemination, where every rank
    has a partner every round (a shuffle needs no exact average, only swaps).

        >>> shuffle_topology("auto", 6), shuffle_topology("auto", 8)
        ('dissemination', 'hypercube')
    """
    spec = resolve_topology(topology, size)
    if str(topology) == Topology.AUTO and not spec.halves:
        return Topology.DISSEMINATION.value
    return spec.name


def plan_round(
    seed: int,
    round: int,
    rank: int,
    size: int,
    shard_len: int,
    samples_per_round: int,
    topology: str | Topology = Topology.AUTO,
) -> RoundPlan | None:
    """Functional form of :meth:`ShufflePlan.round` (builds the plan each call)."""
    return ShufflePlan(size, shard_len, samples_per_round, seed, topology).round(rank, round)

"""The simulated clock: when every rank finishes every step. PURE (numpy and the planner).

A rank's compute (forward, backward and optimizer) takes ``base x factor x noise`` seconds
a step: ``base`` from a planner profile (its ``local_step_s``) or given; ``factor`` a
straggler's slow-down (1 elsewhere); ``noise`` a lognormal draw of mean 1 whose coefficient
of variation is ``jitter``, independent for every rank and step. What the exchange adds
comes from the planner (:func:`gossipgrad.tools.plan.model.step_time` on its network
model): ``exposed`` = the predicted step less its compute, ``busy`` = the exchange's time
on the wire. With ``ready = end[t-1] + compute[t]`` the timings give:

- none (local): ``end = ready``;
- ring (allreduce), lockstep: every rank ends at ``max(ready over ranks) + exposed``;
- peer (gossip), lockstep: ``max(ready, ready of src, ready of dst) + exposed``, an idle
  rank (base2) at ``ready``;
- staleness 1: the exchange of step t completes at ``X[t] = max(the partners' ready,
  X[t-1]) + busy`` (one communication thread) and need only be in before step t+1's
  update: ``end[t+1] = max(ready[t+1], X[t])``;
- bounded lag: :mod:`.lagclock` (an event simulation: frames, waits, catch-up skips).

    >>> c = ClockOptions(compute_s=1.0)
    >>> draws = c.compute(steps=2, size=3)
    >>> draws.shape, float(draws.mean())
    ((2, 3), 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gossipgrad.tools.plan.formats import Bucket, NetworkFit, Profile
from gossipgrad.tools.plan.model import CommModel, rebucket, step_time


@dataclass(frozen=True)
class ClockOptions:
    """How long compute and the exchange take.

    Args:
        compute_s: one rank's compute per step, seconds (ignored with ``profile``).
        profile: a planner profile (``gossipgrad profile``): compute and bucket sizes.
        network: a netfit (``gossipgrad netfit``) or a :class:`CommModel`; None: links of
            ``link_gbit`` with ``latency_us`` one-way latency.
        jitter: coefficient of variation of each rank-step's compute (0: none).
        stragglers: ``(rank, factor)`` pairs: that rank computes ``factor`` times slower.
        overlap: the exchange overlaps backward (the runtime's default).
        seed: the noise's seed.
    """

    compute_s: float = 0.1
    profile: Profile | None = None
    network: NetworkFit | CommModel | None = None
    link_gbit: float = 10.0
    latency_us: float = 20.0
    jitter: float = 0.0
    stragglers: tuple[tuple[int, float], ...] = field(default_factory=tuple)
    overlap: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("compute_s", "link_gbit"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"clock {name} must be a finite number > 0, got {v!r}")
        for name in ("latency_us", "jitter"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"clock {name} must be a finite number >= 0, got {v!r}")
        for rank, factor in self.stragglers:
            if rank < 0 or not (math.isfinite(factor) and factor > 0):
                raise ValueError(
                    f"a straggler is (rank >= 0, factor > 0), got ({rank}, {factor}); "
                    "e.g. 3:2 makes rank 3 compute twice as slowly"
                )

    def comm_model(self) -> CommModel:
        if isinstance(self.network, CommModel):
            return self.network
        if isinstance(self.network, NetworkFit):
            return CommModel.from_network(self.network)
        return CommModel(self.latency_us * 1e-6, 8.0 / (self.link_gbit * 1e9))

    def base_s(self) -> float:
        return self.profile.local_step_s if self.profile is not None else self.compute_s

    def compute(self, steps: int, size: int) -> np.ndarray:
        """``[steps, size]`` seconds of compute (drawn once from ``seed``)."""
        factor = np.ones(size)
        for rank, f in self.stragglers:
            if rank >= size:
                raise ValueError(f"straggler rank {rank} is not among the {size} ranks")
            factor[rank] = f
        draws = np.ones((steps, size))
        if self.jitter > 0:
            sigma2 = math.log1p(self.jitter**2)
            rng = np.random.default_rng([self.seed, 0x434C4B])  # "CLK"
            draws = rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), (steps, size))
        return self.base_s() * factor * draws


def profile_of(compute_s: float, bucket_bytes: list[int]) -> Profile:
    """A planner profile from a step's compute and the buckets' bytes (in backward order):
    a third forward, two thirds backward, buckets ready evenly through backward."""
    f, b = compute_s / 3, 2 * compute_s / 3
    n = len(bucket_bytes)
    buckets = tuple(Bucket(i, nb, b * (i + 1) / n) for i, nb in enumerate(bucket_bytes))
    return Profile("simulated", 1, "cpu", f, b, 0.0, sum(bucket_bytes), buckets)


@dataclass(frozen=True)
class Costs:
    """What the exchange adds to a step: ``exposed`` (lockstep), ``busy`` (the exchange on
    the wire: what staleness 1 hides) and ``frame`` (one lagged step's frames)."""

    exposed: float
    busy: float
    frame: float


def costs(
    clock: ClockOptions,
    strategy: str,
    size: int,
    bucket_bytes: list[int],
    staleness: int,
    mix: str,
    cap_bytes: int | None = None,
) -> Costs:
    """The planner's prices of one step's exchange at ``size`` ranks (a profile's buckets
    merged up to ``cap_bytes`` as the engine merges them)."""
    profile = clock.profile or profile_of(clock.compute_s, bucket_bytes)
    if clock.profile is not None and cap_bytes is not None:
        merged = rebucket(profile.buckets, cap_bytes, registration=profile.per_parameter)
        profile = profile.with_buckets(merged)
    model = clock.comm_model()
    st = step_time(
        profile, model, strategy, size, staleness=staleness, overlap=clock.overlap, mix=mix
    )
    frame = sum(model.bucket_costs("gossip", [b.bytes for b in profile.buckets], size))
    exposed = max(0.0, st.step_s - profile.compute_s - profile.optimizer_s)
    return Costs(exposed, st.comm_s, frame)


@dataclass
class Timeline:
    """A run's clock: ``end[t, r]`` when rank r finished step t (seconds from the start);
    under bounded lag also ``delay[t, r]``, the steps after t at which rank r's frame of
    step t is mixed by its peer (``steps - t`` or more: at the final drain), and
    ``skipped[t, r]``, the steps a rank skipped to catch up."""

    end: np.ndarray
    delay: np.ndarray | None = None
    skipped: np.ndarray | None = None

    def wall(self, step: int) -> float:
        """When the slowest rank finished ``step``."""
        return float(self.end[step].max())

    def mean_step_s(self) -> float:
        return float(self.end[-1].max() / len(self.end)) if len(self.end) else 0.0


def lockstep(
    compute: np.ndarray,
    pattern: Any,
    peers: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    price: Costs,
    staleness: int,
) -> Timeline:
    """The clock of a lockstep or staleness-1 run (see the module): ``compute[t, r]``,
    ``peers[t] = (src, dst, weight)`` arrays of the schedule (unused unless one peer a
    step); ``pattern``: the exchange shape (an allreduce when it ``sums``, nothing when it
    does not ``move``)."""
    steps, size = compute.shape
    end = np.zeros((steps, size))
    prev = np.zeros(size)
    done = np.zeros(size)  # staleness 1: when the previous step's exchange completes
    for t in range(steps):
        ready = prev + compute[t]
        if not pattern.moves or size == 1:
            now = ready
        elif pattern.sums:
            joint = np.full(size, ready.max())
            now = _finish(ready, joint, price, staleness, done, np.ones(size, bool))
        else:
            src, dst, weight = peers[t]
            joint = np.maximum(ready, np.maximum(ready[src], ready[dst]))
            now = _finish(ready, joint, price, staleness, done, weight > 0)
        end[t] = now
        prev = now
    return Timeline(end)


def _finish(
    ready: np.ndarray,
    joint: np.ndarray,
    price: Costs,
    staleness: int,
    done: np.ndarray,
    active: np.ndarray,
) -> np.ndarray:
    """Step ends of ranks ``ready`` whose exchange starts at ``joint`` (``active``: the
    ranks with a partner); staleness 1 updates ``done``, when this step's exchange ends."""
    if staleness == 0:
        return np.where(active, joint + price.exposed, ready)
    now = np.maximum(ready, done)
    # one communication thread: this exchange starts once the previous one is done
    done[:] = np.where(active, np.maximum(joint, done) + price.busy, done)
    return now

"""Bounded lag's clock and delay patterns. PURE (numpy and the runtime's lag constants).

Under ``--max-lag S`` what a run computes depends on when frames arrive, so the clock
decides the numbers too: it says, for every frame, at which step its peer mixes it
(``delay[t, r]``: rank r's frame of step t is mixed at step t + delay), and which steps a
rank skipped to catch up. Both engines then follow that pattern. A fixed pattern
(:func:`fixed_delays`) gives a run that is the same on real ranks and in the simulator.

The event simulation follows :class:`gossipgrad.engine.bucket.timing.lagged.Lagged`: rank r
at step t starts at ``s``; it skips its compute when the frames of step ``t + k`` from its
partner of that step have arrived by ``s`` for some ``k >= ceil(S / 2)`` and its compute
pace (a moving average) is above ``PACE_MARGIN`` times its peers' (or either is unknown);
it posts its frame when its compute is done (``ready``), which arrives ``frame`` seconds
after its link has sent the frames before it (one link a rank: a link slower than the
compute sets the pace, lag or not; at once on an idle step of base2: a frame to itself);
it then waits for the frame
of step ``t - S`` and mixes every frame of a step ``<= t - staleness`` that has arrived by
then (``end``). Frames still in flight at the last step are mixed by the final drain.

    >>> d = fixed_delays("cycle:1,2", steps=3, size=2, staleness=1, max_lag=2)
    >>> d.tolist()
    [[1, 2], [2, 1], [1, 2]]
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from gossipgrad.tools.simulate.clock import Timeline
from gossipgrad.tools.simulate.runtime import PACE_MARGIN, PACE_SMOOTHING, skip_threshold

POST, TAKE, START = 0, 1, 2  # event kinds, in the order they run at one instant


def fixed_delays(spec: str, steps: int, size: int, staleness: int, max_lag: int) -> np.ndarray:
    """``[steps, size]`` delays from ``spec``: ``const:K`` (every frame K steps late),
    ``cycle:K1,K2,...`` (rank r's frame of step t is ``K[(t + r) % n]`` steps late) or
    ``random:SEED`` (uniform in ``[staleness, max_lag]``). Each must lie in
    ``[staleness, max_lag]``: a frame is never mixed before ``staleness`` steps, and the
    lag bound waits for it at ``max_lag``."""
    kind, _, arg = spec.partition(":")
    try:
        if kind == "const":
            out = np.full((steps, size), int(arg))
        elif kind == "cycle":
            ks = np.array([int(k) for k in arg.split(",")])
            out = ks[(np.arange(steps)[:, None] + np.arange(size)[None, :]) % len(ks)]
        elif kind == "random":
            rng = np.random.default_rng([int(arg), 0x4C4147])  # "LAG"
            out = rng.integers(staleness, max_lag + 1, (steps, size))
        else:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"delay pattern {spec!r} is not known; use const:K, cycle:K1,K2,... or random:SEED"
        ) from None
    if out.size and (out.min() < staleness or out.max() > max_lag):
        raise ValueError(
            f"delay pattern {spec!r} has delays outside [{staleness}, {max_lag}] "
            "(the staleness and --max-lag): a frame is mixed no sooner and no later"
        )
    return out


class _Rank:
    def __init__(self) -> None:
        self.step = 0
        self.ready = 0.0
        self.pace = math.nan
        self.peer_pace = math.nan
        self.low = 0  # every frame of a step below this is mixed
        self.mixed: set[int] = set()


def lagged(
    compute: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    frame_s: float,
    max_lag: int,
    staleness: int,
) -> Timeline:
    """The clock of a bounded-lag run: ``compute[t, r]`` seconds, ``src[t, r]`` and
    ``dst[t, r]`` the schedule's partners, ``frame_s`` one step's frames on the link."""
    return _LagEvents(compute, src, dst, frame_s, max_lag, staleness).run()


class _LagEvents:
    """The event simulation of :func:`lagged`: every rank's steps as START (skip or
    compute), POST (its frame leaves, then it waits for the bound's) and TAKE (mix what
    has arrived, end the step) events, run in time order."""

    def __init__(self, *clock: Any) -> None:  # lagged()'s arguments, in its order
        self.compute, self.src, self.dst, self.frame_s, self.max_lag, self.staleness = clock
        compute, max_lag = self.compute, self.max_lag
        self.steps, self.size = compute.shape
        self.end = np.zeros(compute.shape)
        self.delay = np.full(compute.shape, -1, dtype=np.int64)
        self.skipped = np.zeros(compute.shape, dtype=bool)
        self.posted: dict[tuple[int, int], tuple[float, float]] = {}  # -> (arrival, pace)
        self.link_free = np.zeros(self.size)  # when each rank's link has sent its frames
        self.waiting: dict[tuple[int, int], int] = {}  # (step, sender) -> the rank waiting
        self.ranks = [_Rank() for _ in range(self.size)]
        self.least = skip_threshold(max_lag)
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0

    def push(self, time: float, kind: int, r: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, kind, self.seq, r))

    def arrival(self, s: int, sender: int) -> float | None:
        hit = self.posted.get((s, sender))
        return None if hit is None else hit[0]

    def run(self) -> Timeline:
        for r in range(self.size):
            self.push(0.0, START, r)
        while self.events:
            now, kind, _, r = heapq.heappop(self.events)
            (self.start, self.post, self.take)[(START, POST, TAKE).index(kind)](now, r)
        for s in range(self.steps):  # frames still in flight: the final drain mixes them
            late = self.delay[s] < 0
            self.delay[s, late] = self.steps - s
        return Timeline(self.end, self.delay, self.skipped)

    def start(self, now: float, r: int) -> None:
        """Skip when a peer is far enough ahead and this rank is the slower, else compute."""
        rank, t = self.ranks[r], self.ranks[r].step
        ahead = 0
        for k in range(self.least, self.max_lag + 1):
            if t + k < self.steps:
                at = self.arrival(t + k, self.src[t + k, r])
                if at is not None and at <= now:
                    ahead = k
        slower = (
            math.isnan(rank.pace)
            or math.isnan(rank.peer_pace)
            or rank.pace > PACE_MARGIN * rank.peer_pace
        )
        skip = ahead >= self.least and slower
        self.skipped[t, r] = skip
        if not skip:
            rank.pace = _smooth(rank.pace, self.compute[t, r])
        rank.ready = now + (0.0 if skip else self.compute[t, r])
        self.push(rank.ready, POST, r)

    def post(self, now: float, r: int) -> None:
        """The frame leaves; wake the peer waiting for it; wait for step ``t - S``'s."""
        rank, t = self.ranks[r], self.ranks[r].step
        arrive = now
        if self.dst[t, r] != r:  # one link a rank: a frame leaves when the one before has
            arrive = max(now, self.link_free[r]) + self.frame_s
            self.link_free[r] = arrive
        self.posted[(t, r)] = (arrive, 0.0 if math.isnan(rank.pace) else rank.pace)
        peer = self.dst[t, r]
        if self.waiting.get((t, r)) == peer:
            self.push(max(self.ranks[peer].ready, self.arrival(t, r)), TAKE, peer)
        bound = t - self.max_lag
        if bound < 0:
            self.push(now, TAKE, r)
            return
        at = self.arrival(bound, self.src[bound, r])
        if at is None:
            self.waiting[(bound, self.src[bound, r])] = r
        else:
            self.push(max(now, at), TAKE, r)

    def take(self, now: float, r: int) -> None:
        """Mix every frame of a step ``<= t - staleness`` that has arrived; end the step."""
        rank, t = self.ranks[r], self.ranks[r].step
        for s in range(rank.low, t - self.staleness + 1):
            if s in rank.mixed:
                continue
            sender = self.src[s, r]
            at = self.arrival(s, sender)
            if at is None or at > now:
                continue
            rank.mixed.add(s)
            self.delay[s, sender] = t - s
            pace = self.posted[(s, sender)][1]
            if pace > 0:
                rank.peer_pace = _smooth(rank.peer_pace, pace)
        while rank.low in rank.mixed:
            rank.mixed.discard(rank.low)
            rank.low += 1
        self.end[t, r] = now
        rank.step += 1
        if rank.step < self.steps:
            self.push(now, START, r)


def _smooth(average: float, sample: float) -> float:
    if math.isnan(average):
        return sample
    return (1 - PACE_SMOOTHING) * average + PACE_SMOOTHING * sample

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
later (at once on an idle step of base2: a frame to itself); it then waits for the frame
of step ``t - S`` and mixes every frame of a step ``<= t - staleness`` that has arrived by
then (``end``). Frames still in flight at the last step are mixed by the final drain.

    >>> d = fixed_delays("cycle:1,2", steps=3, size=2, staleness=1, max_lag=2)
    >>> d.tolist()
    [[1, 2], [2, 1], [1, 2]]
"""

from __future__ import annotations

import heapq
import math

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
    steps, size = compute.shape
    end = np.zeros((steps, size))
    delay = np.full((steps, size), -1, dtype=np.int64)
    skipped = np.zeros((steps, size), dtype=bool)
    posted: dict[tuple[int, int], tuple[float, float]] = {}  # (step, sender) -> (time, pace)
    waiting: dict[tuple[int, int], int] = {}  # (step, sender) -> the rank waiting for it
    ranks = [_Rank() for _ in range(size)]
    least = skip_threshold(max_lag)
    events: list[tuple[float, int, int, int]] = [(0.0, START, r, r) for r in range(size)]
    heapq.heapify(events)
    seq = size

    def push(time: float, kind: int, r: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (time, kind, seq, r))

    def arrival(s: int, sender: int) -> float | None:
        hit = posted.get((s, sender))
        if hit is None:
            return None
        return hit[0] + (0.0 if dst[s, sender] == sender else frame_s)

    while events:
        now, kind, _, r = heapq.heappop(events)
        rank = ranks[r]
        t = rank.step
        if kind == START:
            ahead = 0
            for k in range(least, max_lag + 1):
                if t + k < steps:
                    at = arrival(t + k, src[t + k, r])
                    if at is not None and at <= now:
                        ahead = k
            slower = (
                math.isnan(rank.pace)
                or math.isnan(rank.peer_pace)
                or rank.pace > PACE_MARGIN * rank.peer_pace
            )
            skip = ahead >= least and slower
            skipped[t, r] = skip
            if not skip:
                rank.pace = _smooth(rank.pace, compute[t, r])
            rank.ready = now + (0.0 if skip else compute[t, r])
            push(rank.ready, POST, r)
        elif kind == POST:
            posted[(t, r)] = (now, 0.0 if math.isnan(rank.pace) else rank.pace)
            peer = dst[t, r]
            if waiting.get((t, r)) == peer:
                push(max(ranks[peer].ready, arrival(t, r)), TAKE, peer)
            bound = t - max_lag
            if bound < 0:
                push(now, TAKE, r)
            else:
                at = arrival(bound, src[bound, r])
                if at is None:
                    waiting[(bound, src[bound, r])] = r
                else:
                    push(max(now, at), TAKE, r)
        else:  # TAKE: mix what has arrived, end the step
            for s in range(rank.low, t - staleness + 1):
                if s in rank.mixed:
                    continue
                sender = src[s, r]
                at = arrival(s, sender)
                if at is None or at > now:
                    continue
                rank.mixed.add(s)
                delay[s, sender] = t - s
                pace = posted[(s, sender)][1]
                if pace > 0:
                    rank.peer_pace = _smooth(rank.peer_pace, pace)
            while rank.low in rank.mixed:
                rank.mixed.discard(rank.low)
                rank.low += 1
            end[t, r] = now
            rank.step += 1
            if rank.step < steps:
                push(now, START, r)
    for s in range(steps):  # frames still in flight: the final drain mixes them
        for sender in range(size):
            if delay[s, sender] < 0:
                delay[s, sender] = steps - s
    return Timeline(end, delay, skipped)


def _smooth(average: float, sample: float) -> float:
    if math.isnan(average):
        return sample
    return (1 - PACE_SMOOTHING) * average + PACE_SMOOTHING * sample

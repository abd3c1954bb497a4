"""The simulator's clock, pure: compute draws, the lockstep timings, bounded lag's event
simulation and fixed delay patterns (gossipgrad/tools/simulate/clock.py, lagclock.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gossipgrad.comm.schedule import Schedule
from gossipgrad.registry import SHAPES
from gossipgrad.tools.simulate.clock import ClockOptions, Costs, costs, lockstep
from gossipgrad.tools.simulate.lagclock import fixed_delays, lagged
from gossipgrad.tools.simulate.runtime import peer_table


def peers(size: int, steps: int, topology: str = "auto"):
    s = Schedule(size, topology, seed=0)
    return [peer_table(s, t) for t in range(steps)]


def test_compute_draws_have_mean_one_and_the_asked_spread():
    draws = ClockOptions(compute_s=2.0, jitter=0.05, seed=1).compute(4000, 64) / 2.0
    assert abs(draws.mean() - 1.0) < 2e-3
    assert abs(draws.std() / draws.mean() - 0.05) < 2e-3
    assert (draws > 0).all()


def test_a_straggler_computes_its_factor_slower_and_bad_ones_are_refused():
    draws = ClockOptions(compute_s=1.0, stragglers=((2, 3.0),)).compute(3, 4)
    assert draws[:, 2].tolist() == [3.0] * 3 and draws[:, 0].tolist() == [1.0] * 3
    with pytest.raises(ValueError, match="RANK|rank"):
        ClockOptions(stragglers=((1, -2.0),))
    with pytest.raises(ValueError, match="not among"):
        ClockOptions(stragglers=((9, 2.0),)).compute(1, 4)
    with pytest.raises(ValueError, match="jitter"):
        ClockOptions(jitter=float("nan"))


def test_allreduce_waits_for_the_slowest_rank_every_step():
    compute = np.array([[1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 3.0, 1.0]])
    line = lockstep(compute, SHAPES.get("ring"), peers(4, 2), Costs(0.5, 0.5, 0.0), staleness=0)
    assert line.end.tolist() == [[2.5] * 4, [6.0] * 4]


def test_gossip_waits_only_for_its_partners():
    compute = np.ones((2, 4))
    compute[0, 3] = 5.0  # rank 3 slow at step 0; hypercube pairs 0-1, 2-3 then 0-2, 1-3
    line = lockstep(compute, SHAPES.get("peer"), peers(4, 2, "hypercube"), Costs(0.5, 0.5, 0.0), 0)
    assert line.end[0].tolist() == [1.5, 1.5, 5.5, 5.5]
    assert line.end[1].tolist() == [7.0, 7.0, 7.0, 7.0]  # 0 with 2 (5.5+1), 1 with 3


def test_local_never_waits_and_staleness_one_hides_the_exchange():
    compute = np.ones((3, 2))
    assert lockstep(compute, SHAPES.get("none"), peers(2, 3), Costs(9, 9, 0), 0).end[
        :, 0
    ].tolist() == [
        1.0,
        2.0,
        3.0,
    ]
    stale = lockstep(compute, SHAPES.get("peer"), peers(2, 3), Costs(0.5, 0.5, 0), staleness=1)
    assert stale.end[:, 0].tolist() == [1.0, 2.0, 3.0]  # 0.5 s of wire behind 1 s compute
    slow = lockstep(compute, SHAPES.get("peer"), peers(2, 3), Costs(3.0, 3.0, 0), staleness=1)
    assert slow.end[:, 0].tolist() == [1.0, 4.0, 7.0]  # the wire sets the pace


def test_the_planner_prices_a_ring_above_one_peer_at_many_ranks():
    clock = ClockOptions(compute_s=0.1, link_gbit=1.0)
    ring = costs(clock, "allreduce", 256, [4 << 20], 0, "grad")
    peer = costs(clock, "gossip", 256, [4 << 20], 0, "grad")
    assert ring.exposed > 1.5 * peer.exposed > 0
    assert peer.frame == pytest.approx(20e-6 + 8 * (4 << 20) / 1e9)


def test_fixed_delays_follow_their_pattern_and_stay_within_the_bound():
    assert fixed_delays("const:2", 2, 3, 0, 2).tolist() == [[2, 2, 2], [2, 2, 2]]
    d = fixed_delays("random:5", 50, 8, 1, 3)
    assert d.min() == 1 and d.max() == 3
    with pytest.raises(ValueError, match=r"outside \[1, 2\]"):
        fixed_delays("const:0", 2, 2, 1, 2)
    with pytest.raises(ValueError, match="const:K"):
        fixed_delays("every:2", 2, 2, 0, 2)


def lag_tables(size: int, steps: int):
    table = peers(size, steps)
    return np.stack([s for s, _, _ in table]), np.stack([d for _, d, _ in table])


@pytest.mark.parametrize("staleness", [0, 1])
def test_lagged_frames_are_mixed_within_the_bound_and_never_too_early(staleness):
    compute = ClockOptions(compute_s=1.0, jitter=0.3, seed=2).compute(40, 6)
    src, dst = lag_tables(6, 40)
    line = lagged(compute, src, dst, frame_s=0.4, max_lag=3, staleness=staleness)
    inside = line.delay[:-3]  # frames in flight at the end are drained
    assert inside.min() >= staleness and inside.max() <= 3
    assert (np.diff(line.end, axis=0) >= 0).all()
    assert line.skipped is not None


def test_a_lagged_straggler_skips_and_the_others_keep_their_pace():
    compute = ClockOptions(compute_s=1.0, stragglers=((1, 2.0),)).compute(60, 4)
    src, dst = lag_tables(4, 60)
    line = lagged(compute, src, dst, frame_s=0.01, max_lag=2, staleness=0)
    assert line.skipped[:, 1].sum() > 10 and line.skipped[:, 0].sum() == 0
    assert line.mean_step_s() < 1.3  # lockstep would run at the straggler's 2 s
    strict = lockstep(compute, SHAPES.get("peer"), peers(4, 60), Costs(0.01, 0.01, 0.01), 0)
    assert strict.mean_step_s() > 1.9

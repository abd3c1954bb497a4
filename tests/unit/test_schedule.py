"""Tier 1: partner schedules, exhaustively over sizes 1..17 (base2: 1..64), in one process."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from gossipgrad.comm import base2, schedule, schedule_mixing
from gossipgrad.comm.base2 import base2_partners, base2_rounds
from gossipgrad.comm.schedule import (
    Peers,
    Schedule,
    best_exact_topology,
    check_schedule,
    cycle_length,
    is_power_of_two,
    resolve_topology,
)
from gossipgrad.comm.schedule_mixing import exactness_problems, mix_error, steps_to

SIZES = range(1, 18)
BASE2_SIZES = range(1, 65)
SEEDS = (0, 1, 99)


def _topologies(size):
    return ["dissemination", "auto"] + (["hypercube"] if is_power_of_two(size) else [])


@pytest.mark.parametrize("size", SIZES)
def test_every_send_has_its_receive(size):
    for topo in _topologies(size):
        for seed in (0, 1, 99):
            s = Schedule(size, topo, seed)
            assert check_schedule(s, 4 * max(1, s.cycle_length) + 1) == []


@pytest.mark.parametrize("size", [s for s in SIZES if is_power_of_two(s) and s > 1])
def test_hypercube_pairs_are_involutions(size):
    s = Schedule(size, "hypercube", seed=5)
    for t in range(3 * s.cycle_length):
        for r in range(size):
            p = s.peers(r, t)
            assert p.src == p.dst != r
            assert s.peers(p.dst, t).dst == r


@pytest.mark.parametrize("size", SIZES)
def test_information_reaches_everyone_within_a_cycle(size):
    """Dissemination: after ceil(log2 size) steps every rank has heard from every rank."""
    for topo in _topologies(size):
        s = Schedule(size, topo, seed=3)
        for first in (0, s.cycle_length):  # cycle 0 and a rotated cycle
            heard = [{r} for r in range(size)]
            for t in range(first, first + s.cycle_length):
                new = [set(h) for h in heard]
                for r in range(size):
                    new[r] |= heard[s.peers(r, t).src]
                heard = new
            assert all(h == set(range(size)) for h in heard), (topo, size)


@pytest.mark.parametrize("size", [s for s in SIZES if is_power_of_two(s) and s > 1])
def test_one_hypercube_cycle_of_mixing_gives_the_exact_mean(size):
    s = Schedule(size, "hypercube", seed=11)
    rng = np.random.default_rng(size)
    for cycle in range(3):
        x = rng.normal(size=size)
        mean = x.mean()
        for t in range(cycle * s.cycle_length, (cycle + 1) * s.cycle_length):
            x = np.array([(x[r] + x[s.peers(r, t).src]) / 2 for r in range(size)])
        np.testing.assert_allclose(x, mean, rtol=0, atol=1e-12)


def test_rotation_changes_pairs_between_cycles_but_not_within():
    s = Schedule(8, "hypercube", seed=1)
    assert np.array_equal(s.permutation(0), np.arange(8))
    perms = {tuple(s.permutation(c)) for c in range(6)}
    assert len(perms) > 1
    assert s.table(3) != s.table(6)[3:6]
    same = Schedule(8, "hypercube", seed=1)
    assert same.table(12) == s.table(12)
    assert Schedule(8, "hypercube", seed=2).table(12) != s.table(12)


def test_no_rotation_repeats_each_cycle():
    s = Schedule(8, "hypercube", rotate=False)
    assert s.table(3) == s.table(6)[3:6]


def test_size_one_has_no_peer():
    s = Schedule(1)
    assert s.cycle_length == 0 and s.peers(0, 5) is None


def test_cycle_length():
    assert [cycle_length(n) for n in (1, 2, 3, 4, 5, 8, 9, 17)] == [0, 1, 2, 2, 3, 3, 4, 5]


def test_hypercube_on_six_ranks_names_the_alternative():
    with pytest.raises(ValueError, match="power-of-two.*dissemination"):
        Schedule(6, "hypercube")


def test_auto_topology():
    assert resolve_topology("auto", 8).name == "hypercube"
    assert resolve_topology("auto", 6).name == "base2"
    with pytest.raises(ValueError, match="unknown topology 'ring'"):
        resolve_topology("ring", 4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="size must be >= 1"):
        Schedule(0)
    with pytest.raises(ValueError, match="rank must be in"):
        Schedule(4).peers(4, 0)


def test_fingerprint_differs_with_seed():
    assert Schedule(8, seed=1).fingerprint() != Schedule(8, seed=2).fingerprint()
    assert Schedule(8, seed=1).fingerprint() == Schedule(8, seed=1).fingerprint()


# -- hypercube and dissemination stay what they were --------------------------------------


@pytest.mark.parametrize(
    "size,topology,seed,fingerprint",
    [  # computed by the schedule module before base2 existed, over 20 steps
        (6, "dissemination", 3, 8745441038543655989),
        (8, "hypercube", 3, 1233690385149672770),
        (12, "dissemination", 0, 3206182102242867422),
        (16, "hypercube", 1, 5204853480594139455),
        (5, "dissemination", 2, 7857130454469275134),  # what auto was at 5
        (7, "dissemination", 0, 8461288096392655233),
    ],
)
def test_hypercube_and_dissemination_peers_are_unchanged(size, topology, seed, fingerprint):
    assert Schedule(size, topology, seed).fingerprint(20) == fingerprint


@pytest.mark.parametrize("size", range(2, 18))
def test_hypercube_and_dissemination_never_idle_and_mix_by_halves(size):
    for topo in ["dissemination"] + (["hypercube"] if is_power_of_two(size) else []):
        s = Schedule(size, topo, seed=4)
        assert s.period == s.cycle_length == cycle_length(size)
        for row in s.table(3 * s.period):
            assert all(p.weight == 0.5 and not p.idle for p in row)


# -- base2: any size, the exact mean after one pass ---------------------------------------


def _period(size: int) -> int:
    """2**a * m with m odd: log2 of the power of two, plus 2 floor(log2 m) + 1 for m > 1."""
    twos = (size & -size).bit_length() - 1
    odd = size >> twos
    return twos + (2 * (odd.bit_length() - 1) + 1 if odd > 1 else 0)


def _mix(s: Schedule, x: np.ndarray, steps: range) -> np.ndarray:
    """What every rank does with its own peers: x = (1 - w) x + w x[src], rank by rank."""
    for t in steps:
        new = x.copy()
        for r in range(s.size):
            p = s.peers(r, t)
            new[r] = (1 - p.weight) * x[r] + p.weight * x[p.src]
        x = new
    return x


@pytest.mark.parametrize("size", BASE2_SIZES)
def test_base2_every_send_has_its_receive_and_weights_are_symmetric(size):
    for seed in SEEDS:
        s = Schedule(size, "base2", seed)
        assert s.period == s.cycle_length == s.exact_steps == _period(size)
        assert check_schedule(s, 3 * max(1, s.period) + 1) == []


@pytest.mark.parametrize("size", BASE2_SIZES)
def test_base2_one_pass_of_mixing_gives_the_exact_mean(size):
    for seed in SEEDS:
        s = Schedule(size, "base2", seed)
        rng = np.random.default_rng((size, seed))
        for cycle in range(3):  # the identity numbering, then rotated ones
            x = rng.normal(size=(size, 3))
            mean = x.mean(axis=0)
            x = _mix(s, x, range(cycle * s.period, (cycle + 1) * s.period))
            np.testing.assert_allclose(x, np.broadcast_to(mean, x.shape), rtol=0, atol=1e-12)


@pytest.mark.parametrize("size", [3, 5, 6, 7, 12, 24, 96])
def test_base2_is_not_exact_one_step_early(size):
    """The period is not padded: one step before its end the mean is not there yet."""
    s = Schedule(size, "base2", seed=2)
    assert mix_error(s, s.period - 1)[-1] > 1e-3


@pytest.mark.parametrize("size", [s for s in range(2, 65) if is_power_of_two(s)])
def test_base2_is_the_hypercube_on_powers_of_two(size):
    a, b = Schedule(size, "base2", seed=3), Schedule(size, "hypercube", seed=3)
    assert a.period == b.period and a.table(3 * a.period) == b.table(3 * a.period)


def test_base2_weights_are_not_all_halves_and_some_ranks_idle():
    rows = Schedule(6, "base2", rotate=False).table(4)
    assert [p.weight for p in rows[1]] == [2 / 3, 0.0, 2 / 3, 2 / 3, 0.0, 2 / 3]
    assert [r for r, p in enumerate(rows[1]) if p.idle] == [1, 4]
    assert rows[1][1] == Peers(dst=1, src=1, dimension=1, weight=0.0)
    assert all(not p.idle for p in rows[3])  # the cross-block round pairs everyone
    assert Schedule(5, "base2", rotate=False).peers(4, 2).weight == 4 / 5


@pytest.mark.parametrize("size", [5, 6, 7, 12, 17, 63])
def test_base2_rotation_is_per_period_and_identical_on_every_rank(size):
    s = Schedule(size, "base2", seed=8)
    for cycle in range(4):
        perm = s.permutation(cycle)
        for t, row in enumerate(base2_partners(size)):
            for v, (partner, weight) in enumerate(row):
                p = s.peers(int(perm[v]), cycle * s.period + t)
                assert (p.dst, p.src, p.weight) == (perm[partner], perm[partner], weight)
    assert len({tuple(s.permutation(c)) for c in range(6)}) > 1
    # each rank builds its own schedule, with nothing cached: the same pairs everywhere
    table = s.table(4 * s.period)
    for r in range(size):
        schedule._numbering.cache_clear()
        mine = Schedule(size, "base2", seed=8)
        assert [mine.peers(r, t) for t in range(4 * s.period)] == [row[r] for row in table]
    assert Schedule(size, "base2", seed=9).table(4 * s.period) != table


def test_base2_without_rotation_repeats_each_period():
    s = Schedule(7, "base2", rotate=False)
    assert s.table(s.period) == s.table(2 * s.period)[s.period :]


def test_base2_rounds_are_matchings_over_the_positions():
    for size in range(1, 65):
        for rnd in base2_rounds(size):
            seen = [v for a, b, _ in rnd for v in (a, b)]
            assert len(seen) == len(set(seen)) and all(0 <= v < size for v in seen)
            assert all(0.5 <= w < 1 for _, _, w in rnd)


def test_size_one_base2_has_no_peer():
    s = Schedule(1, "base2")
    assert s.period == 0 and s.exact_steps == 0 and s.peers(0, 3) is None


# -- the checks catch what they claim to --------------------------------------------------


class _Tampered(Schedule):
    """A base2 schedule with one rank's peer replaced at step 1."""

    def __init__(self, size: int, rank: int, peer: Peers) -> None:
        super().__init__(size, "base2", rotate=False)
        self._rank, self._peer = rank, peer

    def peers(self, rank: int, step: int) -> Peers | None:
        if (rank, step) == (self._rank, 1):
            return self._peer
        return super().peers(rank, step)


@pytest.mark.parametrize(
    "rank,peer,complaint",
    [
        (0, Peers(dst=2, src=2, dimension=1, weight=0.5), "but 2, which mixes its value"),
        (0, Peers(dst=2, src=2, dimension=1, weight=1.5), "outside"),
        (1, Peers(dst=1, src=1, dimension=1, weight=0.5), "paired with itself but not idle"),
        (0, Peers(dst=0, src=0, dimension=1, weight=0.0), "not a permutation"),
    ],
)
def test_check_schedule_catches_broken_base2_steps(rank, peer, complaint):
    problems = check_schedule(_Tampered(6, rank, peer), 4)
    assert any(complaint in p for p in problems), problems


def test_exactness_is_checked_not_assumed():
    assert exactness_problems(Schedule(6, "base2"), 12) == []
    s = Schedule(6, "dissemination")
    s.exact_steps = 3  # a false claim
    assert "not exact" in exactness_problems(s, 6)[0]
    for size in (2, 4, 8, 16):  # dissemination does average exactly on powers of two
        assert exactness_problems(Schedule(size, "dissemination", seed=1), 40) == []


# -- auto and the best exact schedule -----------------------------------------------------


def test_best_exact_topology_is_what_auto_picks():
    """auto is the best exact schedule for the size (the engine mixes with base2's weights
    and skips idle ranks)."""
    assert [best_exact_topology(n) for n in (1, 2, 6, 8, 12)] == [
        "hypercube",
        "hypercube",
        "base2",
        "hypercube",
        "base2",
    ]
    assert [resolve_topology("auto", n).name for n in (6, 7, 8, 12)] == [
        "base2",
        "base2",
        "hypercube",
        "base2",
    ]


def test_exact_steps_per_topology():
    assert Schedule(8, "hypercube").exact_steps == 3
    assert Schedule(8, "dissemination").exact_steps == 3
    assert Schedule(6, "dissemination").exact_steps is None
    assert Schedule(12, "base2").exact_steps == 5


# -- the mixing simulation ----------------------------------------------------------------


@pytest.mark.parametrize("size", [5, 6, 7, 12])
def test_steps_to_tolerance_base2_versus_dissemination(size):
    b2, dis = Schedule(size, "base2"), Schedule(size, "dissemination")
    assert steps_to(b2, 1e-6) == b2.period
    assert steps_to(dis, 1e-6) > 3 * b2.period
    assert min(mix_error(dis, 10 * dis.period)) > 1e-12  # contracts, never exact


def test_mix_error_matches_rank_by_rank_mixing():
    s = Schedule(7, "base2", seed=5)
    x = np.random.default_rng(3).standard_normal((7, 4))
    mean = x.mean(axis=0)
    by_rank = _mix(s, x, range(2))
    want = np.linalg.norm(by_rank - mean) / np.linalg.norm(x - mean)
    assert mix_error(s, 2, dim=4, seed=3)[2] == pytest.approx(want, rel=1e-12)


def test_mix_error_edges():
    assert mix_error(Schedule(1), 3) == [0.0] * 4
    assert mix_error(Schedule(4), 0) == [1.0]
    assert steps_to(Schedule(7, "dissemination"), 1e-6, max_steps=5) is None
    with pytest.raises(ValueError, match="tol must be > 0"):
        steps_to(Schedule(4), 0)


@pytest.mark.parametrize("module", [base2, schedule, schedule_mixing])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0

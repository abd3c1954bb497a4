"""Tier 1: partner schedules, exhaustively over sizes 1..17, in one process."""

from __future__ import annotations

import numpy as np
import pytest

from gossipgrad.comm.schedule import (
    Schedule,
    check_schedule,
    cycle_length,
    is_power_of_two,
    resolve_topology,
)

SIZES = range(1, 18)


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
    assert resolve_topology("auto", 8).value == "hypercube"
    assert resolve_topology("auto", 6).value == "dissemination"
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

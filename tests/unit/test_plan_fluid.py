"""The fluid network of a parameter server's rounds (gossipgrad.tools.plan.fluid): closed forms."""

from __future__ import annotations

import pytest
from pytest import approx

from gossipgrad.tools.plan.fluid import IN, OUT, Network, Round, fair_rates, run


def ports(n: int, rate: float = 10.0, counts: tuple[int, ...] | None = None) -> Network:
    counts = counts or (1,) * n
    return Network(counts, {(d, m): rate for d in (IN, OUT) for m in range(n)})


def push(owner: int, n: float, size: int, ready: float = 0.0, latency: float = 0.0) -> Round:
    """Every other rank sends ``n`` bytes into ``owner`` (one rank per port)."""
    return Round(ready, latency, (((IN, owner), (size - 1) * n),), OUT, owner, n)


def test_one_round_moves_at_its_busiest_resource_and_ends_after_its_latency():
    # 2 ranks push 10 bytes each into rank 0: 20 bytes through rank 0's inbound at 10
    # bytes/s, then 0.5 s of latency
    [(start, end)] = run(ports(3), [push(0, 10.0, 3, ready=1.0, latency=0.5)])
    assert (start, end) == (1.0, approx(1.0 + 2.0 + 0.5))


def test_rounds_into_different_owners_share_the_senders_outbound_links():
    # 3 ranks, pushes into 0 and into 1 at once: rank 2's outbound carries both (2 x 10 per
    # unit), as do the owners' inbound (20 each): every resource needs 2 s
    spans = run(ports(3), [push(0, 10.0, 3), push(1, 10.0, 3)])
    assert [e for _, e in spans] == [approx(2.0), approx(2.0)]
    # with 8 ranks the senders' links are not the bottleneck until 7 pushes run together
    spans = run(ports(8), [push(o, 10.0, 8) for o in range(2)])
    assert [e for _, e in spans] == [approx(7.0)] * 2


def test_rates_are_max_min_fair_and_use_what_a_held_back_round_leaves():
    net = Network((1, 1, 1), {(IN, 0): 10.0, (IN, 1): 4.0, (OUT, 2): 10.0})
    a = Round(0.0, 0.0, (((IN, 0), 1.0), ((OUT, 2), 1.0)))  # rank 2 -> 0
    b = Round(0.0, 0.0, (((IN, 1), 1.0), ((OUT, 2), 1.0)))  # rank 2 -> 1, held back at 4
    assert fair_rates(net, [a, b]) == [approx(6.0), approx(4.0)]
    free = Round(0.0, 0.0, (("nowhere", 5.0),))  # crosses no limited resource
    assert fair_rates(net, [free, a]) == [float("inf"), approx(10.0)]


def test_a_round_added_when_another_ends_starts_no_earlier():
    net = ports(2)
    first = push(0, 10.0, 2)  # rank 1 -> 0: 1 s

    def then(i: int, end: float) -> list[Round]:
        if i:
            return []
        return [Round(end + 0.25, 0.0, (((OUT, 0), 10.0),), IN, 0, 10.0)]  # the pull back

    assert run(net, [first], then) == [(0.0, approx(1.0)), (approx(1.25), approx(2.25))]
    with pytest.raises(ValueError, match="ready earlier"):
        run(net, [first], lambda i, end: [Round(end - 1.0, 0.0)] if i == 0 else [])


def test_empty_rounds_take_only_their_latency_and_bad_capacities_are_named():
    assert run(ports(2), [Round(2.0, 0.5)]) == [(2.0, 2.5)]
    with pytest.raises(ValueError, match=r"capacity of \('in', 0\) must be > 0"):
        Network((1,), {(IN, 0): 0.0})


def test_spread_load_counts_the_ranks_behind_each_port():
    # 2 nodes of 3 ranks: a push into node 0 carries 3 x 10 bytes out of node 1's port
    net = Network((3, 3), {(OUT, 1): 10.0, (IN, 0): 100.0})
    [(_, end)] = run(net, [Round(0.0, 0.0, (((IN, 0), 30.0),), OUT, 0, 10.0)])
    assert end == approx(3.0)

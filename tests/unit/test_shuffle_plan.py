"""Pure shuffle plans, exhaustively over sizes 1..17 by simulating rounds on sample ids."""

from __future__ import annotations

import numpy as np
import pytest

from gossipgrad.shuffle.plan import ShufflePlan, plan_round


def simulate(plan: ShufflePlan, rounds: int) -> list[np.ndarray]:
    """Move sample ids between ranks as the plan says; ids start as rank * shard_len + slot."""
    shards = [np.arange(r * plan.shard_len, (r + 1) * plan.shard_len) for r in range(plan.size)]
    for k in range(rounds):
        parts = [plan.round(r, k) for r in range(plan.size)]
        if not plan.active:
            assert parts == [None] * plan.size
            continue
        assert sorted(p.dst for p in parts) == list(range(plan.size)), f"round {k}"
        outgoing = [shards[r][p.slots].copy() for r, p in enumerate(parts)]
        for r, p in enumerate(parts):
            assert p.dst != r and parts[p.dst].src == r, f"round {k}: rank {r} unmatched"
            assert len(set(p.slots.tolist())) == len(p.slots) == plan.samples
            assert 0 <= p.slots.min() and p.slots.max() < plan.shard_len
            shards[r][p.slots] = outgoing[p.src]
    return shards


@pytest.mark.parametrize("size", range(1, 18))
@pytest.mark.parametrize("shard_len,samples", [(1, 1), (5, 0), (5, 2), (8, 8)])
def test_multiset_is_preserved(size: int, shard_len: int, samples: int) -> None:
    plan = ShufflePlan(size, shard_len, samples, seed=size)
    shards = simulate(plan, rounds=60)
    assert all(len(s) == shard_len for s in shards)
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(size * shard_len))


@pytest.mark.parametrize("size", [2, 3, 7, 8, 16, 17])
def test_samples_mix_across_ranks(size: int) -> None:
    """After many rounds most samples live away from the rank they started on."""
    plan = ShufflePlan(size, shard_len=10, samples=3, seed=1)
    shards = simulate(plan, rounds=200)
    home = sum(int(np.sum(s // 10 == r)) for r, s in enumerate(shards))
    assert home < 0.5 * size * 10
    origins = {int(i) // 10 for i in shards[0]}
    assert len(origins) >= min(size, 4)


@pytest.mark.parametrize("topology", ["hypercube", "dissemination"])
def test_topologies(topology: str) -> None:
    plan = ShufflePlan(8, 6, 2, seed=3, topology=topology)
    assert np.array_equal(np.sort(np.concatenate(simulate(plan, 50))), np.arange(48))


def test_partners_rotate_and_plan_is_deterministic() -> None:
    plan = ShufflePlan(7, 9, 3, seed=5)
    assert len({plan.round(0, k).dst for k in range(30)}) >= 3
    a, b = plan.round(2, 11), plan_round(5, 11, 2, 7, 9, 3)
    assert (a.dst, a.src) == (b.dst, b.src) and np.array_equal(a.slots, b.slots)
    other = ShufflePlan(7, 9, 3, seed=6)
    assert any(
        not np.array_equal(plan.round(0, k).slots, other.round(0, k).slots) for k in range(5)
    )


@pytest.mark.parametrize(
    "args,match",
    [
        ((0, 4, 1), "size"),
        ((2, 0, 0), "shard_len"),
        ((2, 4, 5), "--shuffle-samples"),
        ((2, 4, -1), "--shuffle-samples"),
    ],
)
def test_bad_arguments_name_the_argument(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ShufflePlan(*args)
    with pytest.raises(ValueError, match="seed"):
        ShufflePlan(2, 4, 1, seed=-1)
    with pytest.raises(ValueError, match="round index"):
        ShufflePlan(2, 4, 1).round(0, -1)

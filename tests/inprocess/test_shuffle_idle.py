"""The shuffle on a base2 schedule, whose idle ranks swap nothing in some rounds: the pure
plan over sizes 1..17, then the worker on the in-process world."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.shuffle import ShardStore, ShuffleWorker
from gossipgrad.shuffle.plan import ShufflePlan

SHARD = 6


def simulate(plan: ShufflePlan, rounds: int) -> tuple[list[np.ndarray], int]:
    """Move sample ids as the plan says (ids start as rank * shard_len + slot); also count
    the idle rank-rounds."""
    shards = [np.arange(r * plan.shard_len, (r + 1) * plan.shard_len) for r in range(plan.size)]
    idle = 0
    for k in range(rounds):
        parts = [plan.round(r, k) for r in range(plan.size)]
        assert sorted(p.dst for p in parts) == list(range(plan.size)), f"round {k}"
        outgoing = [shards[r][p.slots].copy() for r, p in enumerate(parts)]
        for r, p in enumerate(parts):
            assert parts[p.dst].src == r, f"round {k}: rank {r} unmatched"
            if p.dst == r:  # idle: itself on both sides, nothing to swap
                assert p.src == r and len(p.slots) == 0
                idle += 1
                continue
            assert len(set(p.slots.tolist())) == len(p.slots) == plan.samples
            shards[r][p.slots] = outgoing[p.src]
    return shards, idle


@pytest.mark.parametrize("size", range(2, 18))
def test_base2_plan_keeps_the_multiset_and_idle_ranks_swap_nothing(size: int) -> None:
    plan = ShufflePlan(size, SHARD, 2, seed=size, topology="base2")
    shards, idle = simulate(plan, rounds=40)
    assert all(len(s) == SHARD for s in shards)
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(size * SHARD))
    assert (idle > 0) == (size & (size - 1) != 0)  # base2 idles exactly off powers of two


def test_base2_plan_moves_samples_away_from_home() -> None:
    shards, _ = simulate(ShufflePlan(6, 10, 3, seed=1, topology="base2"), rounds=200)
    home = sum(int(np.sum(s // 10 == r)) for r, s in enumerate(shards))
    assert home < 0.5 * 6 * 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [3, 6])
def test_worker_on_base2_keeps_the_multiset(size: int) -> None:
    steps = 60

    def body(comm):
        ids = np.arange(comm.rank * SHARD, (comm.rank + 1) * SHARD)
        payload = torch.tensor(ids, dtype=torch.float32).unsqueeze(1).repeat(1, 4)
        store = ShardStore.of_tensors(ids, ids % 7, payload)
        seen = []
        with ShuffleWorker(store, comm, samples=2, seed=3, topology="base2") as worker:
            for step in range(steps):
                worker.on_step(step)
                seen.append(store.sample_ids())
        s = store.read_all()
        assert torch.equal(
            s.payload, torch.tensor(s.ids, dtype=torch.float32)[:, None].expand(-1, 4)
        )
        return np.stack(seen)

    seen = np.stack(run_ranks(size, body, timeout=100), axis=1)  # [step, rank, slot]
    everyone = np.arange(size * SHARD)
    for step, row in enumerate(seen):
        assert np.array_equal(np.sort(row.reshape(-1)), everyone), f"step {step}"
    assert np.mean(seen[-1] // SHARD != np.arange(size)[:, None]) > 0.3

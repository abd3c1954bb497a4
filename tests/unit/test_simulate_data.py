"""The simulator's data and job, pure: shards are the runtime's partition, batches follow
the runtime's loader, shuffle rounds keep the multiset; options refuse what cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipgrad.data.loader import ShardLoader
from gossipgrad.data.partition import partition
from gossipgrad.shuffle import ShardStore
from gossipgrad.tools.simulate import simulate
from gossipgrad.tools.simulate.data import Shards, Task, as_task
from gossipgrad.tools.simulate.job import SimOptions, scaled_lr

LABELS = np.arange(240) % 6


@pytest.mark.parametrize("kind", ["iid", "sorted", "dirichlet:0.3"])
def test_shards_are_the_runtimes_partition(kind):
    shards = Shards(LABELS, 5, batch=4, seed=7, kind=kind)
    assert shards.ids.tolist() == [s.tolist() for s in partition(LABELS, 5, kind, 7)]


def test_batches_are_what_the_runtimes_loader_reads():
    shards = Shards(LABELS, 4, batch=5, seed=3)
    for rank in range(4):
        ids = shards.ids[rank]
        store = ShardStore.of_tensors(ids, LABELS[ids], torch.from_numpy(ids)[:, None])
        loader = ShardLoader(store, 5, seed=3, rank=rank)
        expected = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            expected += [x[:, 0].tolist() for x, _ in loader]
        got = [shards.batch(t)[rank].tolist() for t in range(2 * shards.steps_per_epoch)]
        assert got == expected


@pytest.mark.parametrize("size", [3, 4, 7])
def test_shuffle_rounds_keep_the_multiset_and_mix_sorted_shards(size):
    labels = np.arange(70 * size) % 10
    shards = Shards(labels, size, batch=2, seed=1, kind="sorted", shuffle=True, samples=10)
    before = sorted(shards.ids.reshape(-1).tolist())
    held = shards.labels_held(labels).mean()
    for t in range(200):
        shards.on_step(t)
    assert sorted(shards.ids.reshape(-1).tolist()) == before
    assert shards.labels_held(labels).mean() > held + 3


def test_a_task_from_tuples_arrays_and_datasets():
    x, y = torch.randn(10, 3), torch.arange(10) % 2
    assert as_task((x, y)).classes == 2
    assert len(as_task((x.numpy(), y.numpy(), x[:4], y[:4])).test_y) == 4
    pairs = [(x[i], int(y[i])) for i in range(10)]
    assert torch.equal(as_task(pairs).train_x, x)
    with pytest.raises(ValueError, match="data must be"):
        as_task(42)
    with pytest.raises(ValueError, match="differ in length"):
        Task(x, y[:3])


def test_options_refuse_what_cannot_run():
    with pytest.raises(ValueError, match="one of batch"):
        SimOptions(size=4)
    with pytest.raises(ValueError, match="multiple of 3"):
        SimOptions(size=3, global_batch=8)
    assert SimOptions(size=4, global_batch=8).rank_batch == 2
    assert scaled_lr(0.1, SimOptions(size=16, batch=4, lr_scale="sqrt")) == pytest.approx(0.4)
    assert scaled_lr(0.1, SimOptions(size=4, batch=4, lr_scale="none")) == 0.1


def tiny() -> torch.nn.Module:
    return torch.nn.Linear(3, 2)


DATA = (torch.randn(64, 3), torch.arange(64) % 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "ps"}, "keeps an exchange of its own"),
        ({"strategy": "allreduce", "max_lag": 2}, "max-lag|max_lag"),
        ({"delays": "const:1"}, "needs max_lag"),
        ({"batch": 40}, "fewer than a batch"),
        ({"optimizer": torch.optim.LBFGS}, "elementwise"),
        ({"mix": "param", "max_lag": 1, "wire": "bf16"}, "lossless"),
        ({"nonsense": 1}, "unknown options"),
    ],
)
def test_a_job_that_cannot_run_is_refused_in_one_line(options, message):
    options = {"batch": 4, "steps": 2, **options}
    with pytest.raises(ValueError, match=message) as info:
        simulate(tiny, DATA, 4, **options)
    assert "\n" not in str(info.value)


def test_the_stack_refuses_a_model_with_buffers():
    with pytest.raises(ValueError, match="engine='ranks'"):
        simulate(
            lambda: torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)),
            DATA,
            2,
            batch=4,
            steps=1,
        )

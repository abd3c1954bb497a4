"""The seams hold: a toy strategy, a toy mixing rule and a toy wire codec, each one module
under tests/support/plugins/ (nothing under gossipgrad/ knows them), registered from the tests and
trained on the digits job through ``gossipgrad.DistributedOptimizer`` on the thread world
(through ``gossipgrad train`` under a real mpiexec: tests/mpi/test_seams_mpi.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import toy_codec  # registers "toy-negate" (tests/support/plugins, on sys.path: conftest)
import toy_pairs  # registers "toy-pairs"
import toy_rule  # registers "toy30"
import toy_strategy  # registers "toy-periodic"

import gossipgrad
from gossipgrad.comm.local import run_ranks
from gossipgrad.data.sources import open_source
from gossipgrad.engine.run.evaluation import evaluate
from gossipgrad.engine.step import train_step
from gossipgrad.models import build_model, loss_fn
from gossipgrad.options import DataOptions
from gossipgrad.strategies import build_optimizer


def test_the_toys_live_outside_the_package():
    package = Path(gossipgrad.__file__).resolve().parent
    for module in (toy_strategy, toy_rule, toy_codec, toy_pairs):
        assert package not in Path(module.__file__).resolve().parents, module.__file__
    for text in (p.read_text() for p in package.rglob("*.py")):
        assert "toy-periodic" not in text and "toy30" not in text and "toy-negate" not in text
        assert "toy-pairs" not in text


def _digits_job(comm, epochs: int = 6, **options):
    """Train the digits MLP on this rank's shard with ``options``; the consensus model's
    accuracy and the optimizer."""
    source = open_source(DataOptions(), rank=comm.rank, size=comm.size, seed=0)
    torch.manual_seed(0)
    model = build_model("mlp", source.in_shape, source.classes, 0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = build_optimizer(sgd, model, comm, **options)
    try:
        for epoch in range(epochs):
            for x, y in source.train_batches(epoch):
                train_step(opt, x, y, loss_fn)
        opt.synchronize()
        return evaluate(model, source, comm)["top1"], opt
    finally:
        opt.close()


@pytest.mark.timeout(240)
def test_a_toy_strategy_trains_digits_through_the_library():
    def body(comm):
        top1, opt = _digits_job(comm, strategy=toy_strategy.NAME, sync_every=2)
        return top1, opt.averages, type(opt).__name__

    results = run_ranks(4, body, timeout=200)
    top1 = results[0][0]
    assert all(r[0] == top1 for r in results), results  # one consensus model
    assert top1 > 0.9, results
    assert results[0][1] >= 30 and results[0][2] == "PeriodicAverage"  # 6 epochs / 2


def test_a_toy_strategy_refuses_what_it_does_not_read():
    with pytest.raises(ValueError, match="max_lag=2 does not apply to strategy='toy-periodic'"):
        gossipgrad.ExchangeOptions(strategy=toy_strategy.NAME, max_lag=2)


@pytest.mark.timeout(120)
def test_a_toy_rule_mixes_with_its_weight_and_keeps_the_mean():
    def body(comm):
        model = torch.nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            model.weight.fill_(0.0)
        sgd = torch.optim.SGD(model.parameters(), lr=0.0)
        opt = build_optimizer(sgd, model, comm, rule=toy_rule.NAME, overlap=False, rotate=False)
        with torch.no_grad():
            model.weight.fill_(float(comm.rank))  # after the start-up broadcast
        opt.allow_different_start()
        seen = []
        try:
            for _ in range(3):
                opt.zero_grad()
                opt.step()  # lr 0: only the mix moves the parameters
                seen.append(float(model.weight.detach()))
        finally:
            opt.close()
        return seen, opt.schedule.peers(comm.rank, 0).src

    results = run_ranks(4, body, timeout=60)
    for rank, (seen, src) in enumerate(results):
        assert seen[0] == pytest.approx(0.7 * rank + 0.3 * src), (rank, seen, src)
    for step in range(3):
        assert sum(seen[step] for seen, _ in results) == pytest.approx(6.0)  # 0+1+2+3


@pytest.mark.timeout(240)
def test_a_toy_rule_trains_digits_through_the_library():
    results = run_ranks(4, lambda comm: _digits_job(comm, rule=toy_rule.NAME)[0], timeout=200)
    assert len(set(results)) == 1 and results[0] > 0.9, results


def _bits(comm, **options) -> torch.Tensor:
    """Six steps of a small model with ``options``; every parameter's bits after them."""
    init = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=init) * 0.3)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = build_optimizer(sgd, model, comm, bucket_mb=0.0005, seed=3, **options)
    gen = torch.Generator().manual_seed(100 + comm.rank)
    try:
        for _ in range(6):
            x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
            train_step(opt, x, y, torch.nn.functional.cross_entropy)
        opt.drain()
    finally:
        opt.close()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("options", [{"mix": "param"}, {"mix": "grad"}, {"overlap": False}])
def test_a_toy_bucket_strategy_brings_its_own_mix_and_byte_count(options):
    """A plugin's whole-bucket mix (``BucketMixer(whole=...)``) runs in the shell: each pair
    of ranks holds the same bits, the pairs differ, and the bytes a step are the mix's own
    count (a bucket each), not the ring's ``2 (size - 1) / size`` its pattern names."""

    def body(comm):
        bits = _bits(comm, strategy=toy_pairs.NAME, **options)
        model = torch.nn.Linear(6, 3)
        opt = build_optimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model, comm, strategy=toy_pairs.NAME
        )
        try:
            return bits, opt.bytes_sent_per_step(), opt.exchange_topology, opt.schedule
        finally:
            opt.close()

    results = run_ranks(4, body, timeout=250)
    bits = [r[0] for r in results]
    assert torch.equal(bits[0], bits[1]) and torch.equal(bits[2], bits[3])
    assert not torch.equal(bits[0], bits[2])  # the pairs never mixed
    for sent, topology, schedule in (r[1:] for r in results):
        assert sent == 4 * (6 * 3 + 3)  # its count: one float32 bucket, not 1.5 of it
        assert topology == schedule.topology  # no schedule of its own: the ranks'


DETERMINISTIC = [
    {"mix": "grad"},
    {"mix": "param"},
    {"mix": "param", "overlap": False},
    {"mix": "grad", "staleness": 1},
    {"mix": "grad", "sufficient_factors": "on"},
    {"strategy": "allreduce"},
    {"strategy": "allreduce", "sufficient_factors": "on"},
    {"strategy": "allreduce-param"},
    {"strategy": "ps"},
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("options", DETERMINISTIC, ids=lambda o: ",".join(map(str, o.values())))
def test_a_toy_codec_carries_every_exchange_bit_for_bit(options):
    def body(comm):
        return _bits(comm, **options), _bits(comm, wire=toy_codec.NAME, **options)

    before = dict(toy_codec.CALLS)
    for plain, negated in run_ranks(3, body, timeout=250):
        assert torch.equal(plain, negated), options
    used = {k: toy_codec.CALLS[k] - before.get(k, 0) for k in ("encode", "decode")}
    assert used["encode"] > 0 and used["decode"] > 0, used  # the codec was on the wire


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mix", ["grad", "param"])
def test_a_toy_codec_carries_lagged_frames(mix):
    before = toy_codec.CALLS["encode"]
    results = run_ranks(3, lambda comm: _bits(comm, mix=mix, max_lag=2, wire="toy-negate"))
    assert all(torch.isfinite(b).all() for b in results)
    assert toy_codec.CALLS["encode"] > before  # every frame went through the codec

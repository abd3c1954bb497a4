"""Gradient accumulation: several backward passes per step give, on every layer type, what
one process accumulating every rank's micro-batches gives (float64, 1e-10).

Before ``backward_passes_per_step`` and ``no_sync()`` existed, the first backward pass
posted each bucket and the second added to gradients already on the wire: every
non-Linear layer ended ~4e-2 off with no error. Now that is an error naming what to pass.
"""

from __future__ import annotations

import copy

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.strategies import DistributedOptimizer

PASSES, STEPS, MICRO = 3, 3, 4


class Zoo(torch.nn.Module):
    """One of each common layer type: embedding, convolution, batch and group norm, LSTM,
    layer norm, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.gn = torch.nn.GroupNorm(1, 3)
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True)
        self.ln = torch.nn.LayerNorm(5)
        self.fc = torch.nn.Linear(3 * 4 * 4 + 5, 2)

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        img, tok = batch
        a = self.gn(torch.relu(self.bn(self.conv(img)))).flatten(1)
        h, _ = self.lstm(self.emb(tok))
        return self.fc(torch.cat([a, self.ln(h[:, -1])], 1))


def _micro(rank: int, step: int, k: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + k)
    img = torch.randn(MICRO, 1, 4, 4, generator=g, dtype=torch.float64)
    tok = torch.randint(0, 10, (MICRO, 3), generator=g)
    return (img, tok), torch.randint(0, 2, (MICRO,), generator=g)


def _loss(model: torch.nn.Module, rank: int, step: int, k: int) -> torch.Tensor:
    x, y = _micro(rank, step, k)
    return torch.nn.functional.cross_entropy(model(x), y) / PASSES  # as Horovod's example


START = Zoo().double().state_dict()


def _reference(size: int) -> list[torch.Tensor]:
    """One process: every rank's micro-batches accumulated, divided by size, SGD."""
    model = Zoo().double()
    model.load_state_dict(START)
    sgd = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for step in range(STEPS):
        sgd.zero_grad()
        for rank in range(size):
            for k in range(PASSES):
                (_loss(model, rank, step, k) / size).backward()
        sgd.step()
    return [p.detach().clone() for p in model.parameters()]


def _train(comm, way: str, **options) -> list[torch.Tensor]:
    model = Zoo().double()
    model.load_state_dict(copy.deepcopy(START))
    sgd = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    passes = PASSES if way == "passes" else 1
    opt = DistributedOptimizer(sgd, model, comm, backward_passes_per_step=passes, **options)
    try:
        for step in range(STEPS):
            opt.zero_grad()
            for k in range(PASSES):
                if way == "no_sync" and k < PASSES - 1:
                    with opt.no_sync():
                        _loss(model, comm.rank, step, k).backward()
                else:
                    _loss(model, comm.rank, step, k).backward()
            opt.step()
    finally:
        opt.close()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("way", ["passes", "no_sync"])
@pytest.mark.parametrize(
    "size, options",
    [
        (4, dict(strategy="allreduce")),
        (2, dict(strategy="gossip", mix="grad")),  # two ranks: the peer is the other rank
        (4, dict(strategy="allreduce", overlap=False)),
    ],
    ids=["allreduce", "gossip-grad", "allreduce-blocking"],
)
def test_accumulation_matches_one_process_on_every_layer_type(size, options, way):
    reference = _reference(size)
    results = run_ranks(size, lambda c: _train(c, way, **options), timeout=100)
    names = [n for n, _ in Zoo().named_parameters()]
    for rank, params in enumerate(results):
        for name, got, want in zip(names, params, reference, strict=True):
            assert torch.allclose(got, want, rtol=0, atol=1e-10), (
                f"rank {rank}, {name}: {(got - want).abs().max():.3g} off"
            )


@pytest.mark.timeout(60)
def test_accumulating_without_saying_so_is_an_error_naming_what_to_pass():
    """The silent failure: N backward passes and one step, with the overlapped exchange."""
    with pytest.raises(RuntimeError) as info:
        run_ranks(2, lambda c: _train(c, "unsaid", strategy="gossip", mix="grad"), timeout=50)
    message = str(info.value)
    assert "step 0: a backward pass reached gradient bucket" in message, message
    assert "backward_passes_per_step=N" in message and "no_sync" in message, message


def test_backward_passes_per_step_is_validated_and_refused_where_unread():
    from gossipgrad.options import ExchangeOptions

    with pytest.raises(ValueError, match="backward_passes_per_step must be >= 1, got 0"):
        ExchangeOptions(backward_passes_per_step=0)
    with pytest.raises(ValueError, match="backward_passes_per_step=2 does not apply"):
        ExchangeOptions(strategy="ps", backward_passes_per_step=2)
    with pytest.raises(ValueError, match="sufficient_factors='on' needs backward_passes"):
        ExchangeOptions(mix="grad", sufficient_factors="on", backward_passes_per_step=2)

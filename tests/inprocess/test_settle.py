"""``settle()`` completes what is in flight without changing the run (what a bench calls
between segments), where ``drain()`` may drop a staleness-1 exchange before an average."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.strategies import build_optimizer


def _train(comm, between: str, steps: int = 5, **exchange) -> torch.Tensor:
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.arange(4.0).reshape(1, 4) / 10)
        model.bias.zero_()
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model, comm, **exchange
    )
    gen = torch.Generator().manual_seed(comm.rank)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=gen)
        loss = (model(x) - x[:, :1] * (comm.rank + 1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if between:
            getattr(opt, between)()
    opt.wait_parameters()
    out = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    opt.close()
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "exchange",
    [
        {"strategy": "gossip", "staleness": 1, "mix": "param"},
        {"strategy": "gossip", "staleness": 1, "mix": "grad"},
        {"strategy": "gossip", "staleness": 0, "mix": "param"},
        {"strategy": "allreduce", "staleness": 1},
    ],
)
def test_settling_after_every_step_changes_nothing(exchange):
    plain = run_ranks(4, lambda comm: _train(comm, "", **exchange))
    settled = run_ranks(4, lambda comm: _train(comm, "settle", **exchange))
    assert all(torch.equal(a, b) for a, b in zip(plain, settled, strict=True)), exchange


@pytest.mark.timeout(120)
def test_draining_a_staleness_one_exchange_drops_it():
    """Why benches settle: drained after every step, staleness 1 never mixes, and each
    rank ends where it would alone."""
    stale = {"strategy": "gossip", "staleness": 1, "mix": "param"}
    drained = run_ranks(4, lambda comm: _train(comm, "drain", **stale))
    alone = run_ranks(4, lambda comm: _train(comm, "", strategy="local"))
    settled = run_ranks(4, lambda comm: _train(comm, "settle", **stale))
    assert all(torch.equal(a, b) for a, b in zip(drained, alone, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(settled, alone, strict=True))


def _lagged(comm, settles: int, **exchange) -> list[torch.Tensor]:
    """Three steps under a bounded lag, then ``settles`` settles and a drain; the
    parameters after the steps, after the settles and after the drain."""
    model = torch.nn.Linear(4, 1)
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model, comm, max_lag=2, staleness=1, **exchange
    )
    gen = torch.Generator().manual_seed(comm.rank)

    def params() -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()

    seen = []
    try:
        for _ in range(3):
            x = torch.randn(8, 4, generator=gen)
            opt.zero_grad()
            (model(x) - x[:, :1] * (comm.rank + 1)).pow(2).mean().backward()
            opt.step()
        seen.append(params())
        for _ in range(settles):
            opt.settle()
            assert opt.timing.link.done_through(opt.step_count - 1)  # everything delivered
        seen.append(params())
        opt.drain()
        seen.append(params())
    finally:
        opt.close()
    return seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mix", ["param", "grad"])
def test_settling_a_bounded_lag_delivers_and_applies_nothing(mix):
    """``bench tta`` settles a ``--max-lag`` contender at every segment's end: its frames
    are delivered (charged to the segment) but left to the next steps, where draining
    applies them at once (param: the push-sum weights; grad: the owed shares with an
    optimizer step of their own, a step the run would not take)."""
    for steps, settled, drained in run_ranks(4, lambda comm: _lagged(comm, 2, mix=mix)):
        assert torch.equal(steps, settled)  # staleness 1: the last step's frames wait
        assert not torch.equal(settled, drained)

"""The strategy factory: names map to wrappers; unknown names fail with the list of choices."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine import factory


def test_builtin_strategies_are_registered_and_unknown_names_say_what_exists():
    assert {"gossip", "allreduce", "local"} <= set(factory.available())
    comm = run_ranks(1, lambda c: c)[0]
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"'nope'.*gossip, allreduce, local"):
        factory.make_distributed("nope", model, torch.optim.SGD(model.parameters(), lr=0.1),
                                 comm)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "local"])
def test_factory_builds_a_wrapper_that_trains(strategy):
    def body(comm):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = factory.make_distributed(strategy, model,
                                       torch.optim.SGD(model.parameters(), lr=0.1), comm,
                                       mix="grad", bucket_mb=1)
        try:
            assert opt.strategy.value == strategy
            opt.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            return opt.bytes_sent_per_step()
        finally:
            opt.close()

    sent = run_ranks(2, body, timeout=30)
    expect = {"gossip": 40.0, "allreduce": 40.0, "local": 0.0}[strategy]
    assert sent == [expect, expect]

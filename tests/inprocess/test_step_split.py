"""A step split into compute, exposed wire and host (``gossipgrad.engine.step.breakdown``) on
the thread world: a peer that is late shows as exposed wire on the rank that waits for it,
not as its compute, whichever path the wait takes (the mixer's wait in ``step()``, the
communication thread's, the lag link's)."""

from __future__ import annotations

import time

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.step import breakdown, train_step
from gossipgrad.strategies import build_optimizer
from gossipgrad.strategies.library import LibraryOptimizer

LATE_S = 0.5


def _steps(comm, steps: int, **options) -> list[dict]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = build_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm, **options)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    try:
        out = []
        for _ in range(steps):
            if comm.rank == 1:
                time.sleep(LATE_S)  # outside the step: rank 1 is late, not slow inside it
            out.append(train_step(opt, x, y, torch.nn.functional.cross_entropy).seconds)
        return out
    finally:
        opt.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "options",
    [
        {"mix": "param"},
        {"mix": "grad"},
        {"mix": "grad", "timing": "stale"},
        {"mix": "param", "timing": "lag:1"},
        {"strategy": "allreduce"},
    ],
    ids=lambda o: "-".join(map(str, o.values())),
)
def test_a_late_peer_is_exposed_wire_on_the_rank_that_waits(options):
    steps = 4
    waiting, late = run_ranks(2, lambda comm: _steps(comm, steps, **options), timeout=90)
    last = waiting[-1]  # a lag lets the first steps run ahead without waiting
    assert last["exposed"] > LATE_S / 2, last
    assert last["compute"] < LATE_S / 2, last
    for s in waiting + late:
        assert s["compute"] + s["exposed"] + s["host"] == pytest.approx(s["total"], abs=1e-6)
    assert late[-1]["exposed"] < LATE_S / 2, late[-1]


def test_a_library_strategy_leaves_exposed_unmeasured():
    """DDP and Horovod wait inside their own libraries: no figure rather than a zero."""
    assert LibraryOptimizer.waits_seen is False
    split = breakdown({"forward": 0.5, "backward": 1.0, "total": 2.0}, 0.0, 0.0, False)
    assert split == {"compute": 1.5, "exposed": None, "host": 0.5}

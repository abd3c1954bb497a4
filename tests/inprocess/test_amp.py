"""AMP's GradScaler: inf/NaN on one rank only makes every rank skip the same step and
back its scale off alike; no rank steps alone, none waits for a step that never comes.

Before the agreement, the rank with inf skipped ``step()`` alone and its peers waited for
its exchange until the deadline: ``peer 1 sent nothing ... is rank 1 alive?``.
"""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.strategies import build_optimizer

BAD_RANK, BAD_STEP, STEPS = 1, 2, 5


def _scaled_run(comm, unscale_first: bool, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = build_optimizer(sgd, model, comm, **options)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)
    g = torch.Generator().manual_seed(comm.rank)
    scales, moved = [], []
    try:
        for step in range(STEPS):
            x, y = torch.randn(8, 6, generator=g), torch.randint(0, 2, (8,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if comm.rank == BAD_RANK and step == BAD_STEP:
                loss = loss * float("inf")  # inf/NaN gradients on this rank only
            scaler.scale(loss).backward()
            if unscale_first:  # the clipping pattern: unscale, clip, then step
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            before = [p.detach().clone() for p in model.parameters()]
            scaler.step(opt)
            scaler.update()
            now = list(model.parameters())
            moved.append(any(not torch.equal(a, p) for a, p in zip(before, now, strict=True)))
            scales.append(scaler.get_scale())
        opt.synchronize()
        return opt.step_count, scales, moved
    finally:
        opt.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "options",
    [
        dict(strategy="gossip", mix="grad"),
        dict(strategy="gossip", mix="param"),
        dict(strategy="allreduce"),
        dict(strategy="gossip", mix="grad", overlap=False),
    ],
    ids=["gossip-grad", "gossip-param", "allreduce", "gossip-grad-blocking"],
)
@pytest.mark.parametrize("unscale_first", [False, True], ids=["step", "unscale-clip-step"])
def test_inf_on_one_rank_skips_the_same_step_everywhere(options, unscale_first):
    results = run_ranks(
        4, lambda c: _scaled_run(c, unscale_first, **options), timeout=90, comm_timeout=10
    )
    steps, scales, moved = zip(*results, strict=True)
    assert set(steps) == {STEPS}, steps
    assert all(s == scales[0] for s in scales), scales  # every rank's scaler agrees
    # grows every step (growth_interval 1) except the agreed back-off at BAD_STEP
    assert scales[0][BAD_STEP] == scales[0][BAD_STEP - 1] / 2, scales[0]
    for rank, m in enumerate(moved):
        # param mix moves parameters by mixing even when nobody updates
        if options.get("mix") != "param":
            assert m[BAD_STEP] is False, (rank, m)
        assert all(m[s] for s in range(STEPS) if s != BAD_STEP), (rank, m)


@pytest.mark.timeout(60)
def test_a_gradscaler_with_late_gradients_is_refused():
    with pytest.raises(RuntimeError, match="a GradScaler cannot drive timing="):
        run_ranks(2, lambda c: _scaled_run(c, False, mix="grad", staleness=1), timeout=50)

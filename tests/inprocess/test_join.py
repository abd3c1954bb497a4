"""Ranks that run different numbers of steps: ``join()`` lets them, and without it the end
is an error naming the rank that stopped first and its step (never a peer's timeout that
blames a live rank, which is what an uneven end gave before).
"""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.bucket.join import JOIN_PERIOD, JoinAgreement
from gossipgrad.strategies import build_optimizer

STRATEGIES = [
    dict(strategy="gossip", mix="grad"),
    dict(strategy="gossip", mix="param"),
    dict(strategy="allreduce"),
    dict(strategy="gossip", mix="param", overlap=False, topology="dissemination"),
]
IDS = ["gossip-grad", "gossip-param", "allreduce", "gossip-param-dissemination"]


def _model_and_opt(comm, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, build_optimizer(sgd, model, comm, **options)


def _steps(model, opt, comm, n: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(100 * seed + comm.rank)
    for _ in range(n):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 2, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options", STRATEGIES, ids=IDS)
def test_join_lets_ranks_end_after_different_numbers_of_steps(options):
    def body(comm):
        model, opt = _model_and_opt(comm, **options)
        with opt:
            _steps(model, opt, comm, 5 + 3 * comm.rank)  # 5, 8 and 11 steps
            last = opt.join()
            at = opt.step_count
            opt.synchronize()
            finite = all(torch.isfinite(p).all() for p in model.parameters())
        return last, at, finite

    results = run_ranks(3, body, timeout=100, comm_timeout=20)
    lasts, ats, finite = zip(*results, strict=True)
    assert set(lasts) == {2}, lasts  # the rank that joined last, as Horovod returns it
    assert len(set(ats)) == 1 and 11 <= ats[0] < 11 + 2 * JOIN_PERIOD, ats
    assert all(finite)


@pytest.mark.timeout(120)
def test_ranks_train_on_after_a_join_and_join_again():
    """Horovod's per-epoch pattern: every epoch ends in join(); the next one trains on."""

    def body(comm):
        model, opt = _model_and_opt(comm, strategy="gossip", mix="grad")
        with opt:
            for epoch in range(3):
                _steps(model, opt, comm, 3 + comm.rank + epoch, seed=epoch)
                opt.join()
            return opt.step_count

    counts = run_ranks(2, body, timeout=100, comm_timeout=20)
    assert counts[0] == counts[1], counts


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options", STRATEGIES[:3], ids=IDS[:3])
def test_an_uneven_end_without_join_names_the_rank_that_stopped_first(options):
    def body(comm):
        model, opt = _model_and_opt(comm, **options)
        _steps(model, opt, comm, 9 if comm.rank == 1 else 12)
        try:
            opt.close()
        except RuntimeError as exc:
            return str(exc)
        return None

    messages = run_ranks(4, body, timeout=100, comm_timeout=20)
    for rank, message in enumerate(messages):
        assert message is not None, f"rank {rank} raised nothing"
        assert "ranks ran different numbers of steps: rank 1 stopped after 9 steps without " in (
            message
        ), message
        assert "while rank 3 ran 12" in message and "opt.join()" in message, message


@pytest.mark.timeout(60)
def test_an_even_end_closes_quietly_within_one_join_period():
    def body(comm):
        model, opt = _model_and_opt(comm, strategy="gossip", mix="grad")
        _steps(model, opt, comm, 5)
        opt.close()  # raises nothing: every rank ended at the same step
        return opt.step_count

    counts = run_ranks(4, body, timeout=50, comm_timeout=20)
    assert set(counts) == {2 * JOIN_PERIOD}, counts  # 5 steps, zero-steps to the boundary 8


def test_the_agreement_alone_decides_at_the_same_step_on_every_rank():
    """Pure protocol: ranks join at steps 2, 6 and 9; all see "done" at one boundary."""

    def body(comm):
        agreement = JoinAgreement(comm, period=4)
        join_at, step = (2, 6, 9)[comm.rank], 0
        while not agreement.done:
            if step == join_at:
                agreement.join(step)
            step += 1
            agreement.after_step(step)
        return step, agreement.result

    results = run_ranks(3, body)
    assert {s for s, _ in results} == {12}, results
    assert all(r == {"last_rank": 2, "last_step": 9} for _, r in results), results

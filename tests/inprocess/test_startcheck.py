"""The first step checks that the ranks start alike and that their data differ.

Before: a checkpoint restored on rank 0 after the optimizer was built (Horovod's resume
pattern without its broadcast) was silently averaged with the other ranks' fresh models,
and ranks that all read the same samples trained on without a word.
"""

from __future__ import annotations

import logging

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.consensus import broadcast_parameters_
from gossipgrad.strategies import build_optimizer


def _build(comm, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, build_optimizer(sgd, model, comm, **options)


def _checkpoint() -> dict:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return {k: v.clone() for k, v in model.state_dict().items()}


def _step(model, opt, comm, same_data: bool = False) -> None:
    g = torch.Generator().manual_seed(0 if same_data else comm.rank)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 2, (8,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options", [dict(), dict(mix="grad"), dict(strategy="allreduce")], ids=str)
def test_a_checkpoint_loaded_on_rank_0_only_fails_the_first_step_saying_broadcast(options):
    ckpt = _checkpoint()

    def body(comm):
        model, opt = _build(comm, **options)
        if comm.rank == 0:  # the resume pattern, without the broadcast after it
            model.load_state_dict(ckpt)
        try:
            _step(model, opt, comm)
        except RuntimeError as exc:
            return str(exc)
        finally:
            opt.close()
        return None

    messages = run_ranks(3, body, timeout=50, comm_timeout=20)
    for rank, message in enumerate(messages):
        assert message is not None, f"rank {rank} trained on"
        assert f"rank {rank}, step 0: the parameters differ between ranks at the first step" in (
            message
        ), message
        assert "broadcast_parameters(model.state_dict(), root_rank=0)" in message, message


@pytest.mark.timeout(60)
def test_loading_then_broadcasting_passes_the_check():
    ckpt = _checkpoint()

    def body(comm):
        model, opt = _build(comm)
        if comm.rank == 0:
            model.load_state_dict(ckpt)
        broadcast_parameters_(model, comm)
        with opt:
            _step(model, opt, comm)
        return opt.step_count

    assert run_ranks(3, body, timeout=50) == [4, 4, 4]  # to the join boundary at close


@pytest.mark.timeout(60)
def test_an_optimizer_state_loaded_on_one_rank_is_caught_after_load_state_dict():
    def body(comm):
        model, opt = _build(comm)
        with opt:
            _step(model, opt, comm)
            state = opt.state_dict()
            if comm.rank == 1:
                state["param_groups"][0]["lr"] = 0.5  # another run's checkpoint
            opt.load_state_dict(state)  # every rank loads: the check after it is collective
            try:
                _step(model, opt, comm)
            except RuntimeError as exc:
                return str(exc)
        return None

    messages = run_ranks(2, body, timeout=50, comm_timeout=20)
    assert all(
        "optimizer settings or step count differ between ranks at the first step after "
        "load_state_dict" in m
        for m in messages
    ), messages


@pytest.mark.timeout(60)
def test_identical_first_gradients_warn_once_naming_the_sampler(caplog):
    def body(comm, same):
        model, opt = _build(comm)
        with opt:
            for _ in range(3):
                _step(model, opt, comm, same_data=same)

    with caplog.at_level(logging.WARNING, logger="gossipgrad.engine.bucket.startcheck"):
        run_ranks(3, body, False, timeout=50)
        assert not caplog.records
        run_ranks(3, body, True, timeout=50)
    [record] = caplog.records
    assert "every rank computed the same gradients" in record.getMessage()
    assert "DistributedSampler" in record.getMessage()


@pytest.mark.timeout(60)
def test_all_zero_first_gradients_are_no_hint_about_the_samples(caplog):
    """A stand-in device's gradients stay zero on every rank: identical, but not because
    the ranks read the same samples, so no warning."""

    def body(comm):
        model, opt = _build(comm)
        with opt:
            for _ in range(2):
                opt.zero_grad()
                (0.0 * model(torch.randn(8, 6)).sum()).backward()
                opt.step()

    with caplog.at_level(logging.WARNING, logger="gossipgrad.engine.bucket.startcheck"):
        run_ranks(3, body, timeout=50)
    assert not caplog.records, [r.getMessage() for r in caplog.records]


@pytest.mark.timeout(60)
def test_a_start_that_differs_on_purpose_is_allowed():
    def body(comm):
        model, opt = _build(comm)
        with torch.no_grad():
            model[0].bias.fill_(float(comm.rank))
        opt.allow_different_start()
        with opt:
            _step(model, opt, comm)
        return opt.step_count

    assert run_ranks(2, body, timeout=50) == [4, 4]

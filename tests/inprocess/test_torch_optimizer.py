"""The distributed optimizer is a torch optimizer: every scheduler in
``torch.optim.lr_scheduler`` drives it exactly as it drives the optimizer it wraps, state
dicts round-trip (and a plain torch optimizer's loads), ``with`` closes it.
"""

from __future__ import annotations

import inspect
import io
import warnings
from collections.abc import Callable

import pytest
import torch
from torch.optim import lr_scheduler as L

from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.engine.optim import rebuild
from gossipgrad.engine.protocol import STATE_KEY
from gossipgrad.strategies import DistributedOptimizer, build_optimizer, handle

STEPS = 12


def _sequential(opt):
    return L.SequentialLR(
        opt, [L.ConstantLR(opt, 0.5, total_iters=3), L.ExponentialLR(opt, 0.9)], milestones=[3]
    )


def _chained(opt):
    return L.ChainedScheduler([L.StepLR(opt, 2, 0.5), L.ExponentialLR(opt, 0.95)], opt)


#: One way to build each scheduler torch ships (the test below fails when torch adds one).
SCHEDULERS: dict[str, Callable] = {
    "LambdaLR": lambda o: L.LambdaLR(o, lambda e: 0.9**e),
    "MultiplicativeLR": lambda o: L.MultiplicativeLR(o, lambda e: 0.95),
    "StepLR": lambda o: L.StepLR(o, step_size=3, gamma=0.5),
    "MultiStepLR": lambda o: L.MultiStepLR(o, milestones=[2, 5, 9], gamma=0.5),
    "ConstantLR": lambda o: L.ConstantLR(o, factor=0.5, total_iters=4),
    "LinearLR": lambda o: L.LinearLR(o, start_factor=0.2, total_iters=6),
    "ExponentialLR": lambda o: L.ExponentialLR(o, gamma=0.9),
    "SequentialLR": _sequential,
    "CosineAnnealingLR": lambda o: L.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "ChainedScheduler": _chained,
    "ReduceLROnPlateau": lambda o: L.ReduceLROnPlateau(o, patience=1, factor=0.5),
    "CyclicLR": lambda o: L.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3),
    "CosineAnnealingWarmRestarts": lambda o: L.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2),
    "OneCycleLR": lambda o: L.OneCycleLR(o, max_lr=0.2, total_steps=STEPS),
    "PolynomialLR": lambda o: L.PolynomialLR(o, total_iters=8, power=2.0),
}


def test_every_scheduler_torch_ships_is_listed():
    shipped = {
        name
        for name, c in vars(L).items()
        if inspect.isclass(c)
        and not name.startswith("_")
        and c not in (L.LRScheduler,)
        and (issubclass(c, L.LRScheduler) or c is L.ReduceLROnPlateau)
    }
    assert shipped == set(SCHEDULERS), shipped ^ set(SCHEDULERS)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def _schedule(make: Callable, wrap: Callable | None) -> list[tuple[float, float]]:
    """(lr, momentum) of the first group after each step, with the scheduler on the
    optimizer itself (``wrap`` None) or on ``wrap(sgd, model)``."""
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = sgd if wrap is None else wrap(sgd, model)
    sched = make(opt)
    seen = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(torch.randn(4, 4, generator=gen)).pow(2).mean()
        loss.backward()
        opt.step()
        if isinstance(sched, L.ReduceLROnPlateau):
            sched.step(1.0)  # a plateau: the rate drops every patience + 1 steps
        else:
            sched.step()
        seen.append((opt.param_groups[0]["lr"], opt.param_groups[0].get("momentum")))
    if wrap is not None:
        opt.close()
    return seen


@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "local", "ps"])
@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_every_scheduler_drives_the_distributed_optimizer_as_the_plain_one(name, strategy):
    comm = LocalWorld(1).communicators()[0]

    def wrap(sgd, model):
        opt = build_optimizer(sgd, model, comm, strategy=strategy)
        assert isinstance(opt, torch.optim.Optimizer)
        return opt

    plain = _schedule(SCHEDULERS[name], None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
        wrapped = _schedule(SCHEDULERS[name], wrap)
    assert wrapped == plain
    assert len({lr for lr, _ in plain}) > 1, "the schedule never changed the rate"


@pytest.mark.timeout(60)
def test_a_scheduler_on_two_ranks_changes_the_rate_of_the_shared_groups():
    def body(comm):
        model = _model()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        opt = build_optimizer(sgd, model, comm, mix="grad")
        sched = L.StepLR(opt, step_size=2, gamma=0.5)
        with opt:
            for _ in range(4):
                opt.zero_grad()
                model(torch.ones(2, 4) * (comm.rank + 1)).sum().backward()
                opt.step()
                sched.step()
        return sgd.param_groups[0]["lr"], sched.state_dict()["last_epoch"]

    assert run_ranks(2, body) == [(0.025, 4), (0.025, 4)]


def _trained(strategy: str, optimizer: str = "sgd"):
    comm = LocalWorld(1).communicators()[0]
    model = _model()
    inner = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    )
    opt = build_optimizer(inner, model, comm, strategy=strategy)
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    return model, opt, comm


def _equal_states(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(
        all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
            for x, y in ((a[k][n], b[k][n]) for n in a[k])
        )
        for k in a
    )


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "ps"])
def test_state_dicts_round_trip_through_a_weights_only_file(strategy, optimizer):
    model, opt, comm = _trained(strategy, optimizer)
    state = opt.state_dict()
    assert state[STATE_KEY]["step"] == 3 and {"state", "param_groups"} <= set(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    fresh_model = _model()
    fresh_inner = rebuild(opt.optimizer, [{"params": list(fresh_model.parameters())}])
    with DistributedOptimizer(fresh_inner, fresh_model, comm, strategy=strategy) as fresh:
        fresh.load_state_dict(loaded)
        assert fresh.stats["step"] == 3
        assert _equal_states(handle(fresh).optimizer.state_dict()["state"], state["state"])
        assert fresh.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    opt.close()


@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "ps"])
def test_a_plain_torch_optimizers_state_loads_and_ours_loads_into_a_plain_one(strategy):
    model = _model()
    plain = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model(torch.ones(2, 4)).sum().backward()
    plain.step()
    _, opt, comm = _trained(strategy)
    with opt:
        opt.load_state_dict(plain.state_dict())  # no gossipgrad key: the step count is kept
        assert opt.step_count == 3 and opt.param_groups[0]["lr"] == 0.05
        assert _equal_states(opt.optimizer.state_dict()["state"], plain.state_dict()["state"])
        again = torch.optim.SGD(_model().parameters(), lr=0.1, momentum=0.9)
        again.load_state_dict(opt.state_dict())  # torch ignores our extra key
        assert again.param_groups[0]["lr"] == 0.05


def test_with_closes_the_optimizer():
    comm = LocalWorld(1).communicators()[0]
    model = _model()
    with DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm) as opt:
        assert not handle(opt)._closed
    assert handle(opt)._closed

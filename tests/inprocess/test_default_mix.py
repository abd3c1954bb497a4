"""The mix a caller who names none gets follows the optimizer (lab/records/
optimizers.md): gradients for Adam and its kin, parameters for SGD."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import LocalWorld
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ExchangeOptions, Mix
from gossipgrad.strategies import DistributedOptimizer, handle


def _mix(optimizer: type, **kw) -> Mix:
    model = torch.nn.Linear(3, 2)
    comm = LocalWorld(1).communicators()[0]
    with DistributedOptimizer(optimizer(model.parameters(), lr=0.01), model, comm, **kw) as opt:
        return handle(opt).mix


@pytest.mark.parametrize(
    "optimizer, mix",
    [
        (torch.optim.SGD, Mix.PARAM),
        (torch.optim.Adam, Mix.GRAD),
        (torch.optim.AdamW, Mix.GRAD),
        (torch.optim.RMSprop, Mix.GRAD),
        (torch.optim.Adagrad, Mix.GRAD),
    ],
)
def test_the_library_mixes_what_suits_the_optimizer(optimizer, mix):
    assert _mix(optimizer) is mix


def test_a_mix_or_options_named_by_the_caller_win():
    assert _mix(torch.optim.Adam, mix="param") is Mix.PARAM
    assert _mix(torch.optim.Adam, options=ExchangeOptions(mix="param")) is Mix.PARAM
    # options that name no mix take the one default rule, as without options
    assert _mix(torch.optim.Adam, options=ExchangeOptions()) is Mix.GRAD
    assert _mix(torch.optim.Adam, strategy="allreduce-param") is Mix.PARAM
    assert _mix(torch.optim.SGD, strategy="allreduce") is Mix.GRAD


def test_the_command_line_follows_optimizer():
    assert TrainConfig.from_flags(optimizer="adamw").exchange.mix is Mix.GRAD
    assert TrainConfig.from_flags(optimizer="sgd").exchange.mix is Mix.PARAM
    assert TrainConfig.from_flags(optimizer="adam", mix="param").exchange.mix is Mix.PARAM
    assert TrainConfig.from_flags(optimizer="adam", strategy="ps").exchange.strategy == "ps"

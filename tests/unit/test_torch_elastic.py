"""Horovod's elastic mode in ``gossipgrad.torch``: refused in one line that points to
``--on-failure respawn`` (it used to be an AttributeError on ``hvd.elastic``)."""

from __future__ import annotations

import pytest
import torch

import gossipgrad.torch as hvd


def test_an_elastic_script_is_refused_in_one_line_naming_respawn():
    with pytest.raises(NotImplementedError) as info:

        @hvd.elastic.run
        def train(state):  # pragma: no cover - never runs
            return state

    message = str(info.value)
    assert "\n" not in message and "gossipgrad train --on-failure respawn" in message
    model = torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for state in (hvd.elastic.TorchState, hvd.elastic.ObjectState, hvd.elastic.State):
        with pytest.raises(NotImplementedError, match="--on-failure respawn"):
            state(model, sgd, epoch=0)

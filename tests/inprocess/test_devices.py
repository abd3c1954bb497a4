"""--device: cpu, or cuda:<node-local rank mod GPUs> (CUDA faked: this runs on CPU hosts)."""

from __future__ import annotations

import logging

import pytest
import torch

import gossipgrad.runtime as runtime
from gossipgrad.comm.local import LocalWorld


@pytest.fixture
def comm():
    return LocalWorld(1).communicators()[0]


def fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int, local_rank: int) -> list:
    chosen: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(runtime, "local_rank", lambda _comm: local_rank)
    return chosen


def test_auto_picks_the_gpu_of_the_node_local_rank(monkeypatch, comm) -> None:
    chosen = fake_gpus(monkeypatch, count=4, local_rank=2)
    assert runtime.select_device("auto", comm) == torch.device("cuda", 2)
    assert chosen == [torch.device("cuda", 2)]
    assert runtime.select_device("cpu", comm) == torch.device("cpu")


def test_more_ranks_than_gpus_share_and_warn(monkeypatch, comm, caplog) -> None:
    fake_gpus(monkeypatch, count=2, local_rank=3)
    monkeypatch.setattr(logging.getLogger("gossipgrad"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="gossipgrad"):
        assert runtime.select_device("cuda", comm) == torch.device("cuda", 1)
    assert "node-local rank 3 but only 2 GPUs" in caplog.text


def test_auto_without_cuda_is_cpu_and_cuda_without_cuda_is_an_error(monkeypatch, comm) -> None:
    fake_gpus(monkeypatch, count=0, local_rank=0)
    assert runtime.select_device("auto", comm) == torch.device("cpu")
    with pytest.raises(ValueError, match="--device cuda, but torch sees no CUDA device"):
        runtime.select_device("cuda", comm)

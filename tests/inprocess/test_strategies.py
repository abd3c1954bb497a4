"""Strategy adapters in one process: the factory, DDP on one rank, the rendezvous, and the
message when Horovod is missing. Multi-rank runs are in test_strategies_mpi.py."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.comm.rendezvous import (
    ADDRESS_BYTES,
    decode_address,
    encode_address,
    same_host,
    share_address,
)
from gossipgrad.engine.protocol import WrappedOptimizer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ExchangeOptions
from gossipgrad.strategies import DistributedOptimizer, build_optimizer

from launch import gossipgrad


def _one_rank():
    return LocalWorld(1, timeout=30).communicators()[0]


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


@pytest.mark.parametrize("strategy", ["gossip", "allreduce", "allreduce-param", "local"])
def test_factory_builds_a_torch_optimizer_for_bucket_strategies(strategy):
    model = torch.nn.Linear(4, 2)
    opt = build_optimizer(_sgd(model), model, _one_rank(), strategy=strategy)
    try:
        assert isinstance(opt, WrappedOptimizer) and isinstance(opt, torch.optim.Optimizer)
        assert opt.strategy == strategy and opt.module_for_forward is model
    finally:
        opt.close()


def test_factory_names_the_choices_for_an_unknown_strategy():
    model = torch.nn.Linear(4, 2)
    with pytest.raises(
        ValueError,
        match=r"unknown strategy 'nccl' \(strategy\); choose one "
        "of: gossip, allreduce, allreduce-param, local, ps, horovod, ddp, gossip-node",
    ):
        DistributedOptimizer(_sgd(model), model, _one_rank(), strategy="nccl")


@pytest.mark.timeout(60)
def test_ddp_adapter_on_one_rank_wraps_the_model_and_steps():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    ref_opt = _sgd(reference)
    before = os.environ.get("GLOO_SOCKET_IFNAME")
    opt = build_optimizer(_sgd(model), model, _one_rank(), strategy="ddp", bucket_mb=1)
    assert os.environ.get("GLOO_SOCKET_IFNAME") == before  # loopback only while creating
    try:
        assert isinstance(opt.module_for_forward, DistributedDataParallel)
        assert opt.module_for_forward.module is model
        for _ in range(3):  # one rank: DDP must take exactly plain SGD's steps
            x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(opt.module_for_forward(x), y).backward()
            opt.step()
            ref_opt.zero_grad()
            torch.nn.functional.cross_entropy(reference(x), y).backward()
            ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p, q)
        opt.synchronize()
        assert opt.consensus_distance() == 0.0 and opt.bytes_sent_per_step() == 0.0
        assert opt.step_count == 3 and opt.state_dict()["gossipgrad"]["step"] == 3
        assert opt.layout.nbytes == sum(p.numel() * 4 for p in model.parameters())
    finally:
        opt.close()
    assert not dist.is_initialized()


def test_library_strategies_refuse_staleness_one():
    model = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match="staleness=1 does not apply to strategy='ddp'"):
        DistributedOptimizer(_sgd(model), model, _one_rank(), strategy="ddp", staleness=1)
    with pytest.raises(ValueError, match="staleness=1 does not apply to strategy='horovod'"):
        TrainConfig.from_flags(strategy="horovod", staleness=1)


def _block_horovod(monkeypatch):
    """Make `import horovod.torch` fail in this process, as on a machine without it."""
    for name in list(sys.modules):
        if name == "horovod" or name.startswith("horovod."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "horovod", None)
    monkeypatch.setitem(sys.modules, "horovod.torch", None)


def test_missing_horovod_says_how_to_install_it(monkeypatch):
    _block_horovod(monkeypatch)
    model = torch.nn.Linear(4, 2)
    with pytest.raises(RuntimeError) as err:
        DistributedOptimizer(_sgd(model), model, _one_rank(), strategy="horovod")
    msg = str(err.value)
    assert "--strategy horovod needs Horovod" in msg
    assert "bash scripts/install-horovod.sh" in msg and sys.executable in msg


@pytest.mark.timeout(120)
def test_missing_horovod_ends_the_cli_with_the_message_not_a_traceback(monkeypatch):
    from gossipgrad.cli import main

    _block_horovod(monkeypatch)
    monkeypatch.delenv("GOSSIPGRAD_MPI", raising=False)
    result = CliRunner().invoke(
        main, ["train", "--strategy", "horovod", "--no-progress", "--epochs", "1"]
    )
    assert result.exit_code == 1, result.output
    assert "bash scripts/install-horovod.sh" in result.output
    assert "Traceback" not in result.output


class _FakeHorovod:
    """Stands in for horovod.torch: records init, reports the world it was given."""

    def __init__(self, rank: int = 0, size: int = 1) -> None:
        self.inits: list = []
        self._rank, self._size = rank, size

    def is_initialized(self) -> bool:
        return bool(self.inits)

    def init(self, comm=None) -> None:
        self.inits.append(comm)

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def mpi_enabled(self) -> bool:
        return True


def test_horovodrun_gloo_is_refused_with_the_launcher_to_use(monkeypatch):
    from gossipgrad.strategies.horovod import init_horovod

    monkeypatch.setenv("HOROVOD_CONTROLLER", "gloo")
    hvd = _FakeHorovod(size=2)
    with pytest.raises(ValueError, match="horovodrun --gloo.*launch with mpiexec -n N"):
        init_horovod(hvd, _one_rank(), 1 << 20)
    assert hvd.inits == []


def test_horovod_world_must_match_the_communicator(monkeypatch):
    from gossipgrad.strategies.horovod import init_horovod

    monkeypatch.delenv("HOROVOD_CONTROLLER", raising=False)
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "")  # recorded, so restored afterwards
    monkeypatch.delenv("HOROVOD_FUSION_THRESHOLD")
    hvd = _FakeHorovod()
    assert init_horovod(hvd, _one_rank(), 3 << 20) is True  # we initialised it
    assert hvd.inits == [None]  # a one-rank world with no MPI: Horovod's own singleton
    assert os.environ["HOROVOD_FUSION_THRESHOLD"] == str(3 << 20)  # from --bucket-mb
    assert init_horovod(hvd, _one_rank(), 1 << 20) is False  # already up: not ours to close
    assert os.environ["HOROVOD_FUSION_THRESHOLD"] == str(3 << 20)  # the environment wins
    with pytest.raises(RuntimeError, match="Horovod sees rank 0 of 2, gossipgrad rank 0 of 1"):
        init_horovod(_FakeHorovod(size=2), _one_rank(), 1 << 20)


@pytest.mark.horovod
@pytest.mark.timeout(180)
def test_horovod_on_one_rank_without_a_launcher():
    pytest.importorskip("horovod.torch", reason="build Horovod: bash scripts/install-horovod.sh")
    out = gossipgrad(
        0, ["train", "--strategy", "horovod", "--no-progress", "--epochs", "2"], timeout=150
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"strategy": "horovod"' in out.stdout and '"size": 1' in out.stdout


# -- rendezvous -------------------------------------------------------------------------
def test_address_round_trips_through_a_fixed_size_buffer():
    buf = encode_address("127.0.0.1", 29500)
    assert buf.dtype == np.uint8 and buf.shape == (ADDRESS_BYTES,)
    assert decode_address(buf) == ("127.0.0.1", 29500)
    assert decode_address(encode_address("fe80::1", 80)) == ("fe80::1", 80)


@pytest.mark.parametrize("host,port", [("", 1), ("h", 0), ("h", 70000), ("x" * 300, 1)])
def test_bad_addresses_are_refused(host, port):
    with pytest.raises(ValueError):
        encode_address(host, port)


def test_garbage_is_not_an_address():
    with pytest.raises(ValueError, match="not a host:port address"):
        decode_address(np.frombuffer(b"no-port".ljust(ADDRESS_BYTES, b"\0"), dtype=np.uint8))


@pytest.mark.timeout(30)
def test_rank_zero_address_reaches_every_rank_and_threads_share_a_host():
    def body(comm):
        mine = ("10.213.0.1", 4000 + comm.rank) if comm.rank == 0 else None
        return share_address(comm, mine), same_host(comm)

    assert run_ranks(4, body, timeout=20) == [(("10.213.0.1", 4000), True)] * 4


# -- the libraries' own compression (--wire with horovod and ddp) ---------------------------
@pytest.mark.parametrize("wire, hook", [("fp32", None), ("bf16", "bf16_compress_hook")])
def test_ddp_registers_its_own_compression_hook(wire, hook):
    model = torch.nn.Linear(3, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = build_optimizer(sgd, model, _one_rank(), strategy="ddp", wire=wire)
    try:
        assert opt.ddp._get_ddp_logging_data().get("comm_hook") == hook
    finally:
        opt.close()


class _CompressingHorovod(_FakeHorovod):
    """Records the compression its DistributedOptimizer is given."""

    class Compression:
        none, fp16 = object(), object()

    def broadcast_parameters(self, state, root_rank):
        pass

    def DistributedOptimizer(self, optimizer, named_parameters, compression):  # noqa: N802
        self.compression = compression
        return optimizer


@pytest.mark.parametrize("wire, name", [("fp32", "none"), ("fp16", "fp16")])
def test_horovod_gets_its_fp16_compression(monkeypatch, wire, name):
    from gossipgrad.strategies import horovod

    fake = _CompressingHorovod()
    monkeypatch.setattr(horovod, "import_horovod", lambda: fake)
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "1")
    model = torch.nn.Linear(3, 2)
    options = ExchangeOptions(strategy="horovod", wire=wire)
    horovod.HorovodLibraryOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model, _one_rank(), options
    )
    assert fake.compression is getattr(fake.Compression, name)

"""Horovod's face on gossipgrad: a Horovod PyTorch script runs with gossip by changing one
line, ``import horovod.torch as hvd`` to ``import gossipgrad.torch as hvd``::

    import gossipgrad.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    for x, y in DataLoader(dataset, batch_size=32, sampler=sampler):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()                     # gossip: gradients mixed with one peer
    loss = hvd.allreduce(torch.tensor(loss), name="loss")   # averaged over ranks

Launch as Horovod's MPI mode would be: ``mpiexec -n 4 python train.py``. What it runs:
:mod:`gossipgrad.torch.optimizer` (gossip, mixing gradients under Adam and its kin and
parameters under SGD, unless ``GOSSIPGRAD_STRATEGY``, ``GOSSIPGRAD_MIX`` or a keyword says
otherwise); what is refused and why: the same module and
:mod:`gossipgrad.torch.ops`; what happens at exit: :mod:`gossipgrad.torch.state`.
"""

from __future__ import annotations

from typing import Any

from gossipgrad import runtime
from gossipgrad.torch import elastic
from gossipgrad.torch.compression import Compression
from gossipgrad.torch.ops import (
    Op,
    ProcessSet,
    add_process_set,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
    global_process_set,
    join_without_optimizer,
    poll,
    synchronize,
)
from gossipgrad.torch.optimizer import DistributedOptimizer, HorovodOptimizer
from gossipgrad.torch.state import communicator, init, is_initialized, live_optimizers, shutdown

Average, Sum, Adasum, Min, Max, Product = (
    Op.AVERAGE,
    Op.SUM,
    Op.ADASUM,
    Op.MIN,
    Op.MAX,
    Op.PRODUCT,
)


def rank() -> int:
    """This rank, 0 .. size - 1."""
    return communicator().rank


def size() -> int:
    """The number of ranks."""
    return communicator().size


def local_rank() -> int:
    """This rank's index among the ranks on its node."""
    return runtime.local_rank(communicator())


def local_size() -> int:
    """The number of ranks on this node."""
    comm = communicator()
    return runtime.host_share(comm)[1] if comm.size > 1 else 1


def join(device: int = -1) -> int:
    """This rank has no more data: serve the other ranks' steps until every rank has
    joined; returns the rank that joined last. Collective in effect."""
    optimizers = live_optimizers()
    if not optimizers:
        return join_without_optimizer()
    return [opt.join() for opt in optimizers][-1]


def mpi_threads_supported() -> bool:
    return bool(getattr(communicator(), "thread_multiple", True))


def mpi_enabled() -> bool:
    return runtime.launched_by_mpi()


def mpi_built() -> bool:
    return True


def _no() -> bool:
    return False


gloo_enabled = gloo_built = nccl_built = ddl_built = ccl_built = cuda_built = rocm_built = _no


def start_timeline(*_: Any, **__: Any) -> None:
    raise ValueError(
        "Horovod's timeline is not available in gossipgrad.torch; "
        "gossipgrad train --metrics-out FILE records per-step timings"
    )


stop_timeline = start_timeline

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "DistributedOptimizer",
    "HorovodOptimizer",
    "Max",
    "Min",
    "Op",
    "ProcessSet",
    "Product",
    "Sum",
    "add_process_set",
    "allgather",
    "allgather_async",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "barrier",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "broadcast_object",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "elastic",
    "global_process_set",
    "init",
    "is_initialized",
    "join",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "poll",
    "rank",
    "shutdown",
    "size",
    "synchronize",
]

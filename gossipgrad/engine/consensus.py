"""Whole-model operations across ranks: broadcast, verification, global average, drift.

Each function takes the communicator as an argument and modifies the model in place where
its name ends in ``_``. Parameters and floating-point buffers (e.g. BatchNorm running
statistics) are included; integer buffers (``num_batches_tracked``) are left alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_


def model_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters then floating buffers, in a fixed order identical on every rank."""
    tensors = [p.data for p in model.parameters()]
    tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors])


def _unflat_(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    off = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[off : off + n].view_as(t).to(t.dtype))
        off += n


def broadcast_parameters_(model: torch.nn.Module, comm: Communicator, root: int = 0) -> None:
    """Give every rank ``root``'s parameters and buffers (all of them, integer ones too)."""
    if comm.size == 1:
        return
    for t in list(model.parameters()) + list(model.buffers()):
        host = t.detach().to("cpu").contiguous()
        comm.bcast_(host, root)
        t.data.copy_(host)


def fingerprint(values: bytes | torch.Tensor) -> int:
    """A 63-bit hash of raw bytes or of a tensor's bytes."""
    if isinstance(values, torch.Tensor):
        return tensors_fingerprint([values])
    return int.from_bytes(hashlib.sha256(values).digest()[:8], "little") >> 1


def tensors_fingerprint(tensors: Iterable[torch.Tensor]) -> int:
    """A 63-bit hash of the tensors' raw bytes, in order, one tensor at a time: a host
    tensor is hashed where it lies (no copy), a device tensor through one host copy of
    itself, so the memory it needs is the largest tensor's, never the model's."""
    h = hashlib.sha256()
    for t in tensors:
        host = t.detach().to("cpu").contiguous().reshape(-1)
        h.update(host.view(torch.uint8).numpy())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def agree(comm: Communicator, value: int) -> bool:
    """True when every rank passed the same integer (one MIN and one MAX allreduce)."""
    lo = allreduce_(comm, np.array([value], dtype=np.int64), ReduceOp.MIN)[0]
    hi = allreduce_(comm, np.array([value], dtype=np.int64), ReduceOp.MAX)[0]
    return bool(lo == hi == value) if comm.size > 1 else True


def verify_identical(
    model: torch.nn.Module, comm: Communicator, when: str = "after the broadcast from rank 0"
) -> None:
    """Raise unless every rank holds bit-identical parameters and buffers (hashed tensor
    by tensor: a flat copy of the model would double its memory while the job starts)."""
    mine = tensors_fingerprint(model_tensors(model))
    if not agree(comm, mine):
        raise RuntimeError(
            f"rank {comm.rank}: parameters differ between ranks {when}; "
            "this is a bug, please report it"
        )


def average_parameters_(model: torch.nn.Module, comm: Communicator) -> None:
    """Replace every rank's parameters and floating buffers by their mean over ranks."""
    if comm.size == 1:
        return
    tensors = model_tensors(model)
    flat = _flat(tensors)
    allreduce_(comm, flat, what="consensus average").div_(comm.size)
    _unflat_(tensors, flat)


def average_buffers_(model: torch.nn.Module, comm: Communicator) -> None:
    """Replace every rank's floating buffers (e.g. BatchNorm statistics) by their mean."""
    tensors = [b for b in model.buffers() if b.is_floating_point()]
    if comm.size == 1 or not tensors:
        return
    flat = _flat(tensors)
    allreduce_(comm, flat).div_(comm.size)
    _unflat_(tensors, flat)


def consensus_distance(model: torch.nn.Module, comm: Communicator) -> float:
    """Mean over ranks of ||x_i - x̄||² / ||x̄||² for the parameters x (0 when identical)."""
    if comm.size == 1:
        return 0.0
    x = _flat([p.data for p in model.parameters()])
    mean = allreduce_(comm, x.clone(), what="consensus distance").div_(comm.size)
    dist = torch.tensor([float(torch.sum((x - mean) ** 2))], dtype=torch.float64)
    allreduce_(comm, dist, what="consensus distance").div_(comm.size)
    denom = float(torch.sum(mean**2))
    return float(dist[0]) / denom if denom > 0 else float(dist[0])

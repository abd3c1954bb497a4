"""Horovod's tensor collectives, on gossipgrad's communicator: ``allreduce`` (averaging by
default), ``allgather``, ``broadcast``, ``broadcast_object``, ``barrier``; ``*_async``
variants return a handle that :func:`synchronize` turns into the result (they run at once).

Raw buffers only. ``broadcast_object`` is the one place an object crosses: the root
serialises it with ``torch.save`` and every other rank reads it back with
``torch.load(weights_only=True)``, which rebuilds tensors, numbers, strings, lists,
tuples, dicts and ``None`` and nothing else (Horovod's ``broadcast_object`` cloudpickles
any object; here anything beyond that set is refused on the root, on every rank alike).
Every operation has the communicator's deadline and names itself when it times out.
"""

from __future__ import annotations

import enum
import io
import itertools
import time
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_ as _allreduce_
from gossipgrad.comm.collectives import wait_collective
from gossipgrad.torch.compression import Compression
from gossipgrad.torch.state import communicator


class Op(enum.Enum):
    """Horovod's reduction operations (``hvd.Average`` ...)."""

    AVERAGE = "average"
    SUM = "sum"
    ADASUM = "adasum"
    MIN = "min"
    MAX = "max"
    PRODUCT = "product"


_REDUCE = {Op.SUM: ReduceOp.SUM, Op.AVERAGE: ReduceOp.SUM, Op.MIN: ReduceOp.MIN}
_REDUCE[Op.MAX] = ReduceOp.MAX


class ProcessSet:
    """Horovod's process set; only the global one (every rank) exists here."""

    def __repr__(self) -> str:
        return "global_process_set"


global_process_set = ProcessSet()


def add_process_set(ranks: Any) -> ProcessSet:
    raise ValueError(
        "process sets are not supported by gossipgrad.torch: every operation spans all "
        "ranks; launch only the ranks that should train together"
    )


def check_process_set(process_set: Any) -> None:
    if process_set is not global_process_set:
        add_process_set(process_set)


def _op(average: bool | None, op: Op | None) -> Op:
    if average is not None and op is not None:
        raise ValueError("allreduce: pass op= or the deprecated average=, not both")
    chosen = op or (Op.SUM if average is False else Op.AVERAGE)
    if chosen not in _REDUCE:
        what = "Adasum" if chosen is Op.ADASUM else "Product"
        raise ValueError(
            f"op=hvd.{what} is not supported by gossipgrad.torch; use hvd.Average "
            "(the default), Sum, Min or Max"
        )
    return chosen


def _host(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy MPI can reduce (half precisions as float32)."""
    t = tensor.detach().to("cpu")
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    if t.dtype is torch.bool:
        raise ValueError("allreduce of a bool tensor: convert it to an integer type first")
    return t.contiguous().clone()


def allreduce_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: Op | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = global_process_set,
    compression: Any = Compression.none,
) -> torch.Tensor:
    """In place: ``tensor`` <- its reduction over ranks (default: the average). Collective."""
    check_process_set(process_set)
    chosen, comm = _op(average, op), communicator()
    sent, ctx = compression.compress(tensor)
    buf = _host(sent)
    if prescale_factor != 1.0:
        buf.mul_(prescale_factor)
    _allreduce_(comm, buf, _REDUCE[chosen], what=f"allreduce {name or ''}".strip())
    if chosen is Op.AVERAGE:
        buf = (
            buf / comm.size
            if buf.is_floating_point()
            else buf.div(comm.size, rounding_mode="floor")
        )
    if postscale_factor != 1.0:
        buf.mul_(postscale_factor)
    out = compression.decompress(buf.to(sent.dtype), ctx)
    tensor.copy_(out.to(tensor.device))
    return tensor


def allreduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """A new tensor: ``tensor``'s reduction over ranks (default: the average)."""
    return allreduce_(tensor.detach().clone(), *args, **kwargs)


def allgather(
    tensor: torch.Tensor, name: str | None = None, process_set: Any = global_process_set
) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along dimension 0, in rank order; the first
    dimension may differ between ranks (the rest must not)."""
    check_process_set(process_set)
    comm = communicator()
    t = _host(tensor if tensor.dim() else tensor.reshape(1))
    rows = np.zeros(comm.size, dtype=np.int64)
    mine = np.array([t.shape[0]], dtype=np.int64)
    wait_collective(comm, comm.iallgather(mine, rows), f"allgather {name or ''} sizes".strip())
    most = int(rows.max())
    padded = torch.zeros((most, *t.shape[1:]), dtype=t.dtype)
    padded[: t.shape[0]] = t
    out = torch.empty((comm.size * most, *t.shape[1:]), dtype=t.dtype)
    wait_collective(comm, comm.iallgather(padded, out), f"allgather {name or ''}".strip())
    parts = [out[r * most : r * most + int(rows[r])] for r in range(comm.size)]
    return torch.cat(parts).to(tensor.dtype).to(tensor.device)


def broadcast_(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: Any = global_process_set,
) -> torch.Tensor:
    """In place: ``tensor`` <- ``root_rank``'s (its raw bytes: any dtype). Collective."""
    check_process_set(process_set)
    comm = communicator()
    if comm.size > 1:
        host = tensor.detach().to("cpu").contiguous().clone()
        comm.bcast_(host.reshape(-1).view(torch.uint8), root_rank)
        tensor.data.copy_(host.to(tensor.device))
    return tensor


def broadcast(
    tensor: torch.Tensor,
    root_rank: int,
    name: str | None = None,
    process_set: Any = global_process_set,
) -> torch.Tensor:
    """A new tensor holding ``root_rank``'s ``tensor``. Collective."""
    return broadcast_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_parameters(
    params: Any, root_rank: int, process_set: Any = global_process_set
) -> None:
    """Give every rank ``root_rank``'s values, in place: ``params`` is a ``state_dict()``
    (broadcast in name order, as Horovod does) or a sequence of ``(name, tensor)`` or of
    tensors (``named_parameters()``, ``parameters()``: in their order). Collective."""
    check_process_set(process_set)
    if hasattr(params, "items"):
        tensors = [t for _, t in sorted(params.items(), key=lambda kv: kv[0])]
    else:
        tensors = [p[1] if isinstance(p, tuple) else p for p in params]
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"broadcast_parameters: expected tensors, got {type(t).__name__}")
        broadcast_(t, root_rank)


def broadcast_object(
    obj: Any, root_rank: int = 0, name: str | None = None, process_set: Any = global_process_set
) -> Any:
    """``root_rank``'s ``obj`` on every rank (see the module docstring for what may
    cross). Collective."""
    check_process_set(process_set)
    comm = communicator()
    if comm.size == 1:
        return obj
    length = np.zeros(1, dtype=np.int64)
    payload = b""
    if comm.rank == root_rank:
        payload, why = _serialise(obj)
        length[0] = len(payload) if why is None else -1
    comm.bcast_(length, root_rank)
    if length[0] < 0:
        raise ValueError(
            f"rank {comm.rank}: broadcast_object{f'({name!r})' if name else ''}: rank "
            f"{root_rank}'s object holds something torch.load(weights_only=True) does not "
            "rebuild (only tensors, numbers, strings, lists, tuples, dicts and None cross "
            "between ranks here); send its state_dict() or plain values instead"
        )
    buf = (
        np.frombuffer(payload, dtype=np.uint8).copy()
        if comm.rank == root_rank
        else np.zeros(int(length[0]), dtype=np.uint8)
    )
    comm.bcast_(buf, root_rank)
    if comm.rank == root_rank:
        return obj
    return torch.load(io.BytesIO(buf.tobytes()), weights_only=True)


def _serialise(obj: Any) -> tuple[bytes, str | None]:
    """``obj`` as bytes, and why it may not cross (None: it may)."""
    out = io.BytesIO()
    try:
        torch.save(obj, out)
        torch.load(io.BytesIO(out.getvalue()), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - what cannot be saved or the loader refuses
        return b"", str(exc)
    return out.getvalue(), None


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    """Give every rank ``root_rank``'s optimizer state (and settings): its
    ``state_dict()`` through :func:`broadcast_object`, loaded on every rank (the root's
    too, so the next step checks, on every rank, that they all start alike)."""
    state = broadcast_object(optimizer.state_dict(), root_rank, "optimizer state")
    optimizer.load_state_dict(state)


def barrier(process_set: Any = global_process_set) -> None:
    """Every rank reaches this point before any leaves it (with the deadline)."""
    check_process_set(process_set)
    _allreduce_(communicator(), np.zeros(1), what="barrier")


def join_without_optimizer() -> int:
    """``hvd.join()`` with no optimizer to serve: a barrier; returns the rank whose call
    came last by the wall clock."""
    comm = communicator()
    key = np.array([int(time.time() * 1e6) * comm.size + comm.rank], dtype=np.int64)
    _allreduce_(comm, key, ReduceOp.MAX, what="join")
    return int(key[0] % comm.size)


# -- asynchronous variants: run now, handle to the result ------------------------------
_HANDLES: dict[int, Any] = {}
_NEXT = itertools.count(1)


def _handle(result: Any) -> int:
    h = next(_NEXT)
    _HANDLES[h] = result
    return h


def allreduce_async(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return _handle(allreduce(tensor, *args, **kwargs))


def allreduce_async_(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return _handle(allreduce_(tensor, *args, **kwargs))


def allgather_async(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return _handle(allgather(tensor, *args, **kwargs))


def broadcast_async(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return _handle(broadcast(tensor, *args, **kwargs))


def broadcast_async_(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return _handle(broadcast_(tensor, *args, **kwargs))


def poll(handle: int) -> bool:
    """True: every asynchronous operation here has already completed."""
    return handle in _HANDLES


def synchronize(handle: int) -> Any:
    """The result of an asynchronous operation (``hvd.synchronize(handle)``)."""
    if handle not in _HANDLES:
        raise ValueError(f"synchronize({handle}): no such handle (already synchronized?)")
    return _HANDLES.pop(handle)

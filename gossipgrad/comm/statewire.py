"""A rank's state (nested dicts of tensors and plain values) sent to one other rank as raw
bytes: a JSON layout and one byte buffer, never a pickle.

What a replacement receives from a live rank (``--on-failure respawn``): the model's and the
optimizer's state dicts, a codec's residuals, counters. :func:`flatten` splits a state into
a JSON-able layout and its tensors; :func:`unflatten` puts them back (same dtypes, shapes and
key types: a torch optimizer's state is keyed by ints). :func:`send_state` and
:func:`recv_state` move one state with two messages each way of raw ``uint8``: the layout's
length and the data's, the layout itself (JSON text), and the data (every tensor's bytes, in
order, in pieces of at most :data:`PIECE` bytes).

    >>> import torch
    >>> layout, tensors = flatten({"w": torch.ones(2), "state": {0: {"step": 3}}})
    >>> back = unflatten(layout, tensors)
    >>> back["w"].tolist(), back["state"][0]["step"]
    ([1.0, 1.0], 3)
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, Tag, WaitContext

PIECE = 1 << 30
"""The largest message of a state's data (MPI counts are 32-bit ints)."""

_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
_DTYPES.update(
    {str(d): d for d in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)}
)
_DTYPES[str(torch.bool)] = torch.bool


def flatten(state: Any) -> tuple[Any, list[torch.Tensor]]:
    """(layout, tensors): the layout is JSON-able and names each tensor by its index.

    Dicts keep their key types (str, int, float, bool, None); lists, tuples, numpy arrays
    (as tensors), ints, floats, strings, bools and None are kept. Anything else raises
    TypeError naming where it is."""
    tensors: list[torch.Tensor] = []

    def walk(x: Any, where: str) -> Any:
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if str(t.dtype) not in _DTYPES:
                raise TypeError(f"{where}: a {t.dtype} tensor cannot be sent")
            tensors.append(t.to("cpu").contiguous())
            return {"t": len(tensors) - 1, "dtype": str(t.dtype), "shape": list(t.shape)}
        if isinstance(x, np.ndarray):
            return {"a": walk(torch.from_numpy(np.ascontiguousarray(x)), where)}
        if isinstance(x, dict):
            return {"d": [[k, walk(v, f"{where}.{k}")] for k, v in x.items()]}
        if isinstance(x, list | tuple):
            items = [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
            return {"l" if isinstance(x, list) else "u": items}
        if isinstance(x, bool | int | str) or x is None:
            return {"v": x}
        if isinstance(x, float):
            return {"f": repr(x)} if not math.isfinite(x) else {"v": x}
        if isinstance(x, np.generic):
            return {"v": x.item()}
        raise TypeError(f"{where}: a {type(x).__name__} cannot be sent as state")

    return walk(state, "state"), tensors


def unflatten(layout: Any, tensors: list[torch.Tensor]) -> Any:
    """The state :func:`flatten` split into ``layout`` and ``tensors``."""
    if "t" in layout:
        return tensors[layout["t"]]
    if "a" in layout:
        return unflatten(layout["a"], tensors).numpy()
    if "d" in layout:
        return {_key(k): unflatten(v, tensors) for k, v in layout["d"]}
    if "l" in layout:
        return [unflatten(v, tensors) for v in layout["l"]]
    if "u" in layout:
        return tuple(unflatten(v, tensors) for v in layout["u"])
    if "f" in layout:
        return float(layout["f"])
    return layout["v"]


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _specs(layout: Any) -> list[tuple[int, str, list[int]]]:
    """(index, dtype, shape) of every tensor in ``layout``, in index order."""
    found: list[tuple[int, str, list[int]]] = []

    def walk(x: Any) -> None:
        if "t" in x:
            found.append((x["t"], x["dtype"], x["shape"]))
        elif "a" in x:
            walk(x["a"])
        elif "d" in x:
            for _, v in x["d"]:
                walk(v)
        elif "l" in x or "u" in x:
            for v in x.get("l", x.get("u")):
                walk(v)

    walk(layout)
    return sorted(found)


def _raw(t: torch.Tensor) -> np.ndarray:
    return t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)


def send_state(comm: Communicator, state: Any, dst: int, step: int | None = None) -> int:
    """Send ``state`` to rank ``dst`` (which calls :func:`recv_state`); return the bytes
    sent. Waits until ``dst`` has it all (each wait with the communicator's deadline)."""
    layout, tensors = flatten(state)
    text = np.frombuffer(json.dumps(layout).encode(), dtype=np.uint8).copy()
    data = np.concatenate([_raw(t) for t in tensors]) if tensors else np.zeros(0, np.uint8)
    sizes = np.array([len(text), len(data)], dtype=np.int64)
    ctx = WaitContext("received nothing", dst, Tag.RESPAWN_META, step)
    reqs = [
        comm.isend(sizes, dst, Tag.RESPAWN_META, ctx),
        comm.isend(text, dst, Tag.RESPAWN_META, ctx),
    ]
    dctx = WaitContext("received nothing", dst, Tag.RESPAWN_DATA, step)
    reqs += [
        comm.isend(data[i : i + PIECE], dst, Tag.RESPAWN_DATA, dctx)
        for i in range(0, len(data), PIECE)
    ]
    for req in reqs:
        req.wait(comm.timeout)
    return int(sizes.sum() + sizes.nbytes)


def recv_state(comm: Communicator, src: int, step: int | None = None) -> tuple[Any, int]:
    """The state rank ``src`` sends with :func:`send_state`, and its size in bytes."""
    sizes = np.zeros(2, dtype=np.int64)
    ctx = WaitContext("sent nothing", src, Tag.RESPAWN_META, step)
    comm.irecv(sizes, src, Tag.RESPAWN_META, ctx).wait(comm.timeout)
    text = np.zeros(int(sizes[0]), dtype=np.uint8)
    comm.irecv(text, src, Tag.RESPAWN_META, ctx).wait(comm.timeout)
    data = np.zeros(int(sizes[1]), dtype=np.uint8)
    dctx = WaitContext("sent nothing", src, Tag.RESPAWN_DATA, step)
    reqs = [
        comm.irecv(data[i : i + PIECE], src, Tag.RESPAWN_DATA, dctx)
        for i in range(0, len(data), PIECE)
    ]
    for req in reqs:
        req.wait(comm.timeout)
    layout = json.loads(text.tobytes().decode())
    tensors, at = [], 0
    for _, dtype, shape in _specs(layout):
        t = torch.empty(shape, dtype=_DTYPES[dtype])
        n = t.numel() * t.element_size()
        if n:
            t.reshape(-1).view(torch.uint8).copy_(torch.from_numpy(data[at : at + n]))
        tensors.append(t)
        at += n
    if at != len(data):
        raise ValueError(
            f"rank {comm.rank}: state from rank {src} holds {len(data) - at} extra bytes"
        )
    return unflatten(layout, tensors), int(sizes.sum() + sizes.nbytes)

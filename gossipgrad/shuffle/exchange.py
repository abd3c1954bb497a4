"""The wire protocol of one shuffle round: raw buffers only, every wait with a deadline.

A rank sends to ``dst`` (and receives the same from ``src``):

1. ``SHUFFLE_META``: int64 ``[k, 3]`` = (sample id, label, payload bytes) per sample;
2. ``SHUFFLE_DATA`` (not for the index kind): one uint8 buffer, the k payloads back to back
   (tensor kind: the samples' raw bytes; bytes kind: the blobs concatenated). For the bytes
   kind the receiver sizes this buffer from the lengths in META, so META is waited first.

Nothing is pickled. At most one round is in flight on the shuffle's own communicator and
messages between two ranks with one tag arrive in order, so round r's messages cannot match
round r+1's receives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import (
    CommError,
    CommTimeout,
    Communicator,
    Request,
    Tag,
    WaitContext,
)
from gossipgrad.shuffle.plan import RoundPlan
from gossipgrad.shuffle.store import PayloadKind, Samples

__all__ = ["ShuffleCancelled", "exchange_round"]

_PAUSE_S = 2e-3  # between polls of a waiting round (it looks at the cancel flag each time)
_ABANDONED: list[Any] = []  # requests (and buffers) of failed rounds, never freed under MPI


class ShuffleCancelled(RuntimeError):
    """The round was abandoned by ``stop(cancel=True)`` (the run is failing anyway)."""


# Over 60 lines on purpose: posting, the deadline and cancellation of one round share its
# requests.
def exchange_round(
    comm: Communicator,
    kind: PayloadKind,
    sample_shape: tuple[int, ...],
    dtype: torch.dtype | None,
    plan: RoundPlan,
    outgoing: Samples,
    timeout: float,
    cancelled: Callable[[], bool] = lambda: False,
) -> Samples:
    """Send ``outgoing`` to ``plan.dst`` and return the same number of samples from ``plan.src``.

    Raises CommTimeout naming the peer, the round (as the step) and the tag when a message
    does not arrive within ``timeout`` seconds of the round's start, and ShuffleCancelled
    soon after ``cancelled()`` turns true. ``outgoing`` is not modified.
    """
    deadline = time.monotonic() + timeout
    k = len(outgoing)
    meta_out = np.empty((k, 3), dtype=np.int64)
    meta_out[:, 0], meta_out[:, 1] = outgoing.ids, outgoing.labels
    data_out = _to_wire(kind, outgoing)
    if kind is PayloadKind.BYTES:
        meta_out[:, 2] = [len(b) for b in outgoing.payload]
    elif kind is PayloadKind.TENSOR:
        meta_out[:, 2] = data_out.numel() // max(k, 1)
    else:
        meta_out[:, 2] = 0

    src, dst, index = plan.src, plan.dst, plan.index
    pending: list[tuple[Request, WaitContext]] = []

    def post_recv(buf: Any, tag: Tag) -> tuple[Request, WaitContext]:
        c = WaitContext("sent nothing", src, int(tag), index)
        return comm.irecv(buf, src, int(tag), c), c

    def post_send(buf: Any, tag: Tag) -> None:
        c = WaitContext("received nothing", dst, int(tag), index)
        pending.append((comm.isend(buf, dst, int(tag), c), c))

    meta_in = np.empty((k, 3), dtype=np.int64)
    recv_meta = post_recv(meta_in, Tag.SHUFFLE_META)
    data_in = None
    if kind is PayloadKind.TENSOR:
        nbytes = k * math.prod(sample_shape) * torch.empty(0, dtype=dtype).element_size()
        data_in = torch.empty(nbytes, dtype=torch.uint8)
        pending.append(post_recv(data_in, Tag.SHUFFLE_DATA))
    post_send(meta_out, Tag.SHUFFLE_META)
    if data_out is not None:
        post_send(data_out, Tag.SHUFFLE_DATA)
    try:
        _wait(comm, *recv_meta, deadline, timeout, cancelled)
        if kind is PayloadKind.TENSOR and k and np.any(meta_in[:, 2] != nbytes // k):
            raise CommError(
                f"rank {comm.rank}, round {index}: rank {src} sends samples of "
                f"{int(meta_in[0, 2])} bytes, this rank holds {nbytes // k}-byte "
                "samples; every rank needs the same sample shape and dtype"
            )
        if kind is PayloadKind.BYTES:
            data_in = torch.empty(int(meta_in[:, 2].sum()), dtype=torch.uint8)
            pending.append(post_recv(data_in, Tag.SHUFFLE_DATA))
        for req, c in pending:
            _wait(comm, req, c, deadline, timeout, cancelled)
    except BaseException:
        # requests still posted may read or write their buffers later: keep them alive
        _ABANDONED.extend([recv_meta, *pending, (meta_in, data_in, meta_out, data_out)])
        raise
    return Samples(
        meta_in[:, 0].copy(),
        meta_in[:, 1].copy(),
        _from_wire(kind, data_in, meta_in[:, 2], sample_shape, dtype),
    )


def _to_wire(kind: PayloadKind, samples: Samples) -> torch.Tensor | None:
    if kind is PayloadKind.TENSOR:
        return samples.payload.contiguous().reshape(-1).view(torch.uint8)
    if kind is PayloadKind.BYTES:
        flat = b"".join(samples.payload)
        return (
            torch.frombuffer(bytearray(flat), dtype=torch.uint8)
            if flat
            else torch.zeros(0, dtype=torch.uint8)
        )
    return None


def _from_wire(
    kind: PayloadKind,
    data: torch.Tensor | None,
    lengths: np.ndarray,
    shape: tuple[int, ...],
    dtype: torch.dtype | None,
) -> Any:
    if kind is PayloadKind.TENSOR:
        return data.view(dtype).reshape(len(lengths), *shape)
    if kind is PayloadKind.BYTES:
        raw = data.numpy().tobytes()
        ends = np.cumsum(lengths).tolist()
        return [raw[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]
    return None


def _wait(
    comm: Communicator,
    req: Request,
    ctx: WaitContext,
    deadline: float,
    timeout: float,
    cancelled: Callable[[], bool],
) -> None:
    """Wait for ``req`` until ``deadline``, looking at ``cancelled()`` between polls.

    Polls lazily, every :data:`_PAUSE_S`: a round has whole training steps to finish, and
    every wake-up of this thread takes the GIL (and, on a full node, a core) from training.
    """
    while True:
        for _ in range(comm.policy.burst):  # MPI moves data only inside calls: a burst per poll
            if req.test():
                return
        if cancelled():
            raise ShuffleCancelled(f"rank {comm.rank}: shuffle round cancelled")
        if time.monotonic() >= deadline:
            raise CommTimeout(ctx.describe(comm.rank, timeout))
        time.sleep(_PAUSE_S)

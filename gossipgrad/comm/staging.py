"""Moving device tensors through MPI: directly when the library is CUDA-aware, else via
pinned host buffers. On CPU tensors nothing is staged.
"""

from __future__ import annotations

from typing import Any

import torch


class Stager:
    """Decides, per buffer, whether it must be copied to host memory for the transport.

    Args:
        cuda_aware: the MPI library takes device pointers (see ``comm.mpi.cuda_aware``).
        force: stage every buffer, also host ones (tests exercise the staging path on CPU).
    """

    def __init__(self, cuda_aware: bool, force: bool = False) -> None:
        self.cuda_aware = cuda_aware
        self.force = force

    def staging(self, buf: torch.Tensor) -> bool:
        return self.force or (buf.is_cuda and not self.cuda_aware)

    def ready(self, buf: torch.Tensor) -> None:
        """Make ``buf`` safe to hand to MPI: a CUDA tensor that goes to MPI directly must be
        complete when MPI reads it, so the current stream (which produced it) is synchronized.
        Staged tensors need nothing (:meth:`outgoing` copies synchronously); host tensors
        neither. Over-waits for kernels queued after ``buf``'s producer; always correct."""
        if buf.is_cuda and not self.staging(buf):
            torch.cuda.current_stream(buf.device).synchronize()

    def empty_like(self, buf: torch.Tensor) -> torch.Tensor:
        """A receive buffer the transport can write into."""
        if self.staging(buf):
            pin = buf.is_cuda
            return torch.empty(buf.numel(), dtype=buf.dtype, pin_memory=pin)
        return torch.empty_like(buf)

    def outgoing(self, buf: torch.Tensor, cache: dict[int, Any], index: int) -> torch.Tensor:
        """A host (or separate) copy of ``buf`` that stays valid while the send is in flight."""
        out = cache.get(index)
        if out is None or out.numel() != buf.numel():
            out = cache[index] = self.empty_like(buf)
        out.copy_(buf, non_blocking=False)
        return out

    def incoming(self, recv: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """``recv`` moved to ``like``'s device (a no-op when it is already there)."""
        if recv.device == like.device:
            return recv
        return recv.to(like.device, non_blocking=True)

"""Horovod's ``Compression``: a small class with ``compress``/``decompress`` per kind.

For tensors passed to ``hvd.allreduce(..., compression=...)`` they act as in Horovod
(``fp16`` casts floating tensors to half precision for the reduction). For the optimizer
they choose the wire codec of every gradient bucket (``--wire``): ``none`` is ``fp32``,
``fp16`` is the ``fp16`` codec where this gossipgrad has one (``"fp16" in CODECS``), and is
refused with one line where it has not.

    >>> import torch
    >>> half, ctx = Compression.fp16.compress(torch.ones(2))
    >>> half.dtype, Compression.fp16.decompress(half, ctx).dtype
    (torch.float16, torch.float32)
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.registry import CODECS


class NoneCompressor:
    """No compression (Horovod's ``Compression.none``); buckets travel as ``fp32``."""

    wire = "fp32"

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor:
    """Half precision on the wire (Horovod's ``Compression.fp16``)."""

    wire = "fp16"

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor.to(ctx) if ctx is not None and ctx.is_floating_point else tensor


class Compression:
    """``Compression.none`` and ``Compression.fp16``, as in Horovod."""

    none = NoneCompressor
    fp16 = FP16Compressor


def wire_of(compression: Any) -> str:
    """The wire codec that ``compression`` means for gradient buckets; ValueError naming
    what to use instead when this gossipgrad has no such codec."""
    wire = getattr(compression, "wire", None)
    if wire is None:
        raise ValueError(
            f"compression={compression!r} is not one of hvd.Compression.none or "
            "hvd.Compression.fp16; pass one of those"
        )
    if wire not in CODECS:
        raise ValueError(
            f"compression=hvd.Compression.{'fp16' if wire == 'fp16' else wire} needs the "
            f"{wire!r} wire codec, which this gossipgrad does not have (codecs: "
            f"{', '.join(CODECS.names())}); use hvd.Compression.none"
        )
    return wire

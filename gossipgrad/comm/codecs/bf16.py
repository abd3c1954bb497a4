"""``--wire bf16``: every value cast to bfloat16 (round to nearest even), no scale.

bfloat16 keeps float32's 8 exponent bits, so nothing overflows or flushes to zero that
float32 would keep, and 8 significant bits: a relative error of at most 2^-8 per value.
Half the bytes of float32, exactly::

    >>> import torch
    >>> codec = BF16()
    >>> x = torch.tensor([1.0, 1.0 + 2**-10, 3e-30, -7e20])
    >>> wire = codec.encode_(x, codec.wire_like(x), key=0)
    >>> y = codec.decode(wire, x, key=0)
    >>> y[1].item(), torch.allclose(y, x, rtol=2**-8, atol=0), wire.numel()
    (1.0, True, 8)
"""

from __future__ import annotations

import torch

from gossipgrad.comm.codecs import shape_of
from gossipgrad.comm.codecs.lossy import LossyCodec
from gossipgrad.registry import CODECS


class BF16(LossyCodec):
    """Cast to bfloat16 and back; error feedback off by default (its 2^-8 relative
    error measured no worse than float32 on the digits and templates jobs)."""

    name = "bf16"

    def wire_nbytes(self, like: torch.Tensor | tuple[int, int]) -> int:
        return 2 * shape_of(like)[0]

    def _pack(self, values: torch.Tensor, wire: torch.Tensor) -> None:
        wire[: 2 * values.numel()].view(torch.bfloat16).copy_(values)

    def _unpack(self, wire: torch.Tensor, numel: int, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(wire[: 2 * numel].view(torch.bfloat16))


CODECS.register(BF16.name, BF16)

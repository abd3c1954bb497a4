"""``--wire fp16``: every value cast to float16 after one power-of-two scale per buffer.

float16 has 5 exponent bits: a gradient of 1e-8 flushes to zero and 1e5 overflows. So each
buffer is first multiplied by ``2^-e``, the power of two that brings its largest magnitude
into [2^14, 2^15) (exact: only the exponent changes), which leaves 29 binades below it at
full 11-bit precision and nothing finite that can overflow. The wire is the scale (one float32)
followed by the values: half of float32's bytes plus 4::

    >>> import torch
    >>> codec = FP16()
    >>> x = torch.tensor([3e-9, -1e-12, 2e-10])   # below float16's smallest normal, 6e-5
    >>> wire = codec.encode_(x, codec.wire_like(x), key=0)
    >>> torch.allclose(codec.decode(wire, x, key=0), x, rtol=2**-11, atol=0), wire.numel()
    (True, 10)
"""

from __future__ import annotations

import math

import torch

from gossipgrad.comm.codecs import shape_of
from gossipgrad.comm.codecs.lossy import LossyCodec
from gossipgrad.registry import CODECS

TOP = 15
"""The largest magnitude of a buffer is scaled into [2^(TOP-1), 2^TOP); float16's largest
finite value is 65504, just under 2^16, so one binade of headroom stays."""


class FP16(LossyCodec):
    """Scale by a power of two, cast to float16 (round to nearest even) and back."""

    name = "fp16"

    def wire_nbytes(self, like: torch.Tensor | tuple[int, int]) -> int:
        numel = shape_of(like)[0]
        return 4 + 2 * numel if numel else 0

    def _pack(self, values: torch.Tensor, wire: torch.Tensor) -> None:
        n = values.numel()
        if not n:
            return
        amax = torch.linalg.vector_norm(values, ord=float("inf"))
        scale = power_of_two_scale(amax)
        wire[:4].view(torch.float32).fill_(scale)
        scaled = torch.div(values, scale, out=self.scratch("scaled", n, values.device))
        wire[4 : 4 + 2 * n].view(torch.float16).copy_(scaled)

    def _unpack(self, wire: torch.Tensor, numel: int, out: torch.Tensor) -> torch.Tensor:
        if not numel:
            return out
        out.copy_(wire[4 : 4 + 2 * numel].view(torch.float16))
        return out.mul_(wire[:4].view(torch.float32))


def power_of_two_scale(amax: torch.Tensor) -> torch.Tensor | float:
    """``2^(e - TOP)`` with ``amax`` in [2^(e-1), 2^e); 1 for zero or a non-finite ``amax``
    (then infinities and NaNs travel as they are): a float for a host tensor (one read,
    no kernels), else a 0-d float32 tensor on its device (no synchronization)."""
    if amax.device.type == "cpu":
        top = float(amax)
        if not (math.isfinite(top) and top > 0):
            return 1.0
        return math.ldexp(1.0, math.frexp(top)[1] - TOP)
    mantissa, exponent = torch.frexp(amax.reshape(1).float())
    scale = torch.ldexp(torch.ones_like(mantissa), exponent - TOP)
    ok = torch.isfinite(amax) & (amax > 0)
    return torch.where(ok, scale, torch.ones_like(scale)).reshape(())


CODECS.register(FP16.name, FP16)

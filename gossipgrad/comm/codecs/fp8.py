"""``--wire fp8``: float8 e4m3 with one float32 scale per chunk of :data:`CHUNK` values.

e4m3 (4 exponent bits, 3 mantissa bits, largest finite 448, no infinity) is the format
FP8 training and torchft's quantized allreduce send. Each chunk is divided by
``max |x| / 448`` so its largest value lands on 448, then cast (round to nearest even):
a relative error up to 2^-4 for values within 2^-6 of the chunk's largest, coarser below.
That is far coarser than bf16, so error feedback is on by default: the remainder of each
cast is added to the next send of the same buffer (:mod:`.lossy`). The wire is the scales,
then one byte per value: a quarter of float32's bytes plus 4 per chunk (0.252x)::

    >>> import torch
    >>> codec = FP8(feedback=False)
    >>> x = torch.tensor([448.0, 1.0, -3.0, 0.0]) * 1e-3
    >>> wire = codec.encode_(x, codec.wire_like(x), key=0)
    >>> [round(v * 1e3, 3) for v in codec.decode(wire, x, key=0).tolist()], wire.numel()
    ([448.0, 1.0, -3.0, 0.0], 8)
"""

from __future__ import annotations

import torch

from gossipgrad.comm.codecs import shape_of
from gossipgrad.comm.codecs.lossy import LossyCodec
from gossipgrad.registry import CODECS

CHUNK = 512
"""Values per scale: 4 bytes of scale per 512 of values is 0.8 % on top of the quarter."""

E4M3_MAX = 448.0
"""float8_e4m3fn's largest finite magnitude (casting beyond it gives NaN: clamp first)."""

TINY = 1e-30
"""The smallest scale numerator: a chunk of zeros divides by it and stays zeros."""


class FP8(LossyCodec):
    """Per-chunk absmax scaling to e4m3 and back; error feedback on by default."""

    name = "fp8"
    feedback_default = True

    def wire_nbytes(self, like: torch.Tensor | tuple[int, int]) -> int:
        numel = shape_of(like)[0]
        return 4 * chunks(numel) + numel

    def _pack(self, values: torch.Tensor, wire: torch.Tensor) -> None:
        n, c = values.numel(), chunks(values.numel())
        if not n:
            return
        work = self.scratch("chunks", c * CHUNK, values.device)
        rows = _padded(values, c, work).view(c, CHUNK)
        scale = wire[: 4 * c].view(torch.float32)
        torch.linalg.vector_norm(rows, ord=float("inf"), dim=1, out=scale)  # max |x| per chunk
        scale.clamp_(min=TINY).div_(E4M3_MAX)  # a chunk of zeros stays zeros
        torch.div(rows, scale[:, None], out=work.view(c, CHUNK)).clamp_(-E4M3_MAX, E4M3_MAX)
        wire[4 * c : 4 * c + n].view(torch.float8_e4m3fn).copy_(work[:n])  # NaN stays NaN

    def _unpack(self, wire: torch.Tensor, numel: int, out: torch.Tensor) -> torch.Tensor:
        if not numel:
            return out
        c, whole = chunks(numel), numel // CHUNK
        codes = self.scratch("codes", numel, wire.device, torch.int32)
        codes.copy_(wire[4 * c : 4 * c + numel])
        torch.index_select(_table(wire.device), 0, codes, out=out)
        scales = wire[: 4 * c].view(torch.float32)
        if whole:
            out[: whole * CHUNK].view(whole, CHUNK).mul_(scales[:whole, None])
        if numel > whole * CHUNK:
            out[whole * CHUNK :].mul_(scales[whole])
        return out


def chunks(numel: int) -> int:
    """Scales for ``numel`` values: one per chunk of :data:`CHUNK`, the last one partial."""
    return -(-numel // CHUNK)


def _padded(values: torch.Tensor, c: int, work: torch.Tensor) -> torch.Tensor:
    """``values`` as ``c`` whole chunks: itself when they fit, else copied into ``work``
    padded with zeros (which change no chunk's largest magnitude)."""
    n = values.numel()
    if n == c * CHUNK:
        return values
    if work.data_ptr() != values.data_ptr():
        work[:n].copy_(values)
    work[n:].zero_()
    return work


def _table(device: torch.device) -> torch.Tensor:
    """The float32 value of each of the 256 e4m3 codes: decoding is a table look-up (torch's
    CPU cast from float8 runs one value at a time, about 15x slower)."""
    table = _TABLES.get(device)
    if table is None:
        codes = torch.arange(256, dtype=torch.uint8, device=device)
        table = _TABLES[device] = codes.view(torch.float8_e4m3fn).float()
    return table


_TABLES: dict[torch.device, torch.Tensor] = {}

CODECS.register(FP8.name, FP8)

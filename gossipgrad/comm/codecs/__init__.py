"""Wire codecs: what a bucket looks like on the wire (``--wire``; library ``wire=``).

A codec turns a flat buffer into the bytes that travel and back. Every path that moves a
bucket through gossipgrad's communicator goes through one (gossip's exchanges in every
timing, allreduce, ps's pushes and pulls, sufficient factors); the identity codec,
``fp32``, sends the buffer as it is and costs nothing. The built-in lossy ones, one module
each: ``bf16`` (:mod:`.bf16`, a cast), ``fp16`` (:mod:`.fp16`, a cast with one scale per
buffer) and ``fp8`` (:mod:`.fp8`, e4m3 with one scale per chunk of 512 values). A new codec
is one module that subclasses :class:`Codec` (or :class:`~.lossy.LossyCodec`) and registers
a factory in :data:`gossipgrad.registry.CODECS`::

    >>> import torch
    >>> codec = CODECS.get("fp32")()
    >>> x = torch.arange(4.0)
    >>> wire = codec.encode_(x, codec.wire_like(x), key=0)
    >>> codec.decode(wire, x, key=0).tolist(), codec.wire_nbytes(x)
    ([0.0, 1.0, 2.0, 3.0], 16)
    >>> bf16 = make_codec("bf16")
    >>> y = bf16.decode(bf16.encode_(x + 0.001, bf16.wire_like(x), 0), x, 0)
    >>> y.tolist()[1:], bf16.wire_nbytes(x)   # 1.001 is 1.0 in bfloat16
    ([1.0, 2.0, 3.0], 8)

Interface (all tensors flat and contiguous; ``key`` names the buffer, for per-buffer state;
any hashable):

- ``wire_like(like)``: an empty wire buffer for a buffer like ``like`` (send or receive);
- ``encode_(src, wire, key)``: write ``src``'s encoding into ``wire`` and return it (``src``
  is not modified);
- ``decode(wire, like, key)``: the values ``wire`` holds, shaped and typed like ``like``
  (may reuse ``wire``'s memory: a receive buffer is the codec's to overwrite);
- ``wire_nbytes(like)``: bytes on the wire for such a buffer (byte accounting reads this);
- ``in_place``: the buffer itself may be sent (its encoding is itself: no copy);
- ``lossless``: ``decode(encode(x))`` is ``x`` bit for bit;
- ``summable``: an allreduce may add encodings element-wise, ``decode(sum) == sum(x)``
  (else allreduce decodes before it adds: :mod:`gossipgrad.engine.bucket.sharded`);
- ``feedback``: error feedback is on (the cast's remainder per ``key`` is added to the next
  encoding of that key); ``state_dict``/``load_state_dict``: per-rank state (those
  residuals), saved in checkpoints.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from gossipgrad.registry import CODECS


class Codec:
    """The identity: buffers travel as they are (``--wire fp32`` for fp32 parameters)."""

    name = "fp32"
    in_place = True
    lossless = True
    summable = True
    feedback = False

    def wire_like(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)

    def encode_(self, src: torch.Tensor, wire: torch.Tensor, key: Any) -> torch.Tensor:
        if wire.data_ptr() != src.data_ptr():
            wire.copy_(src)
        return wire

    def decode(self, wire: torch.Tensor, like: torch.Tensor, key: Any) -> torch.Tensor:
        return wire

    def wire_nbytes(self, like: torch.Tensor | tuple[int, int]) -> int:
        """Bytes on the wire for a buffer ``like`` (a tensor, or ``(numel, element_size)``)."""
        numel, size = shape_of(like)
        return numel * size

    def wire_ratio(self, element_size: int) -> float:
        """Wire bytes per byte of a large buffer of this element size (1.0: no saving)."""
        return self.wire_nbytes((1 << 20, element_size)) / float((1 << 20) * element_size)

    def set_feedback(self, on: bool) -> None:
        """Switch error feedback on or off; a lossless codec has nothing to feed back."""
        if on:
            raise ValueError(
                f"error feedback needs a lossy wire codec; {self.name!r} is lossless "
                "(--error-feedback on with --wire bf16, fp16 or fp8)"
            )

    def forget(self) -> None:
        """Drop per-buffer state (the buffers were laid out anew)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(
                f"wire codec {self.name!r} keeps no state, but the checkpoint holds "
                f"{sorted(state)}; resume with the codec it was written with (--wire)"
            )


def shape_of(like: torch.Tensor | tuple[int, int]) -> tuple[int, int]:
    """``(numel, element_size)`` of a tensor, or the pair itself."""
    if isinstance(like, torch.Tensor):
        return like.numel(), like.element_size()
    return int(like[0]), int(like[1])


def make_codec(name: str, feedback: bool | None = None) -> Codec:
    """A new codec instance for ``--wire name`` (each user owns its own: state is per rank
    and per buffer); ``feedback`` switches error feedback on or off (None: the codec's
    default, on for fp8 only)."""
    codec = CODECS.get(name)()
    if feedback is not None:
        codec.set_feedback(feedback)
    return codec


CODECS.register("fp32", Codec)

BUILTIN = ("bf16", "fp16", "fp8")
"""The lossy codecs shipped, one module each in this package."""

# The built-in lossy codecs register themselves (after Codec exists: they subclass it), in
# the order the choices list them.
for _module in BUILTIN:
    importlib.import_module(f"{__name__}.{_module}")

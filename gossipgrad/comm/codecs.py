"""Wire codecs: what a bucket looks like on the wire (``--wire``; library ``wire=``).

A codec turns a flat buffer into the bytes that travel and back. Every path that moves a
bucket through gossipgrad's communicator goes through one (gossip's exchanges in every
timing, allreduce, ps's pushes and pulls, sufficient factors); the identity codec,
``fp32``, sends the buffer as it is and costs nothing. A new codec is one module that
subclasses :class:`Codec` and registers a factory in :data:`gossipgrad.registry.CODECS`::

    >>> import torch
    >>> codec = CODECS.get("fp32")()
    >>> x = torch.arange(4.0)
    >>> wire = codec.encode_(x, codec.wire_like(x), key=0)
    >>> codec.decode(wire, x, key=0).tolist(), codec.wire_nbytes(x)
    ([0.0, 1.0, 2.0, 3.0], 16)

Interface (all tensors flat and contiguous; ``key`` names the bucket, for per-bucket state):

- ``wire_like(like)``: an empty wire buffer for a buffer like ``like`` (send or receive);
- ``encode_(src, wire, key)``: write ``src``'s encoding into ``wire`` and return it (``src``
  is not modified);
- ``decode(wire, like, key)``: the values ``wire`` holds, shaped and typed like ``like``
  (may reuse ``wire``'s memory: a receive buffer is the codec's to overwrite);
- ``wire_nbytes(like)``: bytes on the wire for such a buffer (byte accounting reads this);
- ``in_place``: the buffer itself may be sent (its encoding is itself: no copy);
- ``lossless``: ``decode(encode(x))`` is ``x`` bit for bit;
- ``summable``: an allreduce may add encodings element-wise, ``decode(sum) == sum(x)``
  (else allreduce needs a path that decodes before it adds);
- ``state_dict``/``load_state_dict``: per-rank state (an error-feedback residual), saved in
  checkpoints.
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.registry import CODECS


class Codec:
    """The identity: buffers travel as they are (``--wire fp32`` for fp32 parameters)."""

    name = "fp32"
    in_place = True
    lossless = True
    summable = True

    def wire_like(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)

    def encode_(self, src: torch.Tensor, wire: torch.Tensor, key: int) -> torch.Tensor:
        if wire.data_ptr() != src.data_ptr():
            wire.copy_(src)
        return wire

    def decode(self, wire: torch.Tensor, like: torch.Tensor, key: int) -> torch.Tensor:
        return wire

    def wire_nbytes(self, like: torch.Tensor | tuple[int, int]) -> int:
        """Bytes on the wire for a buffer ``like`` (a tensor, or ``(numel, element_size)``)."""
        numel, size = _shape(like)
        return numel * size

    def wire_ratio(self, element_size: int) -> float:
        """Wire bytes per byte of a large buffer of this element size (1.0: no saving)."""
        return self.wire_nbytes((1 << 20, element_size)) / float((1 << 20) * element_size)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(
                f"wire codec {self.name!r} keeps no state, but the checkpoint holds "
                f"{sorted(state)}; resume with the codec it was written with (--wire)"
            )


def _shape(like: torch.Tensor | tuple[int, int]) -> tuple[int, int]:
    if isinstance(like, torch.Tensor):
        return like.numel(), like.element_size()
    return int(like[0]), int(like[1])


def make_codec(name: str) -> Codec:
    """A new codec instance for ``--wire name`` (each optimizer owns its own: state is per
    rank and per bucket)."""
    return CODECS.get(name)()


CODECS.register("fp32", Codec)

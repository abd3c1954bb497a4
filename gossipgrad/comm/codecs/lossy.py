"""What the lossy wire codecs share: a byte wire, error feedback and its checkpointed state.

A lossy codec's wire is a ``uint8`` buffer (numpy, and so MPI, has no bfloat16 or fp8
type): its scales first (float32, so every view is aligned), then the cast values. A
subclass writes :meth:`LossyCodec._pack` (float32 values -> wire), :meth:`LossyCodec._unpack`
(wire -> float32 values, into a buffer given) and :meth:`LossyCodec.wire_nbytes`.
Temporaries come from :meth:`LossyCodec.scratch`, per thread and reused: a fresh tensor of a
25 MB bucket costs thousands of page faults, more than the cast itself.

Error feedback (``feedback``): the remainder of each cast, ``r = v - decode(encode(v))``,
is kept per ``key`` and added to the next value encoded under that key, ``v = x + r``, so
what a key sends over many steps adds up to what it was asked to send (Seide et al. 2014;
Karimireddy et al. 2019). Residuals are this rank's (per bucket, per shard), and
:meth:`LossyCodec.state_dict` hands them to checkpoints.

Nothing here changes a mean over ranks: the exchange paths keep it exact whatever the
codec returns (a peer mix moves both partners by the same decoded difference, an allreduce
sums decoded values in float32; docs/architecture.md, "Wire codecs").
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import torch

from gossipgrad.comm.codecs import Codec


class LossyCodec(Codec):
    """Base of the casts: a ``uint8`` wire, optional error feedback keyed by buffer.

    Args:
        feedback: error feedback on (None: the class's ``feedback_default``).
    """

    in_place = False
    lossless = False
    summable = False  # a sum of casts re-rounds every partial sum: decode, then add
    feedback_default: ClassVar[bool] = False

    def __init__(self, feedback: bool | None = None) -> None:
        self.feedback = self.feedback_default if feedback is None else bool(feedback)
        self._residuals: dict[Any, torch.Tensor] = {}
        self._restored: dict[Any, torch.Tensor] = {}  # loaded, not yet claimed by a buffer
        self._local = threading.local()  # scratch buffers: encodes run on two threads
        self._sent: dict[Any, tuple[int, torch.Tensor]] = {}  # key -> (wire, its decoding)

    # -- what a cast writes ------------------------------------------------------------
    def _pack(self, values: torch.Tensor, wire: torch.Tensor) -> None:
        """Write float32 ``values`` (flat) into ``wire``."""
        raise NotImplementedError

    def _unpack(self, wire: torch.Tensor, numel: int, out: torch.Tensor) -> torch.Tensor:
        """The float32 values of a wire of ``numel`` values, written into ``out`` (float32,
        ``numel`` values) and returned."""
        raise NotImplementedError

    def scratch(self, name: str, numel: int, device: torch.device, dtype=torch.float32):
        """A buffer of ``numel`` values for this thread's use until its next call with
        ``name`` (grown as needed, never shrunk)."""
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        buf = pool.get((name, device, dtype))
        if buf is None or buf.numel() < numel:
            buf = pool[(name, device, dtype)] = torch.empty(numel, dtype=dtype, device=device)
        return buf[:numel]

    # -- the interface -----------------------------------------------------------------
    def wire_like(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty(self.wire_nbytes(like), dtype=torch.uint8, device=like.device)

    def encode_(self, src: torch.Tensor, wire: torch.Tensor, key: Any) -> torch.Tensor:
        x = src.detach().reshape(-1)
        if x.dtype != torch.float32:
            x = x.float()
        if not self.feedback:
            self._sent.pop(key, None)  # an earlier decoding of this wire is stale now
            self._pack(x, wire)
            return wire
        residual = self._residual(key, x)
        n = x.numel()
        v = torch.add(x, residual, out=self.scratch("feedback", n, x.device))
        self._pack(v, wire)
        sent = self._sent_buffer(key, x)
        self._unpack(wire, n, sent)
        self._sent[key] = (wire.data_ptr(), sent)
        torch.sub(v, sent, out=residual)
        return wire

    def decode(self, wire: torch.Tensor, like: torch.Tensor, key: Any) -> torch.Tensor:
        """The values of ``wire``: of a wire this codec just encoded under ``key`` with
        feedback on, the decoding it already made (do not modify it), else a new tensor."""
        hit = self._sent.get(key)
        if hit is not None and hit[0] == wire.data_ptr() and hit[1].numel() == like.numel():
            values = hit[1]
        else:
            values = self._unpack(wire, like.numel(), torch.empty(like.numel(), device=wire.device))
        return values if like.dtype == torch.float32 else values.to(like.dtype)

    def _sent_buffer(self, key: Any, x: torch.Tensor) -> torch.Tensor:
        hit = self._sent.get(key)
        if hit is None or hit[1].shape != x.shape or hit[1].device != x.device:
            return torch.empty_like(x)
        return hit[1]

    def _residual(self, key: Any, x: torch.Tensor) -> torch.Tensor:
        """``key``'s residual, shaped like ``x``: the one in use, else one restored from a
        checkpoint if it fits, else zeros. A restored residual that does not fit (the layout
        before the sufficient-factor decision of a resumed run) waits for a buffer that
        does, and is saved again meanwhile."""
        r = self._residuals.get(key)
        if r is None or r.shape != x.shape:
            restored = self._restored.get(key)
            if restored is not None and restored.shape == x.shape:
                r = self._restored.pop(key)
            else:
                r = torch.zeros_like(x)
            self._residuals[key] = r
        if r.device != x.device:
            r = self._residuals[key] = r.to(x.device)
        return r

    def set_feedback(self, on: bool) -> None:
        self.feedback = bool(on)

    def forget(self) -> None:
        """Drop the residuals in use (the buffers were laid out anew: the sufficient-factor
        decision hands layers back to the buckets after the first step); restored ones that
        no buffer claimed yet stay."""
        self._residuals = {}
        self._sent = {}

    # -- per-rank state ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's residuals (plain tensors; ``{}`` without feedback)."""
        if not self.feedback:
            return {}
        residuals = {**self._restored, **self._residuals}
        keys = sorted(residuals, key=repr)
        return {"keys": list(keys), "residuals": [residuals[k] for k in keys]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._residuals = {}
        if not state:
            self._restored = {}
            return
        if not self.feedback:
            raise ValueError(
                f"the checkpoint holds error-feedback residuals of wire codec {self.name!r}, "
                "but this run has error feedback off; resume with --error-feedback on"
            )
        self._restored = {
            _key(k): r.clone() for k, r in zip(state["keys"], state["residuals"], strict=True)
        }

    def residual_norm(self) -> float:
        """Euclidean norm of every residual together (0.0 without feedback): a diagnostic."""
        total = sum(float(r.double().square().sum()) for r in self._residuals.values())
        return total**0.5


def _key(k: Any) -> Any:
    """A key as saved (a list where a tuple was, after some loaders) back to a hashable."""
    return tuple(_key(x) for x in k) if isinstance(k, (list, tuple)) else k

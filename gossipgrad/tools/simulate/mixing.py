"""The exchange of stacked replicas: the runtime's schedule, rule and codec, all ranks at once.

What one bucket exchange leaves in every rank's buffer (``engine.bucket.mixer``), with a
stack ``[size, ...]`` per parameter:

- ``peer``: ``rule.mix_(own, src's, weight)`` for every rank with a partner; ranks that mix
  with the same weight go in one call (on a hypercube every rank: one call per tensor, the
  same elementwise operations as each rank's own). A lossy codec runs per rank and bucket
  on the runtime's bucket layout, with one codec object per rank (its error feedback is
  per rank): ``own + w (decode(src's wire) - decode(own wire))``.
- ``ring``: the sum over ranks, then ``rule.mean_``: every rank gets the mean.
- ``none``: nothing.

The timings (``engine.bucket.timing``) over that: :class:`Lockstep` mixes within the step,
:class:`Stale` applies step t's exchange at step t + 1 as the correction ``(mixed -
own)_t``. Bounded lag is :mod:`.lagmix`.
"""

from __future__ import annotations

import numpy as np
import torch

from gossipgrad.tools.simulate.runtime import Schedule, make_codec, peer_table
from gossipgrad.tools.simulate.stack import gather_bucket, scatter_bucket


class StackMixer:
    """One step's exchange of stacked buffers.

    Args:
        pattern: the strategy's exchange shape (an allreduce when it ``sums``, else
            one peer a step; nothing when it does not ``move``).
        schedule: the ranks' schedule (``peer``).
        rule: the mixing rule object.
        wire, feedback: the codec (``make_codec(wire, feedback)``, one per rank if lossy).
        names, spans: the parameters' names in stack order and the bucket layout
            (:func:`gossipgrad.tools.simulate.stack.bucket_spans`), for a lossy codec.
    """

    def __init__(
        self,
        pattern: str,
        schedule: Schedule,
        rule: object,
        wire: str,
        feedback: bool | None,
        names: list[str],
        spans: list[list[tuple]],
    ) -> None:
        self.pattern, self.schedule, self.rule = pattern, schedule, rule
        self.size = schedule.size
        self.names, self.spans = names, spans
        self.codecs = None
        if not make_codec(wire, feedback).lossless:
            if pattern.sums:
                raise ValueError(
                    f"the stack engine mixes an allreduce through a lossy codec ({wire}) only "
                    "on engine='ranks' (the runtime's sharded mean decodes before it adds)"
                )
            self.codecs = [make_codec(wire, feedback) for _ in range(self.size)]

    def mix_(self, bufs: list[torch.Tensor], step: int) -> None:
        """Every rank's ``bufs`` <- this step's mix, in place."""
        if not self.pattern.moves or self.size == 1:
            return
        if self.pattern.sums:
            for b in bufs:
                total = b.sum(0)
                self.rule.mean_(total, self.size)
                b.copy_(total.expand_as(b))
            return
        src, _, weight = peer_table(self.schedule, step)
        if self.codecs is None:
            self._mix_lossless(bufs, src, weight)
        else:
            self._mix_lossy(bufs, src, weight)

    def _mix_lossless(self, bufs: list[torch.Tensor], src: np.ndarray, weight: np.ndarray) -> None:
        index = torch.from_numpy(src)
        peers = [b.index_select(0, index) for b in bufs]
        for w in np.unique(weight[weight > 0]):
            rows = weight == w
            if rows.all():
                for b, p in zip(bufs, peers, strict=True):
                    self.rule.mix_(b, p, float(w))
                continue
            idx = torch.from_numpy(np.flatnonzero(rows))
            for b, p in zip(bufs, peers, strict=True):
                own = b.index_select(0, idx)
                self.rule.mix_(own, p.index_select(0, idx), float(w))
                b.index_copy_(0, idx, own)

    def _mix_lossy(self, bufs: list[torch.Tensor], src: np.ndarray, weight: np.ndarray) -> None:
        stacks = dict(zip(self.names, bufs, strict=True))
        for key, spans in enumerate(self.spans):
            flats = [gather_bucket(stacks, spans, r) for r in range(self.size)]
            wires = [
                c.encode_(f, c.wire_like(f), key) if w > 0 else None
                for c, f, w in zip(self.codecs, flats, weight, strict=True)
            ]
            for r in range(self.size):
                if weight[r] == 0:
                    continue
                codec, own = self.codecs[r], flats[r]
                peer = codec.decode(wires[src[r]].clone(), own, key).to(own.dtype)
                sent = codec.decode(wires[r].clone(), own, key).to(own.dtype)
                mixed = own.clone()
                self.rule.mix_(mixed, peer, float(weight[r]), sent)
                scatter_bucket(stacks, spans, r, mixed)


class Lockstep:
    """Staleness 0: mixed within the step."""

    def __init__(self, mixer: StackMixer) -> None:
        self.mixer = mixer

    def exchange_(self, bufs: list[torch.Tensor], step: int) -> None:
        self.mixer.mix_(bufs, step)

    def drain_(self, bufs: list[torch.Tensor]) -> None:
        return None


class Stale:
    """Staleness 1: the exchange of step t is applied at t + 1 as ``(mixed - own)_t``; a
    drain completes the one in flight without applying it."""

    def __init__(self, mixer: StackMixer) -> None:
        self.mixer = mixer
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def exchange_(self, bufs: list[torch.Tensor], step: int) -> None:
        if self._pending is not None:
            for b, (mixed, own) in zip(bufs, self._pending, strict=True):
                b.add_(mixed.sub_(own))
        own = [b.clone() for b in bufs]
        mixed = [b.clone() for b in bufs]
        self.mixer.mix_(mixed, step)
        self._pending = list(zip(mixed, own, strict=True))

    def drain_(self, bufs: list[torch.Tensor]) -> None:
        self._pending = None

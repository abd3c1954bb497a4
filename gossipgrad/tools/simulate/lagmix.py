"""Bounded lag (``max_lag = S``) over stacked replicas, following a delay pattern.

What :class:`gossipgrad.engine.bucket.timing.lagged.Lagged` does on every rank, with the
frames' arrivals fixed by ``delay[t, r]`` (rank r's frame of step t is mixed by its peer at
step t + delay, :mod:`.lagclock`):

- ``param`` (push-sum): before the update the gradients are divided by the rank's weight
  w; after it the rank sends ``(z, a)`` and keeps ``w - a`` (``rule.split``); a frame
  ``(z', w')`` mixed in is ``z.lerp_(z', w' / (w + w'))``, then ``w += w'``.
- ``grad``: the rank sends its gradient with the share ``a`` and keeps ``(1 - a) g``; a
  frame adds ``a' g'``; a skipped step sends share 0.

At one step a rank mixes its due frames oldest first, as the runtime's link hands them over.
The final drain mixes every frame still in flight (grad: into zeroed gradients, which one
more optimizer step applies). Lossless codecs only here (a lossy frame's remainders:
engine ``ranks``).
"""

from __future__ import annotations

import numpy as np
import torch

from gossipgrad.tools.simulate.runtime import Schedule, peer_table


class StackLagged:
    """Args:
    schedule: the ranks' schedule; rule: the mixing rule (its ``split``);
    mix: ``param`` or ``grad``; max_lag, staleness: the timing's;
    delay: ``[steps, size]`` (frames of a step at or after ``steps`` are drained).
    """

    def __init__(
        self,
        schedule: Schedule,
        rule: object,
        mix: str,
        max_lag: int,
        staleness: int,
        delay: np.ndarray,
    ) -> None:
        self.schedule, self.rule, self.mix = schedule, rule, mix
        self.size = schedule.size
        self.max_lag, self.staleness, self.delay = max_lag, staleness, delay
        self.weight = np.ones(self.size)  # push-sum weights (param)
        self.frames: dict[int, tuple[list[torch.Tensor], np.ndarray, np.ndarray]] = {}
        self._peers: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _table(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if step not in self._peers:
            self._peers[step] = peer_table(self.schedule, step)
        return self._peers[step]

    def before_update(self, grads: list[torch.Tensor]) -> None:
        """Param mix: gradients divided by the weight (so x = w z moves by the gradient)."""
        if self.mix != "param":
            return
        for r in np.flatnonzero(self.weight != 1.0):  # the runtime's float, rank by rank
            for g in grads:
                g[r].div_(float(self.weight[r]))

    def exchange_(self, bufs: list[torch.Tensor], step: int, computed: np.ndarray) -> None:
        """Send step ``step``'s frames and mix what is due (``computed``: ranks that took
        their compute; the others skipped to catch up)."""
        _, _, share = self._table(step)
        if self.mix == "param":
            split = [
                self.rule.split(float(w), float(a)) for w, a in zip(self.weight, share, strict=True)
            ]
            send = np.array([a for _, a in split])
            self.weight = np.array([k for k, _ in split])
        else:
            split = [self.rule.split(1.0, float(a)) for a in share]
            send = np.array([a for _, a in split]) * computed
        self.frames[step] = ([b.clone() for b in bufs], send, np.zeros(self.size, bool))
        if self.mix == "grad":
            for r in np.flatnonzero(send != 0.0):
                for b in bufs:
                    b[r].mul_(split[r][0])
        self._take(bufs, step - self.staleness, lambda s, src: s + self.delay[s, src] <= step)
        for s in [s for s in self.frames if s < step - self.max_lag]:
            assert self.frames[s][2][self.frames[s][1][self._table(s)[0]] != 0].all()
            del self.frames[s]

    def drain_(self, bufs: list[torch.Tensor], step: int) -> np.ndarray:
        """Mix every frame still in flight; returns the ranks that owe an optimizer step
        (grad: the shares that arrived late, in the zeroed gradients)."""
        if self.mix == "grad":
            for b in bufs:
                b.zero_()
        owed = self._take(bufs, step - 1, lambda s, src: np.ones(len(src), bool))
        self.frames.clear()
        return owed if self.mix == "grad" else np.zeros(self.size, bool)

    def _take(self, bufs: list[torch.Tensor], upto: int, due) -> np.ndarray:
        """Mix the frames of steps ``<= upto`` that ``due(step, src)`` marks, oldest first,
        each once; the ranks that mixed any."""
        owed = np.zeros(self.size, bool)
        for s in sorted(self.frames):
            if s > upto:
                break
            payload, weights, done = self.frames[s]
            src, _, _ = self._table(s)
            rows = np.flatnonzero(due(s, src) & ~done & (weights[src] != 0.0))
            if not len(rows):
                continue
            done[rows] = True
            owed[rows] = True
            senders = src[rows]
            w = weights[senders]
            idx, sidx = torch.from_numpy(rows), torch.from_numpy(senders)
            if self.mix == "param":
                frac = torch.from_numpy(w / (self.weight[rows] + w))
                for b, p in zip(bufs, payload, strict=True):
                    shape = (-1,) + (1,) * (b.dim() - 1)
                    mixed = b.index_select(0, idx).lerp_(
                        p.index_select(0, sidx), frac.to(b.dtype).view(shape)
                    )
                    b.index_copy_(0, idx, mixed)
                self.weight[rows] += w
            else:
                for b, p in zip(bufs, payload, strict=True):
                    for r, q, a in zip(rows, senders, w, strict=True):
                        b[r].add_(p[q], alpha=float(a))
        return owed

    def average_weights_(self, values: list[torch.Tensor]) -> None:
        """Before the global average after a drain: z <- w z (the mean is then exact)."""
        rows = np.flatnonzero(self.weight != 1.0)
        for v in values:
            for r in rows:
                v[r].mul_(float(self.weight[r]))
        self.weight[:] = 1.0

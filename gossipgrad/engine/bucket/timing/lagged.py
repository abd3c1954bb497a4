"""Bounded-lag gossip (``--max-lag S``, S >= 1): a rank waits only for a peer more than S
steps behind, and a rank that falls behind catches up by skipping compute.

Every rank still takes part in every step's exchange, in schedule order (one frame per
bucket to ``dst(t)``, one from ``src(t)``: :class:`gossipgrad.comm.lagged.LagLink`), but
step t waits only for the frames of step ``t - S``; fresher frames are mixed as soon as they
have arrived (never before step ``sent + staleness``). What is mixed, and why the mean over
ranks stays exact:

- ``mix="param"``: push-sum (Kempe et al. 2003; SGP, Assran et al. 2019). Each rank holds
  its model z and a weight w (x = w z is its share of the sum). At step t it sends
  (z, a w) and keeps (1 - a) w, a the mixing rule's share of the peer (1/2 by default:
  :meth:`~gossipgrad.engine.bucket.rules.Average.split`); a frame (z', w') that arrives is added,
  x += w' z', w += w', which is ``z.lerp_(z', w' / (w + w'))``. The optimizer's step
  moves x by the gradient itself (the gradient is divided by w before it), so the sum over
  ranks of x, frames in flight included, is the sum of the initial models minus lr x every
  gradient (plain SGD), and after :meth:`Lagged.drain_` (every frame delivered, so the
  weights sum to ``size``) ``synchronize`` computes that virtual mean exactly:
  sum(w z) / size.
- ``mix="grad"``: each gradient is sent whole; the sender applies its share (1 - a) at
  once, the receiver the share a (carried in the frame) when it arrives, so every gradient
  is applied exactly once. Shares still owed when the ranks drain are applied with one more
  optimizer step (:meth:`Lagged.drain_` returns True).

With a lossy wire codec (``--wire bf16|fp16|fp8``) a frame carries ``q``, the decoding of
its encoding, not the values themselves, and the sender accounts for exactly that:

- param: the frame adds ``s q`` to the sum, not ``s z``; the difference ``s (z - q)`` is
  this rank's *remainder* (per bucket), added back into its own model ``z += D / w`` at
  the end of a step whose weight ``w`` is at least :data:`DEPOSIT_WEIGHT` (a rank that
  just sent most of its weight would otherwise blow the remainder up by ``1 / w``), and in
  any case by :meth:`Lagged.drain_`;
- grad: the sender keeps ``g - s q`` (not ``(1 - s) g``), so every gradient still adds up
  to itself once all frames are applied.

The sum over ranks therefore stays exact whatever the codec rounds (float rounding
aside); codec error feedback is off here, since the remainder already is the feedback.

With momentum or weight decay the mean moves a little differently (the optimizer is then
not linear in the gradient); the consensus distance is measured at every evaluation.

Catching up: receives are posted S steps ahead. If, before its compute, a rank sees that
the frames of step ``t + k`` have already arrived for some k >= ceil(S / 2), a peer is k
steps ahead; if this rank's compute is also slower than its peers' (each frame carries its
sender's pace, the moving average of the seconds from ``behind()`` to ``step()``; slower
means by more than :data:`PACE_MARGIN`), :meth:`Lagged.behind` says so and the caller
skips this step's forward and backward (``skip_step()``), so a slow rank
computes fewer samples instead of holding the others back. A rank that is only behind (a
pause, not a slower pace) keeps computing: the lag bound, not a skipped batch, absorbs it.
What skipping cost is counted by the caller.

Results depend on timing (which frames have arrived when), so runs with S >= 1 are not
bit-reproducible; S = 0 (the default) is lockstep and unchanged.
"""

# Over 300 lines on purpose: one timing, push-sum and gradient shares with a lossy codec's
# remainders, whose sum-keeping steps read best side by side.

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from gossipgrad.choices import ErrorFeedback, Sync, respell, spell
from gossipgrad.comm.base import Communicator, Tag
from gossipgrad.comm.codecs import Codec, make_codec
from gossipgrad.comm.lagged import HEADER_BYTES, LagLink, Poller
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.bucket.rules import Average
from gossipgrad.engine.bucket.timing.base import Timing, TimingContext
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.consensus import average_parameters_
from gossipgrad.options import Mix
from gossipgrad.registry import TIMINGS, lossless
from gossipgrad.specs import TimingSpec

log = logging.getLogger(__name__)


PACE_MARGIN = 1.1
"""A rank skips only when its compute pace is more than this many times its peers'."""

DEPOSIT_WEIGHT = 0.5
"""A lossy codec's remainder goes back into the own model only once the push-sum weight is
at least this (see the module docstring)."""

PACE_SMOOTHING = 0.2
"""Weight of the newest sample in the moving averages of compute pace."""


def skip_threshold(max_lag: int) -> int:
    """How many steps ahead a peer must be before a rank skips compute: ceil(S / 2), so
    the slow rank catches up before the others reach the bound and wait.

        >>> [skip_threshold(s) for s in (1, 2, 3, 4)]
        [1, 1, 2, 2]
    """
    return max(1, (max_lag + 1) // 2)


class Lagged(Timing):
    """Bounded-lag mixing of a :class:`BucketLayout`'s buckets (collective to build: it
    duplicates ``comm``).

    Args:
        comm: the training communicator (the mixer talks on ``comm.dup()``).
        schedule: the partner schedule (its weights are the peers' shares).
        layout: the buckets; ``values`` (param) or ``grads`` (grad) are mixed in place.
        mix: what is mixed.
        max_lag: S >= 1.
        staleness: 0, or 1 (a frame is mixed no earlier than the step after it was sent).
        poll: keep frames moving on a thread of its own while the caller computes.
        rule: how much of its weight a rank sends (:meth:`Average.split`).
        codec: the frames' wire codec (keyed by bucket index).
    """

    header_bytes = HEADER_BYTES

    def __init__(
        self,
        comm: Communicator,
        schedule: Schedule,
        layout: BucketLayout,
        mix: Mix,
        max_lag: int,
        staleness: int = 0,
        poll: bool = True,
        rule: Average | None = None,
        codec: Codec | None = None,
    ) -> None:
        if max_lag < 1:
            raise ValueError(f"--max-lag must be >= 1 here, got {max_lag}")
        self.layout, self.mix, self.max_lag, self.staleness = layout, mix, max_lag, staleness
        self.rule, self.codec = rule or Average(), codec or Codec()
        self.codecs = (self.codec,)
        self.comm = comm.dup()
        self.schedule = schedule
        base = Tag.PARAM_BUCKET if mix is Mix.PARAM else Tag.GRAD_BUCKET
        wires = [self.codec.wire_like(self._source(b)) for b in layout.buckets]
        self.link = LagLink(
            self.comm,
            schedule,
            [(w.numel() * w.element_size(), w.dtype) for w in wires],
            [base + b.index for b in layout.buckets],
            max_lag,
            lookahead=max_lag,
        )
        self.poller = Poller(self.link, self.comm.policy.max_pause_s) if poll else None
        self.weight = 1.0  # push-sum weight (param); 1 for grad
        self.lossy = not self.codec.lossless
        self.remainder: dict[int, torch.Tensor] = {}  # param, lossy: mass not yet deposited
        self.least_ahead = skip_threshold(max_lag)
        self.waits = 0  # steps that had to wait for a frame of step t - S
        self.wait_s = 0.0
        self.max_ahead = 0  # the most steps ahead a peer was seen
        self.pace: float | None = None  # seconds from behind() to step(), moving average
        self.peer_pace: float | None = None  # the same, of the frames' senders
        self._computing_since: float | None = None

    def _source(self, bucket: Any) -> torch.Tensor:
        return bucket.values if self.mix is Mix.PARAM else bucket.grads

    def _share(self, step: int) -> float:
        """The schedule's weight of ``step``'s peer, as the rule takes it."""
        peers = self.schedule.peers(self.comm.rank, step)
        return 0.0 if peers is None else peers.weight

    # -- the step ----------------------------------------------------------------------
    def behind(self, step: int) -> bool:
        """True if a peer is at least ``ceil(S / 2)`` steps ahead of ``step`` and this
        rank's compute is slower than its peers' (or either pace is not known yet): skip
        this step's compute to catch up. Never blocks; starts timing the compute."""
        self._resume()
        ahead = self.link.ahead(step, self.least_ahead)
        self.max_ahead = max(self.max_ahead, ahead)
        slower = (
            self.pace is None or self.peer_pace is None or self.pace > PACE_MARGIN * self.peer_pace
        )
        skip = ahead >= self.least_ahead and slower
        self._computing_since = None if skip else time.perf_counter()
        return skip

    def _computed(self, computed: bool) -> None:
        if computed and self._computing_since is not None:
            self.pace = _smooth(self.pace, time.perf_counter() - self._computing_since)
        self._computing_since = None

    def before_update(self, step: int) -> None:
        """Param mix: divide the gradients by w, so the optimizer's step moves x = w z by
        the gradient itself (what keeps the sum over ranks exact)."""
        self._computed(True)
        if self.mix is Mix.PARAM and self.weight != 1.0:
            for b in self.layout.buckets:
                b.grads.div_(self.weight)

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        if self.mix is Mix.GRAD:
            self.mix_grads_(step, computed=True)
        else:
            self.mix_params_(step)

    def skip_(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        """Without a gradient of this rank's: grad mix applies the peers' shares that have
        arrived (one optimizer step); param mix sends and mixes without an update."""
        self._computed(False)
        if self.mix is Mix.GRAD:
            self.mix_grads_(step, computed=False)
            optimizer.step()
        else:
            self.mix_params_(step)

    def mix_params_(self, step: int) -> None:
        """After the optimizer step (or none, on a skipped step): send (z, share of w), keep
        the rest, add what has arrived, and wait for step ``step - S`` if it has not."""
        self._resume()
        keep, send = self.rule.split(self.weight, self._share(step))
        self.link.post(
            step, lambda i, f: self._fill_values(i, f, send), send, pace=self.pace or 0.0
        )
        self.weight = keep
        self._take(step)
        if self.lossy and self.weight >= DEPOSIT_WEIGHT:
            self._deposit()

    def _fill_values(self, i: int, frame: Any, share: float) -> None:
        """Encode bucket ``i``'s values into ``frame`` (nothing for a weight-0 frame: it is
        never applied); a lossy codec's remainder ``share (z - q)`` is kept."""
        if share == 0.0:
            return
        z = self.layout.buckets[i].values
        self.codec.encode_(z, frame.payload, i)
        if self.lossy:
            q = self.codec.decode(frame.payload, z, i).to(z.device)
            r = self.remainder.get(i)
            if r is None:
                r = self.remainder[i] = torch.zeros_like(z)
            r.add_(z - q, alpha=share)

    def _deposit(self) -> None:
        """Add the remainders to the own model: x = w z gains D, so z += D / w."""
        for i, r in self.remainder.items():
            self.layout.buckets[i].values.add_(r, alpha=1.0 / self.weight)
            r.zero_()

    def mix_grads_(self, step: int, computed: bool) -> None:
        """Before the optimizer step: send this step's gradients with the peer's share as
        the frame's weight (0 on a skipped step: nothing to add), keep the rest, add the
        shares of the peers' that have arrived, and wait for step ``step - S`` if it has
        not."""
        self._resume()
        keep, send = self.rule.split(1.0, self._share(step))
        share = send * float(computed)
        self.link.post(
            step, lambda i, f: self._fill_grads(i, f, share, keep), share, pace=self.pace or 0.0
        )
        self._take(step)

    def _fill_grads(self, i: int, frame: Any, share: float, keep: float) -> None:
        """Encode bucket ``i``'s gradients into ``frame`` and keep the rest of them: ``keep
        g``, or ``g - share q`` with a lossy codec (what the peer will add is ``share q``)."""
        g = self.layout.buckets[i].grads
        if share == 0.0:  # idle (keep is 1) or skipped (g is zero): nothing to send or keep
            return
        self.codec.encode_(g, frame.payload, i)
        if self.lossy:
            g.sub_(self.codec.decode(frame.payload, g, i).to(g.device), alpha=share)
        else:
            g.mul_(keep)

    def _resume(self) -> None:
        if self.poller is not None:
            self.poller.resume()

    def _take(self, step: int) -> None:
        """Mix what has arrived for steps <= step - staleness; wait for step - S first if
        that has not arrived yet."""
        bound = step - self.max_lag
        if bound >= 0 and not self.link.done_through(bound):
            t0 = time.perf_counter()
            self.link.wait(bound)
            self.wait_s += time.perf_counter() - t0
            self.waits += 1
        for _, frames in self.link.arrived(step - self.staleness):
            self._apply(frames)
            self.link.release(frames)

    def _apply(self, frames: list) -> None:
        if frames[0].pace > 0:
            self.peer_pace = _smooth(self.peer_pace, frames[0].pace)
        for b, f in zip(self.layout.buckets, frames, strict=True):
            w = f.weight
            if w == 0.0:
                continue
            target = self._source(b)
            values = self.codec.decode(f.payload, target, b.index).to(target.device)
            if self.mix is Mix.PARAM:
                target.lerp_(values, w / (self.weight + w))
            else:
                target.add_(values, alpha=w)
        if self.mix is Mix.PARAM:
            self.weight += frames[0].weight

    # -- whole-model operations ----------------------------------------------------------
    def drain_(self, step: int) -> bool:
        """Every rank at the same step (collective in effect): deliver and apply every
        frame of steps < ``step``. Param: the weights then sum to ``size``. Grad: the
        buckets' gradients become the shares still owed; True if any (the caller applies
        them with one optimizer step). Nothing after a timeout (the link is broken)."""
        if self.link.closed:
            return False
        self.link.wait(step - 1)
        if self.poller is not None:  # nothing can arrive before this rank posts again
            self.poller.pause()
        if self.mix is Mix.GRAD:
            for b in self.layout.buckets:
                b.grads.zero_()
        owed = False
        for _, frames in self.link.arrived(step - 1):
            owed = owed or any(f.weight != 0.0 for f in frames)
            self._apply(frames)
            self.link.release(frames)
        if self.remainder:
            self._deposit()
        return owed and self.mix is Mix.GRAD

    def settle_(self, step: int) -> bool:
        """Every rank at the same step (collective in effect): every frame of steps <
        ``step`` sent and received, none applied. The steps that follow mix them as they
        would have mixed frames that arrived early (no push-sum weight moves, no gradient
        share is applied with an optimizer step of its own, as :meth:`drain_` does)."""
        if not self.link.closed:
            self.link.wait(step - 1)
        return False

    def average_(self, model: torch.nn.Module, comm: Communicator) -> None:
        """After :meth:`drain_`: every rank gets the virtual mean sum(w z) / size (exact:
        the weights sum to ``size``) and w = 1."""
        if self.mix is Mix.PARAM and self.weight != 1.0:
            for b in self.layout.buckets:
                b.values.mul_(self.weight)
        average_parameters_(model, self.comm)
        self.weight = 1.0

    def close(self, step: int) -> None:
        """Collective, after :meth:`drain_`: match every receive posted ahead, stop the
        poller."""
        try:
            if self.poller is not None:
                self.poller.close()
                self.poller = None
            self.link.close(step)
        finally:
            self.link.closed = True

    def abandon(self) -> None:
        raise RuntimeError("a lagged exchange cannot follow a membership change (--max-lag 0)")

    def stats(self) -> dict[str, Any]:
        """What lag cost this rank: steps that waited for a frame S steps old and the
        seconds they waited; the most steps ahead a peer was seen."""
        return {
            "lag_waits": self.waits,
            "lag_wait_seconds": self.wait_s,
            "max_peer_ahead": self.max_ahead,
        }


def _smooth(average: float | None, sample: float) -> float:
    return sample if average is None else (1 - PACE_SMOOTHING) * average + PACE_SMOOTHING * sample


class LagTiming(TimingSpec):
    """``lag:S`` (``lag:S:1``: no frame is mixed before the step after it was sent)."""

    name = "lag"
    summary = "bounded lag: frames up to S steps behind, mixed as they arrive (push-sum)"
    argument = "S"
    deterministic = False
    polls_itself = True
    follows_shrink = False
    carries_factors = False  # a lagged frame carries whole buckets
    sends_idle = True  # an idle step sends a weight-0 frame to itself: no wire, still a frame
    catches_up = True
    collectives_ok = False

    def parse(self, arg: str | None) -> tuple[int, ...]:
        parts = (arg or "").split(":")
        try:
            lag, delay = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
        except ValueError:
            lag, delay = 0, -1
        if lag < 1 or delay not in (0, 1) or len(parts) > 2:
            raise ValueError(
                f"{spell('--timing', f'lag:{arg}')}: lag takes S >= 1 steps (lag:2), or "
                "lag:S:1 to mix no frame before the step after it was sent"
            )
        return (lag, delay) if delay else (lag,)

    def aliases(self, args: tuple[int, ...]) -> dict[str, int]:
        return {"max_lag": args[0], "staleness": args[1] if len(args) > 1 else 0}

    def check(self, args: tuple[int, ...], opts: object) -> None:
        spec = opts.spec  # type: ignore[attr-defined]
        lag = spell("--timing", self.spelled(args))
        if "max_lag" not in spec.uses:
            why = respell(spec.refusals.get("max_lag", f"{spec.name} does not take it"))
            raise ValueError(
                f"{lag} does not apply to {spell('--strategy', spec.name)} ({why}); drop it"
            )
        feedback, wire = opts.error_feedback, opts.wire  # type: ignore[attr-defined]
        if feedback is ErrorFeedback.OFF and not lossless(wire):
            raise ValueError(
                f"{spell('--error-feedback', 'off')} does not apply with {lag}: a lagged frame "
                f"always carries the cast's remainder to the next (what keeps the sum over "
                f"ranks exact); drop it"
            )
        if opts.sync is Sync.ADAPTIVE:  # type: ignore[attr-defined]
            raise ValueError(
                f"{spell('--sync', 'adaptive')} does not apply with {lag}: its estimate is a "
                f"collective every {spell('--monitor-every')} steps, the barrier a lagged run "
                f"avoids; pass {spell('--sync', 'off')}"
            )

    def amp_refusal(self, args: tuple[int, ...], mix: str) -> str | None:
        return "every step agrees on inf/NaN over all ranks, which a lagged run does not wait for"

    def agreement_period(self, args: tuple[int, ...]) -> int:
        return 4 * (args[0] + 1)

    def build(self, ctx: TimingContext) -> Lagged:
        opts = ctx.opts
        lag, delay = (*ctx.args, 0)[:2]
        return Lagged(
            ctx.comm,
            ctx.schedule,
            ctx.layout,
            opts.mix,
            lag,
            delay,
            poll=opts.overlap,
            rule=ctx.rule,
            codec=make_codec(opts.wire, feedback=False),  # lagged frames carry their remainder
        )


TIMINGS.register(LagTiming.name, LagTiming(), replace=True)

"""Local steps (``--timing local:H``): each rank takes H steps of its own optimizer, then
exchanges its parameters once, and the mixing rule may take an outer step on the change.

At step t with ``(t + 1) % H == 0`` (an *outer step*) every parameter bucket is exchanged
as the strategy moves buckets, blocking, within the step:

- one peer (gossip): the bucket is mixed with this exchange's peer's, with the rule's
  weight (gossip-DiLoCo); a lossy codec keeps the pair's sum as every gossip mix does;
- an allreduce: the mean over ranks. What travels is each rank's change since the last
  exchange (``x - anchor``), whose anchors are the same on every rank, so a lossy codec
  (``--wire bf16``) rounds the change, not the parameters (DiLoCo's pseudo-gradient).

Then the rule's :meth:`~gossipgrad.engine.bucket.rules.Average.outer_` turns the mixed
bucket into the new model from the *anchor*, the bucket at the last exchange: the average
takes it as it is (local SGD), ``--rule outer`` steps on ``anchor - mixed``
(:mod:`gossipgrad.engine.bucket.outer`). The new model is the next anchor.

What is exchanged is the parameters whatever ``--mix`` says (``--mix grad`` is refused;
``allreduce`` then moves parameters too). The k-th exchange of the run follows step k of
the partner schedule, so consecutive exchanges walk the schedule as consecutive steps of
gossip do (the steps' own indices would repeat one hypercube dimension when H is a
multiple of the cycle). A *dense window* (``--dense-before F``, ``--dense-after F``: the
first or last fraction F of the run) exchanges at every step, mixing only: an outer step
with momentum over one step's change would multiply the inner learning rate.

Deterministic, no communication thread (the exchange is blocking), and it follows a
membership change: the survivors' global average re-anchors every rank.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import torch

from gossipgrad.choices import spell
from gossipgrad.comm.base import Communicator
from gossipgrad.engine.bucket import outer as _outer  # noqa: F401 - registers --rule outer
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.rules import Average
from gossipgrad.engine.bucket.timing.base import Timing, TimingContext
from gossipgrad.engine.bucket.timing.lockstep import Lockstep
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.consensus import average_parameters_
from gossipgrad.registry import TIMINGS
from gossipgrad.specs import TimingSpec

OUTER, DENSE = "outer", "dense"


@dataclass(frozen=True)
class LocalPlan:
    """Which steps exchange. PURE.

    Args:
        every: H, the steps from one outer exchange to the next.
        dense_before: the first fraction of the run exchanges at every step (0: none).
        dense_after: from this fraction of the run on, every step exchanges (1: never).
        total: the run's steps (needed only with a dense window).

        >>> plan = LocalPlan(4, dense_after=0.75, total=16)
        >>> [plan.kind(t) for t in (2, 3, 7, 11, 12, 15)]
        [None, 'outer', 'outer', 'outer', 'dense', 'dense']
        >>> plan.counts(0, 16), plan.rounds_before(12)
        ({'outer_steps': 3, 'dense_steps': 4}, 3)
    """

    every: int
    dense_before: float = 0.0
    dense_after: float = 1.0
    total: int | None = None

    def window(self) -> tuple[int, int]:
        """Steps before the first bound and from the second on exchange every step."""
        if self.dense_before == 0.0 and self.dense_after == 1.0:
            return 0, sys.maxsize
        if self.total is None:
            raise RuntimeError(
                "a dense window (dense_before/dense_after) needs the run's length: call "
                "plan_steps(total) on the engine's optimizer (gossipgrad.strategies.handle) "
                "before the first step; gossipgrad train does"
            )
        return round(self.dense_before * self.total), round(self.dense_after * self.total)

    def kind(self, step: int) -> str | None:
        """``"outer"``, ``"dense"`` or None (a local step: no exchange)."""
        early, late = self.window()
        if step < early or step >= late:
            return DENSE
        return OUTER if (step + 1) % self.every == 0 else None

    def _before(self, step: int) -> tuple[int, int]:
        """(outer, dense) exchanges at the steps before ``step``."""
        early, late = self.window()
        dense = min(step, early) + max(0, step - late)
        hi = min(step, late)
        sparse = hi // self.every - early // self.every if hi > early else 0
        return sparse, dense

    def rounds_before(self, step: int) -> int:
        """Exchanges before ``step``: the schedule step of ``step``'s exchange."""
        return sum(self._before(step))

    def counts(self, start: int, end: int) -> dict[str, int]:
        """Outer and dense exchanges at steps ``start`` to ``end - 1``."""
        (o0, d0), (o1, d1) = self._before(start), self._before(end)
        return {"outer_steps": o1 - o0, "dense_steps": d1 - d0}


class LocalSteps(Timing):
    """Args:
    mixer: one bucket's exchange (transport, codec, rule).
    layout: the buckets (their ``values`` are the parameters).
    rule: the mixing rule; its ``outer_`` follows each outer mix.
    plan: which steps exchange.
    collective: the exchange is an allreduce (the changes travel, see the module).
    """

    def __init__(
        self,
        mixer: BucketMixer,
        layout: BucketLayout,
        rule: Average,
        plan: LocalPlan,
        collective: bool,
    ) -> None:
        self.inner = Lockstep(mixer, True, None, collective)
        self.layout, self.rule, self.plan, self.collective = layout, rule, plan, collective
        self.anchors = [b.values.detach().clone() for b in layout.buckets]
        self._changes: list[torch.Tensor] = []

    def plan_(self, total: int) -> None:
        self.plan = dataclasses.replace(self.plan, total=total)

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        kind = self.plan.kind(step)
        if kind is None:
            return
        k = self.plan.rounds_before(step)
        if self.collective:
            self._exchange_changes(bufs, tag, k)
        else:
            self.inner.exchange_(bufs, tag, k)
        for i, (buf, anchor) in enumerate(zip(bufs, self.anchors, strict=True)):
            if kind == OUTER:
                self.rule.outer_(i, anchor, buf)
            anchor.copy_(buf)

    def _exchange_changes(self, bufs: list[torch.Tensor], tag: int, k: int) -> None:
        """The mean of the changes since the anchors, added to the anchors; the buckets
        are written only once the exchange has completed (a failure leaves them own)."""
        if [c.shape for c in self._changes] != [b.shape for b in bufs]:
            self._changes = [torch.empty_like(b) for b in bufs]
        for buf, anchor, change in zip(bufs, self.anchors, self._changes, strict=True):
            torch.sub(buf, anchor, out=change)
        self.inner.exchange_(self._changes, tag, k)
        for buf, anchor, change in zip(bufs, self.anchors, self._changes, strict=True):
            torch.add(anchor, change, out=buf)

    def rebase_(self) -> None:
        for anchor, bucket in zip(self.anchors, self.layout.buckets, strict=True):
            anchor.copy_(bucket.values)

    def average_(self, model: torch.nn.Module, comm: Communicator) -> None:
        """A global average: the models, then the anchors follow, and the rule's state
        (the outer momentum) becomes its mean where it differs between ranks."""
        average_parameters_(model, comm)
        self.rebase_()
        self.rule.average_state_(comm, identical=self.collective)

    def exchange_counts(self, start: int, end: int) -> dict[str, int]:
        return self.plan.counts(start, end)


class LocalTiming(TimingSpec):
    name = "local"
    summary = (
        "H steps of each rank's own optimizer, then one exchange of the parameters (an "
        "outer rule steps on their change: --rule outer is DiLoCo)"
    )
    argument = "H"
    polls_itself = True  # blocking: the outer exchange completes within its step
    carries_factors = False  # parameters have no factors
    collectives_ok = False  # ranks drift between exchanges by design: no adaptive average
    local_steps = True
    uses = frozenset({"rule", "outer_lr", "outer_momentum", "dense_after", "dense_before"})

    def parse(self, arg: str | None) -> tuple[int, ...]:
        text = arg or ""
        if not text.isdigit() or int(text) < 1:
            raise ValueError(
                f"{spell('--timing', 'local:' + text)}: local takes H >= 1, the steps from "
                "one exchange to the next (local:10)"
            )
        return (int(text),)

    def legacy_refusal(self, args: tuple[int, ...], given: str) -> str | None:
        return (
            f"{spell('--timing', self.spelled(args))} and {given}: local steps exchange in "
            "lockstep at fixed steps (a stale or lagged outer exchange is not built); "
            f"drop {given}"
        )

    def send_share(self, args: tuple[int, ...]) -> float:
        return 1.0 / args[0]

    def build(self, ctx: TimingContext) -> LocalSteps:
        opts = ctx.opts
        plan = LocalPlan(ctx.args[0], opts.dense_before, opts.dense_after)
        return LocalSteps(ctx.mixer, ctx.layout, ctx.rule, plan, ctx.collective)


TIMINGS.register(LocalTiming.name, LocalTiming(), replace=True)

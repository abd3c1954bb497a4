"""What the bucketed strategies share: their optimizer is the shell
(:class:`gossipgrad.engine.bucket.shell.BucketOptimizer`) with the transport of their pattern.
Not a strategy itself; gossip, allreduce, allreduce-param and local subclass it, and so can
a plugin whose exchange moves one bucket at a time."""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.transport import Transport, make_transport
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.shell import BucketOptimizer
from gossipgrad.specs import StrategySpec


class BucketStrategy(StrategySpec):
    """Builds a :class:`BucketOptimizer` that moves buckets by :attr:`pattern`."""

    shrink = True

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return BucketOptimizer(
            optimizer,
            model,
            comm,
            opts,
            pattern=self.pattern,
            stager=stager,
            mixers=self.mixer,
        )

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Transport:
        """How this strategy's buckets move on ``comm`` (built again after a shrink):
        the transport of :attr:`pattern`. A strategy with a transport of its own
        overrides this (collective where the transport needs the ranks to agree)."""
        return make_transport(self.pattern, comm, schedule, stager)

    def mixer(
        self, comm: Any, schedule: Any, stager: Any, topology: str, codec: Any, rule: Any
    ) -> BucketMixer:
        """A bucket's whole exchange on ``comm`` (built again after a shrink): this
        strategy's :meth:`transport` with the ``codec`` and ``rule``. A strategy whose
        bucket moves in stages of its own overrides this (``BucketMixer(whole=...)``)."""
        return BucketMixer(self.transport(comm, schedule, stager, topology), codec, rule)

    def cannot_shrink(self, opts: Any) -> str | None:
        if opts.max_lag:
            return "a lagged exchange cannot follow a membership change yet (--max-lag 0)"
        if opts.sufficient_factors.value == "on":
            return (
                "sufficient factors cannot follow a membership change (--sufficient-factors "
                "auto sends none when ranks may die, or off)"
            )
        return None

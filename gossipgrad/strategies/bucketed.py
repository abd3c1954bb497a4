"""What the bucketed strategies share: their optimizer is the shell
(:class:`gossipgrad.engine.bucket.shell.BucketOptimizer`) with the transport of their shape.
Not a strategy itself; gossip, allreduce, allreduce-param and local subclass it, and so can
a plugin whose exchange moves one bucket at a time."""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.transport import Transport
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.shell import BucketOptimizer
from gossipgrad.specs import StrategySpec


class BucketStrategy(StrategySpec):
    """Builds a :class:`BucketOptimizer` that moves buckets in its :attr:`shape`."""

    shrink = True

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return BucketOptimizer(
            optimizer,
            model,
            comm,
            opts,
            shape=self.exchange_shape,
            stager=stager,
            mixers=self.mixer,
        )

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Transport:
        """How this strategy's buckets move on ``comm`` (built again after a shrink):
        its shape's transport (collective where the transport needs the ranks to agree,
        as gossip-node's finding its nodes)."""
        return self.exchange_shape.transport(comm, schedule, stager, topology)

    def mixer(
        self, comm: Any, schedule: Any, stager: Any, topology: str, codec: Any, rule: Any
    ) -> BucketMixer:
        """A bucket's whole exchange on ``comm`` (built again after a shrink): this
        strategy's :meth:`transport` with the ``codec`` and ``rule``. A strategy whose
        bucket moves in stages of its own overrides this (``BucketMixer(whole=...)``)."""
        return BucketMixer(self.transport(comm, schedule, stager, topology), codec, rule)

    def cannot_shrink(self, opts: Any) -> str | None:
        if not opts.timing_spec.follows_shrink:
            return (
                f"timing {opts.timing} cannot follow a membership change yet (--timing "
                "lockstep or stale)"
            )
        if opts.sufficient_factors.value == "on":
            return (
                "sufficient factors cannot follow a membership change (--sufficient-factors "
                "auto sends none when ranks may die, or off)"
            )
        return None

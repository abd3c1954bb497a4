"""``--strategy ps``: a sharded parameter server colocated with the workers, with a
stale-synchronous slack ``--slack`` (GeePS; :mod:`gossipgrad.engine.ps.optimizer`)."""

from __future__ import annotations

from typing import Any

from gossipgrad.choices import Mix, SufficientFactors, spell
from gossipgrad.engine.ps.optimizer import ParameterServerOptimizer
from gossipgrad.registry import STRATEGIES
from gossipgrad.specs import StrategySpec


class ParameterServer(StrategySpec):
    name = "ps"
    summary = "sharded parameter server; --slack S: compute on parameters up to S steps old"
    uses = frozenset(
        {"slack", "max_lag", "bucket_mb", "overlap", "sufficient_factors", "wire", "error_feedback"}
    )
    lag_is_slack = True
    shape = "server"
    identical = True
    factor_pattern = "allgather"
    fixed_mix = Mix.GRAD
    mix_reason = "it pushes gradients to their owner and pulls parameters back"
    refusals = {
        "staleness": "its slack is --slack S (compute on parameters up to S steps old)",
        "timing": "its timing is its slack, --slack S (compute on parameters up to S steps old)",
        "sync_every": "every rank computes on the server's parameters, there is nothing to average",
    }

    def factor_obstacle(self, opts: Any, size: int | None = None) -> str | None:
        if opts.sufficient_factors is SufficientFactors.AUTO:
            return (
                f"needs {spell('--sufficient-factors', 'on')} with {spell('--strategy', 'ps')}:"
                " its shards are fixed before the first step shows each layer's rows"
            )
        return super().factor_obstacle(opts, size)

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return ParameterServerOptimizer(optimizer, model, comm, opts, stager=stager)


STRATEGIES.register(ParameterServer.name, ParameterServer())

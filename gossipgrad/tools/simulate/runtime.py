"""Everything the simulator takes from the runtime, in one module.

The simulator runs the runtime's own pieces: the partner schedule (topologies, rotation),
the mixing rule objects (:data:`gossipgrad.registry.RULES`), the wire codecs
(:data:`gossipgrad.registry.CODECS`), the option objects that validate an exchange, the
learning-rate rule and optimizers of ``gossipgrad train``, the partition, the shuffle's
pure plan, the consensus monitor's sketch and, for the ``ranks`` engine, the strategies'
``DistributedOptimizer`` itself. Every other module of the simulator imports them from
here, so a renamed or re-registered seam (timings and topologies are becoming registries)
is re-pointed in this one file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp, Request, Tag, WaitContext
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.comm.schedule import Schedule
from gossipgrad.data.partition import partition
from gossipgrad.engine.bucket.rules import make_rule
from gossipgrad.engine.bucket.sketch import CountSketch, estimate_distance, sketch_message
from gossipgrad.engine.bucket.timing.lagged import (
    PACE_MARGIN,
    PACE_SMOOTHING,
    skip_threshold,
)
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.consensus import average_parameters_, consensus_distance
from gossipgrad.engine.optim import is_adaptive, updates_elementwise
from gossipgrad.engine.run.loop import lr_at
from gossipgrad.engine.run.metrics import Progress
from gossipgrad.engine.run.trainer import local_optimizer
from gossipgrad.options import (
    DEFAULT_TIMEOUT_S,
    ExchangeOptions,
    Mix,
    OptimOptions,
)
from gossipgrad.registry import STRATEGIES
from gossipgrad.shuffle.plan import ShufflePlan
from gossipgrad.strategies.face import build_optimizer

__all__ = [
    "BucketLayout",
    "Communicator",
    "CountSketch",
    "DEFAULT_TIMEOUT_S",
    "ExchangeOptions",
    "LocalWorld",
    "Mix",
    "OptimOptions",
    "PACE_MARGIN",
    "PACE_SMOOTHING",
    "Progress",
    "ReduceOp",
    "Request",
    "Schedule",
    "ShufflePlan",
    "TIMINGS",
    "Tag",
    "WaitContext",
    "allreduce_",
    "average_parameters_",
    "build_optimizer",
    "consensus_distance",
    "estimate_distance",
    "exchange_for",
    "local_optimizer",
    "lr_at",
    "make_codec",
    "make_rule",
    "partition",
    "peer_table",
    "run_ranks",
    "sketch_message",
    "skip_threshold",
    "timing_of",
    "updates_elementwise",
]

SIMULATED = ("gossip", "allreduce", "allreduce-param", "local")
"""Strategies the simulator runs: those whose optimizer is the bucket shell with one of the
shapes peer, ring or none (the others keep an exchange of their own: a server, a library,
nodes)."""

TIMINGS = ("early", "lockstep", "stale", "lag")
"""Timings the simulator runs (its clocks and engines model these; ``local:H`` is measured
with the runtime itself). ``early`` is lockstep's arithmetic, and its clock here is
lockstep's: the per-bucket update from backward is not modelled, so a simulated early step
is no shorter than lockstep's (an overstatement where the wire is exposed)."""

FIXED = {"overlap": False, "sufficient_factors": "off"}
"""Exchange fields the simulator fixes where a strategy reads them: overlap gives results
bit-identical to the blocking exchange (one thread per rank is simpler to drive), and
sufficient factors send the same gradient by another product (off: one code path)."""


def exchange_for(strategy: str, adaptive_optimizer: bool, **fields: Any) -> ExchangeOptions:
    """The runtime's validated exchange options for ``strategy`` with ``fields`` (its
    refusals included), with :data:`FIXED` where the strategy reads them and, without a
    ``mix``, the mix ``DistributedOptimizer`` picks for the optimizer's kind."""
    spec = STRATEGIES.get(strategy)
    if spec.name not in SIMULATED:
        raise ValueError(
            f"the simulator runs the strategies {', '.join(SIMULATED)}; {spec.name!r} keeps an "
            "exchange of its own (a server, a library or nodes): measure it with gossipgrad bench"
        )
    fixed = {k: v for k, v in FIXED.items() if k in spec.uses and k not in fields}
    if fields.get("mix") is None:
        fields.pop("mix", None)
    return ExchangeOptions(strategy=spec.name, **fixed, **fields).bind(adaptive_optimizer)


def timing_of(opts: ExchangeOptions) -> str:
    """``lockstep``, ``stale`` or ``lagged``: the timing the shell builds for ``opts``
    (mirrors ``gossipgrad.engine.bucket.timing.make_timing``)."""
    if opts.max_lag:
        return "lagged"
    if opts.staleness:
        return "stale"
    return "lockstep"


def pattern_of(opts: ExchangeOptions) -> Any:
    """How the strategy moves a bucket: its registered exchange shape (a
    :class:`~gossipgrad.specs.ShapeSpec`, read by its attributes: ``moves``, ``sums``)."""
    return opts.spec.exchange_shape


def schedule_for(opts: ExchangeOptions, size: int) -> Schedule:
    """The schedule the shell builds at ``size`` ranks."""
    return Schedule(size, opts.rank_topology, opts.seed, opts.rotate)


def peer_table(schedule: Schedule, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, weight)`` of every rank at ``step`` (arrays of ``size``); an idle rank
    has itself as partner and weight 0."""
    n = schedule.size
    src, dst, weight = np.arange(n), np.arange(n), np.zeros(n)
    if n == 1:
        return src, dst, weight
    for r in range(n):
        p = schedule.peers(r, step)
        src[r], dst[r], weight[r] = p.src, p.dst, p.weight
    return src, dst, weight


def adaptive(optimizer: Any) -> bool:
    """Whether ``optimizer`` is Adam's kin (gossip then mixes gradients by default)."""
    return is_adaptive(optimizer)

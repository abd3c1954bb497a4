"""Gossip's consensus-distance monitor and adaptive averaging (``--sync adaptive``).

Every ``monitor_every`` steps every rank sketches its parameters (:mod:`.sketch`) and one
allreduce of ``bins + 1`` float64 gives every rank the same estimate of the consensus
distance. With adaptive averaging on, an estimate above ``sync_threshold`` triggers a global
average right there, which pulls the ranks' models back together (gradient mixing never
does; parameter mixing contracts them by itself). Consensus-distance-driven averaging after
Kong et al., "Consensus Control for Decentralized Deep Learning" (ICML 2021), who show that
training matches centralized SGD while the distance stays below a critical value.

Collective and deterministic: every rank calls :meth:`ConsensusMonitor.after_step` at every
step; every rank receives the same allreduce result and computes the decision from it with
the same code, so all take the same global average at the same step. (This relies on the
allreduce returning bit-identical sums on every rank, as the global average itself does;
a rank that disagreed would wait in a collective the others never enter, and the deadline
would end the job naming it.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_, allreduce_bytes
from gossipgrad.engine.bucket.sketch import (
    DEFAULT_BINS,
    CountSketch,
    estimate_distance,
    sketch_message,
)
from gossipgrad.engine.consensus import model_tensors
from gossipgrad.options import ExchangeOptions, Sync

log = logging.getLogger(__name__)


class ConsensusMonitor:
    """Estimates the consensus distance every ``monitor_every`` steps; with adaptive
    averaging, calls ``synchronize`` when the estimate exceeds the threshold.

    Args:
        model: the model whose parameters are watched (read only here).
        comm: the communicator (every rank builds the monitor with the same options).
        options: ``monitor_every``, ``sync_threshold``, ``adaptive``, ``seed`` are read.
        synchronize: the global average (``DistributedOptimizer.synchronize``).
        before_read: called before parameters are read (waits for parameter buckets
            still being mixed in, so the estimate sees this step's mixed values).
        bins: the sketch length.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions,
        synchronize: Callable[[], None],
        before_read: Callable[[], None],
        bins: int = DEFAULT_BINS,
    ) -> None:
        self.comm, self.every = comm, options.monitor_every if options.monitors else 0
        self.adaptive, self.threshold = options.adaptive, options.sync_threshold
        self.asked = options.sync is Sync.ADAPTIVE
        self._params = list(model.parameters())
        self._synchronize, self._before_read = synchronize, before_read
        # A global average reduces parameters and floating buffers as float64.
        self.average_bytes = 8 * sum(t.numel() for t in model_tensors(model))
        self.sketch = CountSketch(self._params, bins, options.seed) if self.active else None
        self.calls = self.syncs = 0
        self.seconds = self.sketch_seconds = 0.0
        self.max_distance = 0.0
        self.last_distance: float | None = None
        self.sync_steps: list[int] = []

    @property
    def active(self) -> bool:
        """Whether estimates are taken at all (gossip, more than one rank, every > 0)."""
        return self.every > 0 and self.comm.size > 1

    def estimate(self) -> float:
        """Collective: the sketched consensus distance of the parameters now (same value on
        every rank; 0.0 where nothing is monitored). Costs one allreduce of ``bins + 1``
        float64."""
        if self.sketch is None:
            return 0.0
        self._before_read()
        t0 = time.perf_counter()
        message = sketch_message(self.sketch.sketch([p.detach() for p in self._params]))
        self.sketch_seconds += time.perf_counter() - t0
        allreduce_(self.comm, message)
        return estimate_distance(message, self.comm.size)

    def after_step(self, step: int) -> bool:
        """Call after every step with the number of steps taken; collective on monitored
        steps. Returns True when it took a global average. ``seconds`` counts the estimate
        (sketch, allreduce and the wait in it for the slowest rank), not the average."""
        if not self.active or step % self.every:
            return False
        t0 = time.perf_counter()
        distance = self.estimate()
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.observe(distance)
        if not (self.adaptive and distance > self.threshold):
            return False
        self._synchronize()
        self.syncs += 1
        self.sync_steps.append(step)
        if self.comm.rank == 0:
            # INFO for a caller who asked for adaptive averaging; auto's averages are DEBUG
            # (-v): they are counted in the summary (syncs, sync_steps) either way
            log.log(
                logging.INFO if self.asked else logging.DEBUG,
                "step %d: consensus distance %.3g > threshold %.3g: global average (sync %d)",
                step,
                distance,
                self.threshold,
                self.syncs,
            )
        return True

    def observe(self, distance: float) -> None:
        """Record a consensus distance measured elsewhere (the exact one before an
        evaluation) in the maximum."""
        self.last_distance = distance
        self.max_distance = max(self.max_distance, distance)

    def sync_bytes(self) -> float:
        """Bytes one rank has sent for adaptive averages: syncs x the ring-allreduce volume
        of one global average, 2 (size - 1) / size x its float64 buffer (parameters and
        floating buffers), counted as ``bytes_sent_per_step`` counts allreduce."""
        return self.syncs * allreduce_bytes(self.average_bytes, self.comm.size)

    def summary(self) -> dict[str, Any]:
        """The monitor's figures for the training summary (all but ``monitor_seconds`` are
        identical on every rank)."""
        message_bytes = 8 * (self.sketch.bins + 1) if self.sketch is not None else 0
        return {
            "syncs": self.syncs,
            "sync_bytes": self.sync_bytes(),
            "sync_threshold": self.threshold if self.adaptive else None,
            "max_consensus_distance": self.max_distance,
            "monitor_every": self.every if self.active else 0,
            "monitor_calls": self.calls,
            "monitor_seconds": self.seconds,
            "monitor_sketch_seconds": self.sketch_seconds,
            "monitor_bytes_per_call": message_bytes,
        }


def monitor_log_fields(opt: Any) -> dict[str, Any]:
    """What a periodic log record carries: syncs so far and the latest estimate."""
    monitor = opt.monitor
    if monitor is None or not monitor.active:
        return {}
    return {"syncs": monitor.syncs, "consensus_estimate": monitor.last_distance}


def monitor_summary(opt: Any) -> dict[str, Any]:
    """``opt.monitor.summary()``, or the figures of no monitor for an optimizer without one
    (the horovod and ddp adapters: their ranks never drift)."""
    monitor = opt.monitor
    if monitor is not None:
        return monitor.summary()
    return {
        "syncs": 0,
        "sync_bytes": 0.0,
        "sync_threshold": None,
        "max_consensus_distance": 0.0,
        "monitor_every": 0,
        "monitor_calls": 0,
        "monitor_seconds": 0.0,
        "monitor_sketch_seconds": 0.0,
        "monitor_bytes_per_call": 0,
    }


def describe_monitor(summary: dict[str, Any]) -> str:
    """One line for the log from :meth:`ConsensusMonitor.summary`'s fields."""
    syncs = (
        f"{summary['syncs']} adaptive global averages above {summary['sync_threshold']:g} "
        f"({summary['sync_bytes'] / 1e6:.2f} MB sent)"
        if summary["sync_threshold"]
        else "adaptive averaging off"
    )
    return (
        f"max distance {summary['max_consensus_distance']:.3g}; {syncs}; "
        f"{summary['monitor_calls']} estimates every {summary['monitor_every']} steps took "
        f"{summary['monitor_seconds']:.3f} s ({summary['monitor_sketch_seconds']:.3f} s "
        "sketching)"
    )

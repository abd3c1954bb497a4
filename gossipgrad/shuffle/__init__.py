"""Asynchronous distributed sample shuffle: plan (pure), store, dataset view, worker thread.

See ``docs/shuffle.md`` for the design, the no-torn-batch rule, the stop protocol and the
thread-level policy.
"""

from __future__ import annotations

from gossipgrad.shuffle.dataset import ShardDataset, SnapshotBatchSampler
from gossipgrad.shuffle.plan import RoundPlan, ShufflePlan, plan_round
from gossipgrad.shuffle.store import PayloadKind, Sample, Samples, ShardStore
from gossipgrad.shuffle.worker import ShuffleError, ShuffleMode, ShuffleWorker

__all__ = [
    "PayloadKind",
    "RoundPlan",
    "Sample",
    "Samples",
    "ShardDataset",
    "ShardStore",
    "ShuffleError",
    "ShuffleMode",
    "ShufflePlan",
    "ShuffleWorker",
    "SnapshotBatchSampler",
    "plan_round",
]

"""The planner's memory check with a lossy wire codec, against the tensors a run holds.

Each rank's tensors after a few steps (every live tensor's storage, counted once; the ranks
share this process, so the total over ranks divided by their number) are compared with
:func:`gossipgrad.tools.plan.memory.estimate_memory` for the buckets the engine made. The codec
buffers' counts were read off other runs (other models and sizes); this checks they carry.
"""

from __future__ import annotations

import gc
import threading
import warnings

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.registry import CODECS
from gossipgrad.tools.bench.common import Trainer
from gossipgrad.tools.bench.strategies import strategy_kwargs
from gossipgrad.tools.plan.formats import Bucket, Profile
from gossipgrad.tools.plan.memory import estimate_memory


def _tensor_bytes() -> int:
    storages = {}
    with warnings.catch_warnings():  # isinstance on torch's deprecated module attributes
        warnings.simplefilter("ignore", FutureWarning)
        objects = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for obj in objects:
        storage = obj.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _measure(strategy: str, wire: str, size: int, width: int, layers: int, bucket_mb: float):
    """(bytes held per rank, the engine's bucket sizes, parameter bytes) after 3 steps."""
    barrier = threading.Barrier(size)
    out: dict = {}

    def body(comm):
        kw = strategy_kwargs(strategy, "param", bucket_mb, True, 0, "off", wire)
        trainer = Trainer(comm, strategy, width, layers, **kw)  # plain SGD: no state
        trainer.set_batch(2)
        try:
            for _ in range(3):
                trainer.step()
            barrier.wait(timeout=60)
            if comm.rank == 0:
                gc.collect()
                out["held"] = _tensor_bytes() / size
                out["buckets"] = [b.grads.numel() * 4 for b in trainer.opt.layout.buckets]
                out["params"] = sum(p.numel() * 4 for p in trainer.model.parameters())
            barrier.wait(timeout=60)
        finally:
            trainer.close()

    run_ranks(size, body)
    return out["held"], out["buckets"], out["params"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wire", ["bf16", "fp8"])
@pytest.mark.parametrize(
    "strategy, size, layers, per_node",
    [
        ("gossip", 3, 5, 1),
        ("allreduce", 3, 5, 1),
        ("ps", 3, 6, 1),  # ps: every rank owns as much
        ("gossip-node", 4, 5, 2),
        ("gossip-node", 4, 5, 4),
    ],
)
def test_estimate_is_near_what_the_run_holds(strategy, size, layers, per_node, wire, monkeypatch):
    monkeypatch.setenv("GOSSIPGRAD_RANKS_PER_NODE", str(per_node))  # gossip-node's nodes
    held, buckets, params = _measure(strategy, wire, size, 512, layers, 3)
    profile = Profile(
        "stack",
        2,
        "cpu",
        0.1,
        0.2,
        0.0,
        params,
        tuple(Bucket(i, n, 0.1) for i, n in enumerate(buckets)),
    )
    codec = CODECS.get(wire)
    estimate = estimate_memory(
        profile,
        strategy,
        size=size,
        optimizer_state_factor=0.0,
        wire_ratio=codec().wire_ratio(4),
        feedback=codec.feedback_default,
        ranks_per_node=per_node,
    )
    error = estimate.required_bytes / held - 1
    # the decoding scratch depends on which thread encodes: the estimate errs high
    assert -0.12 <= error <= 0.35, (error, estimate.describe(), held)
    without = estimate_memory(profile, strategy, size=size, optimizer_state_factor=0.0)
    assert estimate.required_bytes != without.required_bytes  # the codec's buffers counted

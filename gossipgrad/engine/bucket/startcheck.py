"""The first step's check: every rank starts from the same model and optimizer, and the
ranks' data differ.

Parameters are broadcast from rank 0 when an optimizer is built, but a script may change
them afterwards on some ranks only: Horovod's resume pattern loads a checkpoint on rank 0
and relies on ``broadcast_parameters`` after it. Forgotten, gossip would silently average
the checkpoint with the other ranks' fresh models. So the first ``step()`` (and the first
after ``load_state_dict``) compares, over all ranks, a hash of the parameters' bytes and
of the optimizer's settings, and raises on every rank when they differ. It also hashes the
first gradients before they are exchanged: identical on every rank means every rank read
the same samples, which is warned about once (a script that forgot ``DistributedSampler``
trains size copies of one rank).

Cost: hashing the parameters and one step's gradients once, two allreduces of 3 integers.
"""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.consensus import tensors_fingerprint

log = logging.getLogger(__name__)

SAMPLER_HINT = (
    "split the data between ranks, e.g. torch.utils.data.distributed.DistributedSampler("
    "dataset, num_replicas=size, rank=rank) (its defaults need a torch process group: "
    "gossipgrad.init(torch_distributed=True))"
)


def optimizer_fingerprint(optimizer: torch.optim.Optimizer, step: int) -> int:
    """A hash of the step count, every group's settings and how many parameters hold state
    (the state's values are not read)."""
    groups = [
        {k: v for k, v in g.items() if k != "params" and isinstance(v, int | float | bool | str)}
        for g in optimizer.param_groups
    ]
    text = json.dumps([step, groups, len(optimizer.state)], sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def agree_all(comm: Communicator, values: list[int], what: str, step: int) -> list[bool]:
    """Collective: for each value, whether every rank passed the same one."""
    lo = allreduce_(comm, np.array(values, dtype=np.int64), ReduceOp.MIN, what=what, step=step)
    hi = allreduce_(comm, np.array(values, dtype=np.int64), ReduceOp.MAX, what=what, step=step)
    return [bool(a == b == v) for a, b, v in zip(lo, hi, values, strict=True)]


class StartCheck:
    """Armed at construction and by ``load_state_dict``; runs at the next ``step()``.

    Call :meth:`note` with each gradient bucket before it is exchanged (the first step
    only keeps them), then :meth:`run` (collective) before the optimizer's update.
    """

    def __init__(self) -> None:
        self.pending = True
        self.after_load = False
        self._warned = False
        self._grads: dict[int, int] = {}

    def arm(self, after_load: bool = True) -> None:
        self.pending, self.after_load = True, after_load
        self._grads = {}

    def note(self, index: int, buf: torch.Tensor) -> None:
        """Bucket ``index``'s gradients, before their exchange (kept while pending)."""
        if self.pending and index not in self._grads:
            self._grads[index] = tensors_fingerprint([buf])

    def run(
        self,
        comm: Communicator,
        params: list[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        step: int,
        grads: list[torch.Tensor] | None,
    ) -> None:
        """Raise RuntimeError (on every rank) unless parameters and optimizer settings are
        identical; warn once when the gradients are too. ``grads``: this step's buckets
        (None: this rank computed none, e.g. it has joined)."""
        if not self.pending or comm.size == 1:
            self.pending = False
            return
        if grads is None:
            gfp = comm.rank  # differs from every other rank's: no warning
        else:
            for i, g in enumerate(grads):
                self.note(i, g)
            gfp = tensors_fingerprint([torch.tensor(sorted(self._grads.items()))])
        self.pending = False
        mine = [tensors_fingerprint(params), optimizer_fingerprint(optimizer, step), gfp]
        when = "after load_state_dict (was it called on every rank?)" if self.after_load else ""
        what = f"the identical-start check{' ' + when if when else ''}"
        same_params, same_opt, same_grads = agree_all(comm, mine, what, step)
        if not (same_params and same_opt):
            differ = "parameters" if not same_params else "optimizer settings or step count"
            raise RuntimeError(
                f"rank {comm.rank}, step {step}: the {differ} differ between ranks at the "
                f"first step{' after load_state_dict' if self.after_load else ''} (a "
                "checkpoint or model loaded on some ranks only?); load it on every rank, or "
                "broadcast it after loading: gossipgrad.torch.broadcast_parameters("
                "model.state_dict(), root_rank=0) and broadcast_optimizer_state(optimizer, "
                "root_rank=0)"
            )
        # all-zero gradients (a stand-in device's, or a model with nothing to learn yet) are
        # identical whatever each rank read: no hint about the samples
        informative = grads is not None and any(bool(g.any()) for g in grads)
        if same_grads and informative and not self._warned and comm.rank == 0:
            self._warned = True
            log.warning(
                "step %d: every rank computed the same gradients: are all %d ranks reading "
                "the same samples? %s",
                step,
                comm.size,
                SAMPLER_HINT,
            )

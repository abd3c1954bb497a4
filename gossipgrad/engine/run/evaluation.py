"""Validation of the consensus model: top-1/top-5 accuracy and loss, summed over ranks.

Each rank scores its own share of the validation set (``DataSource.eval_batches``); counts,
not rates, are allreduced, so uneven shares weigh correctly. The caller globally averages
the parameters first (``DistributedOptimizer.synchronize``), so every rank scores the same
model and the result is identical on every rank.
"""

from __future__ import annotations

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.data.sources import DataSource
from gossipgrad.models import logits


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    source: DataSource,
    comm: Communicator,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """``top1``, ``top5`` (fractions), ``test_loss`` and ``val_images`` over all ranks.

    ``test_accuracy`` repeats ``top1`` for the planner's convergence records. With fewer
    than five classes, top-5 is top-``classes`` (always 1.0).
    """
    model.eval()
    totals = np.zeros(4, dtype=np.float64)  # top-1 correct, top-5 correct, loss sum, count
    try:
        for x, y in source.eval_batches():
            if len(y) == 0:
                continue
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            out = logits(model(x))
            k = min(5, out.shape[1])
            top = out.topk(k, dim=1).indices
            hit = top == y[:, None]
            totals += [
                float(hit[:, 0].sum()),
                float(hit.any(dim=1).sum()),
                float(torch.nn.functional.cross_entropy(out, y, reduction="sum")),
                len(y),
            ]
    finally:
        model.train()
    allreduce_(comm, totals, ReduceOp.SUM, what="evaluation")
    top1, top5, loss, count = (float(v) for v in totals)
    n = max(1.0, count)
    return {
        "top1": top1 / n,
        "top5": top5 / n,
        "test_accuracy": top1 / n,
        "test_loss": loss / n,
        "val_images": int(count),
    }

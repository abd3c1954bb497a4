"""Validation of the consensus model: what its data's task measures, summed over ranks.

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
from gossipgrad.engine.run.tasks import Task, task_of


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    source: DataSource,
    comm: Communicator,
    device: torch.device | str = "cpu",
    task: Task | None = None,
) -> dict[str, float]:
    """The fields of ``task`` (default: the source's, :func:`~.tasks.task_of`) over all
    ranks: for a classifier ``top1``, ``top5`` (fractions), ``test_accuracy`` (= top1),
    ``test_loss`` and ``val_images``; for a language model ``test_loss`` (per token),
    ``test_perplexity`` and ``val_tokens``."""
    task = task or task_of(source)
    totals = np.zeros(task.eval_width, dtype=np.float64)
    model.eval()
    try:
        for x, y in source.eval_batches():
            if len(y) == 0:
                continue
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            totals += task.eval_sums(model(x), y)
    finally:
        model.train()
    allreduce_(comm, totals, ReduceOp.SUM, what="evaluation")
    return task.eval_fields(totals)

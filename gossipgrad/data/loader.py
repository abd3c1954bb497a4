"""A per-rank loader over in-memory tensors: this rank's shard, reshuffled every epoch.

Data order is seeded with ``seed + rank`` and the epoch, so the same seed and size give the
same batches run to run.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


class ShardLoader:
    """Batches of ``batch_size`` from ``x[indices]``; the last partial batch is dropped."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, indices: np.ndarray, batch_size: int,
                 seed: int, rank: int) -> None:
        if batch_size <= 0:
            raise ValueError(f"--batch-size must be > 0, got {batch_size}")
        if len(indices) < batch_size:
            raise ValueError(f"rank {rank}: --batch-size {batch_size} is larger than this rank's "
                             f"shard of {len(indices)} samples; lower --batch-size or use fewer "
                             "ranks")
        self.x, self.y, self.indices = x, y, np.asarray(indices)
        self.batch_size, self.seed, self.rank = batch_size, seed, rank
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.indices) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.batches(0)

    def batches(self, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches ``start, start + 1, ...`` of the current epoch (resume mid-epoch)."""
        rng = np.random.default_rng([self.seed + self.rank, self.epoch])
        order = self.indices[rng.permutation(len(self.indices))]
        for i in range(start, len(self)):
            idx = torch.from_numpy(order[i * self.batch_size:(i + 1) * self.batch_size])
            yield self.x[idx], self.y[idx]


def strided_indices(n: int, rank: int, size: int) -> np.ndarray:
    """Every ``size``-th index starting at ``rank`` (evaluation shares, nothing dropped)."""
    return np.arange(rank, n, size)

"""A per-rank loader over an in-memory shard store, reshuffled every epoch.

The shard lives in a :class:`gossipgrad.shuffle.ShardStore`, so the background shuffle can
swap samples in and out while training reads it; each batch is one consistent read of the
store (never torn). Data order is seeded with ``seed + rank`` and the epoch, so the same seed
and size give the same batches run to run.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from gossipgrad.shuffle import ShardStore


class ShardLoader:
    """Batches of ``batch_size`` from ``store``; the last partial batch is dropped."""

    def __init__(self, store: ShardStore, batch_size: int, seed: int, rank: int) -> None:
        if batch_size <= 0:
            raise ValueError(f"--batch-size must be > 0, got {batch_size}")
        if len(store) < batch_size:
            raise ValueError(
                f"rank {rank}: --batch-size {batch_size} is larger than this rank's "
                f"shard of {len(store)} samples; lower --batch-size or use fewer "
                "ranks"
            )
        self.store, self.batch_size, self.seed, self.rank = store, batch_size, seed, rank
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.store) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.batches(0)

    def batches(self, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches ``start, start + 1, ...`` of the current epoch (resume mid-epoch)."""
        rng = np.random.default_rng([self.seed + self.rank, self.epoch])
        order = rng.permutation(len(self.store))
        for i in range(start, len(self)):
            batch = self.store.read(order[i * self.batch_size : (i + 1) * self.batch_size])
            yield batch.payload, torch.from_numpy(batch.labels)


def strided_indices(n: int, rank: int, size: int) -> np.ndarray:
    """Every ``size``-th index starting at ``rank`` (evaluation shares, nothing dropped)."""
    return np.arange(rank, n, size)

"""A ``torch.utils.data.Dataset`` over the live shard store, so training reads swapped samples.

Two ways to load batches, both honouring the store's no-torn-batch rule (one
:meth:`~gossipgrad.shuffle.store.ShardStore.read` per batch):

- ``DataLoader(ShardDataset(store), batch_size=B, shuffle=True)`` with ``num_workers=0``:
  the loader calls ``__getitems__`` with the whole batch of slot indices;
- ``DataLoader(ds, batch_sampler=SnapshotBatchSampler(store, B), num_workers=W)``: the
  sampler (which runs in the main process) snapshots each batch, the worker processes only
  transform (decode) the copies. Worker processes hold a stale copy of the store, so a
  ``ShardDataset`` asked for slot indices inside a worker raises instead of reading it.

Example::

    >>> import torch
    >>> from gossipgrad.shuffle.store import ShardStore
    >>> store = ShardStore.of_tensors([5, 6], [1, 0], torch.ones(2, 3))
    >>> x, y = next(iter(torch.utils.data.DataLoader(ShardDataset(store), batch_size=2)))
    >>> (tuple(x.shape), y.tolist())
    ((2, 3), [1, 0])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from gossipgrad.shuffle.store import PayloadKind, Sample, ShardStore

__all__ = ["ShardDataset", "SnapshotBatchSampler"]


class ShardDataset(torch.utils.data.Dataset):
    """Slot ``i`` of the live store as ``(x, label)`` (``(x, label, sample_id)`` with ids).

    Args:
        store: the rank's live shard store (read, never modified).
        transform: applied to the payload: the tensor (tensor kind), the encoded ``bytes``
            (bytes kind, e.g. a JPEG decoder), or the sample id (index kind, e.g.
            ``lambda i: image_folder[i][0]`` for a dataset on a shared file system).
        with_ids: also return the global sample id (for tests and checks).
    """

    def __init__(
        self,
        store: ShardStore,
        transform: Callable[[Any], Any] | None = None,
        with_ids: bool = False,
    ) -> None:
        self.store, self.transform, self.with_ids = store, transform, with_ids

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int | Sample) -> tuple:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int] | list[Sample]) -> list[tuple]:
        """A whole batch: slot indices are read under one lock hold; snapshots pass through."""
        if indices and all(isinstance(i, Sample) for i in indices):
            samples = list(indices)
        else:
            if torch.utils.data.get_worker_info() is not None:
                raise RuntimeError(
                    "ShardDataset got slot indices in a DataLoader worker process, whose copy of "
                    "the shard never sees shuffle rounds; pass batch_sampler="
                    "SnapshotBatchSampler(store, batch_size) or use num_workers=0"
                )
            samples = self.store.read(indices).items()
        return [self._item(s) for s in samples]

    def _item(self, s: Sample) -> tuple:
        x = s.sample_id if self.store.kind is PayloadKind.INDEX else s.payload
        if self.transform is not None:
            x = self.transform(x)
        return (x, s.label, s.sample_id) if self.with_ids else (x, s.label)


class SnapshotBatchSampler(torch.utils.data.Sampler):
    """Yields each batch as a snapshot of its slots, taken when the loader asks for it.

    The order is a permutation of the slots seeded by ``(seed, epoch)``; call
    :meth:`set_epoch` each epoch. Slots are fixed, contents are live: a sample that arrives
    in a slot already visited this epoch waits for the next epoch on this rank.
    """

    def __init__(
        self,
        store: ShardStore,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.store, self.batch_size, self.shuffle = store, batch_size, shuffle
        self.seed, self.drop_last, self.epoch = seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n = len(self.store)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[Sample]]:
        n = len(self.store)
        order = (
            np.random.default_rng((self.seed, self.epoch)).permutation(n)
            if self.shuffle
            else np.arange(n)
        )
        for b in range(len(self)):
            yield self.store.read(order[b * self.batch_size : (b + 1) * self.batch_size]).items()

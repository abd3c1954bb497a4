"""A simulated job's data: the task's tensors, every rank's shard, its batches and the
background shuffle, as ``gossipgrad train`` has them.

- Shards: :func:`gossipgrad.data.partition.partition` (``iid``, ``sorted``,
  ``dirichlet:ALPHA``) with the job's seed, as ``TensorSource`` cuts them.
- Batches: every epoch, rank r reads its shard in the order of
  ``default_rng([seed + r, epoch]).permutation(shard_len)``, ``batch`` slots a step, the
  last partial batch dropped (``ShardLoader``), so every rank takes ``shard_len // batch``
  steps an epoch.
- Shuffle: the worker's rounds are pinned to steps (``ShuffleWorker.on_step``): after step
  t with ``t % every == 0`` the round started at the previous boundary is written into
  the slots its plan names, and round ``t // every`` starts by reading the slots it sends
  (:class:`gossipgrad.shuffle.plan.ShufflePlan`, the runtime's pure plan). The contents
  of every shard at every step are therefore a function of the seed, which is why the
  simulator can hold all of them as one array of sample ids.

    >>> import torch
    >>> task = Task(torch.zeros(12, 2), torch.arange(12) % 3)
    >>> shards = Shards(task.train_y.numpy(), size=3, batch=2, seed=0)
    >>> shards.ids.shape, shards.steps_per_epoch, shards.batch(0).shape
    ((3, 4), 2, (3, 2))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gossipgrad.tools.simulate.runtime import ShufflePlan, partition


@dataclass
class Task:
    """A classification task in memory: training tensors and an optional test split."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor | None = None
    test_y: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if len(self.train_x) != len(self.train_y):
            raise ValueError(
                f"the training inputs and labels differ in length: {len(self.train_x)} != "
                f"{len(self.train_y)}"
            )
        if (self.test_x is None) != (self.test_y is None):
            raise ValueError("give both test inputs and test labels, or neither")
        if self.test_x is not None and len(self.test_x) != len(self.test_y):
            raise ValueError("the test inputs and labels differ in length")
        self.train_y = self.train_y.long()
        if self.test_y is not None:
            self.test_y = self.test_y.long()

    @property
    def classes(self) -> int:
        top = int(self.train_y.max()) if len(self.train_y) else 0
        if self.test_y is not None and len(self.test_y):
            top = max(top, int(self.test_y.max()))
        return top + 1


def as_task(data: Any) -> Task:
    """A :class:`Task` from what a user has: a ``Task``; an object with ``train_x``,
    ``train_y``, ``test_x``, ``test_y`` (the runtime's ``TensorData``); a tuple ``(x, y)``
    or ``(train_x, train_y, test_x, test_y)`` of tensors or arrays; or a pair of map-style
    datasets ``(train, test)`` whose items are ``(input, label)`` (read once into memory)."""
    if isinstance(data, Task):
        return data
    if hasattr(data, "train_x") and hasattr(data, "train_y"):
        return Task(data.train_x, data.train_y, data.test_x, data.test_y)
    if isinstance(data, Sequence) and len(data) in (2, 4):
        if all(_tensorish(d) for d in data):
            return Task(*(torch.as_tensor(d) for d in data))
        if len(data) == 2 and all(hasattr(d, "__getitem__") for d in data):
            return Task(*_materialise(data[0]), *_materialise(data[1]))
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return Task(*_materialise(data))
    raise ValueError(
        "data must be a Task, (x, y), (train_x, train_y, test_x, test_y), a dataset of "
        f"(input, label) items or a pair (train, test) of them; got {type(data).__name__}"
    )


def _tensorish(d: Any) -> bool:
    return isinstance(d, torch.Tensor | np.ndarray)


def _materialise(dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dataset[i] for i in range(len(dataset))]
    if not items:
        raise ValueError("the dataset is empty")
    xs = torch.stack([torch.as_tensor(x) for x, _ in items])
    ys = torch.as_tensor([int(y) for _, y in items])
    return xs, ys


class Shards:
    """The sample ids every rank's shard holds, ``ids[rank, slot]``, and their batches.

    Args:
        labels: the training labels (partitions read them).
        size: ranks.
        batch: samples per rank and step.
        seed: the job's seed (partition, data order, shuffle plan).
        kind: ``iid``, ``sorted`` or ``dirichlet:ALPHA``.
        shuffle: run the background shuffle's rounds.
        every, samples: a round every ``every`` steps swaps ``samples`` slots.
        topology: the exchange's topology (the shuffle follows it, as the trainer's does).
    """

    def __init__(
        self,
        labels: np.ndarray,
        size: int,
        batch: int,
        seed: int = 0,
        kind: str = "iid",
        shuffle: bool = False,
        every: int = 2,
        samples: int = 8,
        topology: str = "auto",
    ) -> None:
        self.ids = np.stack(partition(np.asarray(labels), size, kind, seed))
        self.size, self.batch_size, self.seed = size, batch, seed
        shard = self.ids.shape[1]
        if batch > shard:
            raise ValueError(
                f"a batch of {batch} is larger than each rank's shard of {shard} samples "
                f"({len(labels)} samples over {size} ranks); lower the batch or use fewer ranks"
            )
        self.steps_per_epoch = shard // batch
        self.every = every
        self.plan = None
        if shuffle and size > 1:
            self.plan = ShufflePlan(size, shard, min(samples, shard), seed, topology)
        self._inflight: list[Any] | None = None  # (plan, samples sent) per rank
        self._orders: tuple[int, np.ndarray] | None = None

    def batch(self, step: int) -> np.ndarray:
        """The sample ids of every rank's batch at ``step``: ``[size, batch]``."""
        epoch, i = divmod(step, self.steps_per_epoch)
        if self._orders is None or self._orders[0] != epoch:
            n = self.ids.shape[1]
            orders = [
                np.random.default_rng([self.seed + r, epoch]).permutation(n)
                for r in range(self.size)
            ]
            self._orders = (epoch, np.stack(orders))
        slots = self._orders[1][:, i * self.batch_size : (i + 1) * self.batch_size]
        return np.take_along_axis(self.ids, slots, axis=1)

    def on_step(self, step: int) -> None:
        """After ``step``: at a round boundary, write the round in flight into the shards and
        start the next one (what ``ShuffleWorker.on_step`` does on every rank)."""
        if self.plan is None or step % self.every:
            return
        self._apply()
        index = step // self.every
        rounds = [self.plan.round(r, index) for r in range(self.size)]
        self._inflight = [(p, self.ids[r, p.slots].copy()) for r, p in enumerate(rounds)]

    def _apply(self) -> None:
        if self._inflight is None:
            return
        for r, (p, _) in enumerate(self._inflight):
            if len(p.slots):
                self.ids[r, p.slots] = self._inflight[p.src][1]
        self._inflight = None

    def labels_held(self, labels: np.ndarray) -> np.ndarray:
        """How many distinct labels each rank's shard holds now (a skew's measure)."""
        return np.array([len(np.unique(labels[row])) for row in self.ids])

"""What the trainer reads: one ``DataSource`` per rank, whatever the data is.

    source = open_source(DataOptions(data="/datasets/imagenet", batch_size=32, workers=8),
                         rank=comm.rank, size=comm.size, seed=0)
    for x, y in source.train_batches(epoch, start=0): ...
    for x, y in source.eval_batches(): ...        # this rank's share of validation

Kinds: the embedded tensor datasets (digits, synthetic 8x8), byte-level text for language
models (``dataset="text"`` or ``"text:PATH"``, see ``gossipgrad.data.text``), an ImageFolder
(``data``, see ``gossipgrad.data.images``), and generated ImageNet-shaped images
(``synthetic=True``, for throughput runs). Every kind makes batch k of an epoch a pure function of
(seed, rank, epoch, k), so a run resumed mid-epoch continues with the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np
import torch

from gossipgrad import gpt
from gossipgrad.data.images import ImageFolderSource
from gossipgrad.data.loader import ShardLoader, strided_indices
from gossipgrad.data.partition import partition
from gossipgrad.data.tensors import TensorData, load_tensor_data
from gossipgrad.data.text import digest, is_text, read_files, text_data
from gossipgrad.options import DataOptions
from gossipgrad.shuffle import ShardStore
from gossipgrad.shuffle.store import Samples

#: Images per epoch of ``--synthetic`` data: the size of ImageNet-1k's train split.
SYNTHETIC_EPOCH = 1_281_167
IMAGENET_CLASSES = 1000


class DataSource(Protocol):
    """This rank's data. ``skipped`` counts unreadable samples dropped so far. A source
    whose ``task`` attribute is ``"lm"`` yields token sequences (``x`` and its next tokens
    ``y``, both ``[batch, time]``); without one it is classification."""

    name: str
    classes: int
    in_shape: tuple[int, ...]
    steps_per_epoch: int
    skipped: int

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        """Batches ``start, start + 1, ...`` of ``epoch`` (``(x, y)`` pairs)."""
        ...

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, ...]]: ...


class TensorSource:
    """An in-memory dataset: an equal train shard per rank (``--partition``) in a live
    :class:`~gossipgrad.shuffle.ShardStore` the background shuffle swaps samples into,
    reshuffled per epoch; a strided test share."""

    def __init__(
        self,
        name: str,
        batch_size: int,
        seed: int,
        rank: int,
        size: int,
        partition_kind: str = "iid",
        data: TensorData | None = None,
    ) -> None:
        data = data if data is not None else load_tensor_data(name)
        self.name, self.classes, self.in_shape = data.name, data.classes, data.in_shape
        shards = partition(data.train_y.numpy(), size, partition_kind, seed)
        ids = shards[rank]
        self.launch_ids = np.sort(np.concatenate(shards))  # every rank's at launch
        self._train = data.train_x, data.train_y  # views of the loaded set: refill_ reads them
        self.store = ShardStore.of_tensors(ids, data.train_y[ids], data.train_x[ids])
        self.loader = ShardLoader(self.store, batch_size, seed, rank)
        self.steps_per_epoch, self.skipped = len(self.loader), 0
        self.test_x, self.test_y = data.test_x, data.test_y
        self.facts = {"train samples": len(data.train_y), "test samples": len(data.test_y)}
        self.share = torch.from_numpy(strided_indices(len(data.test_y), rank, size))

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        self.loader.set_epoch(epoch)
        return self.loader.batches(start)

    def regroup(self, rank: int, size: int, epoch: int) -> None:
        """The survivors after a failure: the test set is split over ``size`` ranks at once.
        The train shard stays in this rank's store (a dead rank's shard is gone with it)."""
        self.share = torch.from_numpy(strided_indices(len(self.test_y), rank, size))

    def refill_(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """Put training samples ``ids`` into the store's ``slots`` (after a failure: the
        samples no live rank holds go to a replacement, or to slots held twice)."""
        x, y = self._train
        index = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        self.store.write_(slots, Samples(np.asarray(ids, np.int64), y[index].numpy(), x[index]))

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, ...]]:
        for i in range(0, len(self.share), 512):
            idx = self.share[i : i + 512]
            yield self.test_x[idx], self.test_y[idx]


class TextSource(TensorSource):
    """Byte-level text (:mod:`gossipgrad.data.text`): windows of ``context + 1`` bytes in
    the shard store (the background shuffle swaps whole windows), each batch split into
    the tokens and their successors. ``in_shape`` is ``(context,)``, ``classes`` 256."""

    task = "lm"
    EVAL_BATCH = 64  # windows per validation batch

    def __init__(
        self,
        dataset: str,
        context: int,
        batch_size: int,
        seed: int,
        rank: int,
        size: int,
        partition_kind: str = "iid",
    ) -> None:
        files = read_files(dataset)
        data = text_data(files, context, dataset)
        super().__init__(dataset, batch_size, seed, rank, size, partition_kind, data)
        self.in_shape = (context,)
        self.facts.update(
            {
                "text files": len(files),
                "text bytes": sum(len(b) for _, b in files),
                "text sha256": digest(files),
            }
        )

    @staticmethod
    def _split(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = windows.long()
        return w[:, :-1], w[:, 1:]

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        for windows, _ in super().train_batches(epoch, start):
            yield self._split(windows)

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, ...]]:
        for i in range(0, len(self.share), self.EVAL_BATCH):
            yield self._split(self.test_x[self.share[i : i + self.EVAL_BATCH]])


class SyntheticImages:
    """Random ``3 x image_size x image_size`` images and labels, generated once per rank.

    Training cycles through a pool of a few batches (no input pipeline cost: measures the
    model and the exchange); validation is one batch per rank.
    """

    POOL = 4

    def __init__(
        self, image_size: int, classes: int, batch_size: int, seed: int, rank: int, size: int
    ) -> None:
        self.name, self.classes = "synthetic-images", classes
        self.in_shape = (3, image_size, image_size)
        self.steps_per_epoch = max(1, SYNTHETIC_EPOCH // (batch_size * size))
        self.skipped = 0
        g = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])
        )
        n = (self.POOL + 1) * batch_size
        self.x = torch.randn(n, *self.in_shape, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.batch_size = batch_size

    def _batch(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.batch_size
        return self.x[k * b : (k + 1) * b], self.y[k * b : (k + 1) * b]

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        for k in range(start, self.steps_per_epoch):
            yield self._batch((epoch * self.steps_per_epoch + k) % self.POOL)

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, ...]]:
        yield self._batch(self.POOL)


def open_source(
    options: DataOptions,
    *,
    rank: int,
    size: int,
    seed: int = 0,
    pin_memory: bool = False,
    read_timeout: float | None = None,
) -> DataSource:
    """The source the options select: ``synthetic`` > ``data`` (ImageFolder) > ``dataset``
    (text, or an in-memory tensor dataset).

        ``num_classes`` sets the class count of synthetic images (0: 1000, as ImageNet-1k).
        ``read_timeout``: the seconds one ImageFolder sample may take to read (None: no limit).
        Raises ValueError naming the path or value for unusable input. A source's ``facts``
        (a dict) are what every rank must have found alike (compared at start-up).
    """
    o = options
    if o.synthetic:
        return SyntheticImages(
            o.image_size, o.num_classes or IMAGENET_CLASSES, o.batch_size, seed, rank, size
        )
    if o.data:
        source: DataSource = ImageFolderSource(
            o.data,
            o.image_size,
            o.batch_size,
            o.workers,
            seed,
            rank,
            size,
            o.skip_corrupt,
            pin_memory,
            read_timeout,
        )
    elif is_text(o.dataset):
        context = o.context or gpt.CONTEXT
        source = TextSource(o.dataset, context, o.batch_size, seed, rank, size, o.partition)
    else:
        source = TensorSource(o.dataset, o.batch_size, seed, rank, size, o.partition)
    if o.num_classes and o.num_classes != source.classes:
        raise ValueError(
            f"--num-classes {o.num_classes} does not match the {source.classes} "
            f"classes of {o.data or o.dataset}; drop --num-classes or fix the data"
        )
    return source

"""ImageNet-style data: an ImageFolder (DATA/train, DATA/val) read in per-rank shards.

    gossipgrad train -a resnet50 --data /datasets/imagenet -j 8

Layout: ``DATA/train/<class>/<image>`` and ``DATA/val/<class>/<image>`` with the same class
folders in both (torchvision ``ImageFolder``). Train: RandomResizedCrop(image_size),
horizontal flip, ImageNet normalisation. Validation: resize to ``image_size * 256 / 224``,
center crop, normalisation.

Sharding and order: rank r reads the strided shard ``r, r + size, ...`` of DATA/train,
permuted every epoch by ``default_rng([seed + rank, epoch])``; the last partial batch is
dropped. Validation is split the same way (nothing dropped); callers sum counts over ranks.

Exact resume: batch k of an epoch is a pure function of (seed, rank, epoch, k), and every
sample's augmentation is drawn from a generator seeded by (seed, epoch, sample index) inside
the worker, never from a worker's own RNG stream, so a run resumed at batch k sees the same
pixels as an uninterrupted run, for any number of DataLoader workers.

Unreadable images: by default the first one ends the job with a ValueError naming the file;
with ``skip_corrupt`` they are dropped from their batch and counted (``skipped``). A read
that does not finish within ``read_timeout`` (a stalled file system, a FIFO) always ends the
job, naming the file and the rank (``gossipgrad.data.deadline``).

Every rank does as many steps per epoch: the smallest shard's batches (shards differ by one
image when the count is not a multiple of the ranks).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from gossipgrad.data.deadline import DeadlineReader, Stalled
from gossipgrad.data.loader import strided_indices

log = logging.getLogger(__name__)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for one sample's augmentation in one epoch (same on every rank)."""
    return int(np.random.SeedSequence([seed, epoch, index]).generate_state(2, np.uint64)[0]) >> 1


def ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: workers leave SIGUSR1/SIGTERM to the training process.

    Slurm signals every process of a rank; only the rank's main process checkpoints (see
    ``gossipgrad.engine.run.signals``), and workers stop when it shuts its loader down.
    """
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)


def scan_split(
    root: str, split: str, classes: list[str] | None = None
) -> tuple[list[tuple[str, int]], list[str]]:
    """``(samples, classes)`` of ``root/split``; ValueError naming the path if unusable.

    ``classes`` (from the train split) fixes the label numbering; the split must have
    exactly those class folders.
    """
    from torchvision.datasets.folder import make_dataset

    path = os.path.join(root, split)
    if not os.path.isdir(path):
        raise ValueError(
            f"{path} does not exist or is not a directory; --data must hold "
            f"train/<class>/<image> and val/<class>/<image>"
        )
    found = sorted(e.name for e in os.scandir(path) if e.is_dir())
    if not found:
        raise ValueError(f"{path} has no class folders; expected {path}/<class>/<image>")
    if classes is not None and found != classes:
        missing, extra = sorted(set(classes) - set(found)), sorted(set(found) - set(classes))
        raise ValueError(
            f"{path} has different class folders from the train split: "
            f"missing {missing[:5]}, extra {extra[:5]}"
        )
    classes = found
    samples = make_dataset(
        path, {c: i for i, c in enumerate(classes)}, EXTENSIONS, allow_empty=True
    )
    counts = np.bincount([y for _, y in samples], minlength=len(classes))
    empty = [c for c, n in zip(classes, counts, strict=True) if n == 0]
    if empty:
        raise ValueError(
            f"class folder {os.path.join(path, empty[0])} holds no images "
            f"({len(empty)} empty in all; extensions {', '.join(EXTENSIONS)}); "
            "add images or remove the folder"
        )
    return samples, classes


def transforms(image_size: int, train: bool) -> Any:
    from torchvision import transforms as T

    norm = [T.ToTensor(), T.Normalize(MEAN, STD)]
    if train:
        return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), *norm])
    return T.Compose([T.Resize(image_size * 256 // 224), T.CenterCrop(image_size), *norm])


STALLED = "stalled: "
"""How an error string from :class:`ImageSamples` starts when the read passed its deadline."""


def decode(path: str) -> Any:
    """The RGB image at ``path``, read and decoded completely (within one deadline)."""
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class ImageSamples(torch.utils.data.Dataset):
    """Decodes ``samples[index]``; keys are ``(index, epoch)`` (epoch < 0: no augmentation
    seed needed). Returns ``(image, label, error)``; ``error`` is '' or names the file
    (starting with :data:`STALLED` when reading it passed ``read_timeout``)."""

    def __init__(
        self,
        samples: list[tuple[str, int]],
        transform: Any,
        seed: int,
        read_timeout: float | None = None,
    ) -> None:
        self.samples, self.transform, self.seed = samples, transform, seed
        self.reader = DeadlineReader(read_timeout)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor | None, int, str]:
        from PIL import Image

        index, epoch = key
        path, label = self.samples[index]
        try:
            img = self.reader.call(decode, path)
        except Stalled as exc:
            return None, label, STALLED + str(exc)
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            return None, label, f"{path} ({type(exc).__name__}: {exc})"
        if epoch >= 0:
            torch.manual_seed(sample_seed(self.seed, epoch, index))
        return self.transform(img), label, ""


def collate(
    items: list[tuple[torch.Tensor | None, int, str]],
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Stack the decodable samples; pass the unreadable ones' descriptions along."""
    good = [(x, y) for x, y, err in items if not err]
    bad = [err for _, _, err in items if err]
    x = torch.stack([g[0] for g in good]) if good else torch.empty(0)
    return x, torch.tensor([g[1] for g in good], dtype=torch.int64), bad


class ImageFolderSource:
    """This rank's view of an ImageFolder: sharded train batches and a validation share."""

    def __init__(
        self,
        root: str,
        image_size: int,
        batch_size: int,
        workers: int,
        seed: int,
        rank: int,
        size: int,
        skip_corrupt: bool = False,
        pin_memory: bool = False,
        read_timeout: float | None = None,
    ) -> None:
        if workers < 0:
            raise ValueError(f"--workers must be >= 0, got {workers}")
        train, self.class_names = scan_split(root, "train")
        val, _ = scan_split(root, "val", self.class_names)
        self.name, self.classes = f"imagefolder:{len(train)}", len(self.class_names)
        self.in_shape = (3, image_size, image_size)
        self.facts = {
            "class names": tuple(self.class_names),
            "train images": len(train),
            "val images": len(val),
        }
        self.train = ImageSamples(train, transforms(image_size, True), seed, read_timeout)
        self.val = ImageSamples(val, transforms(image_size, False), seed, read_timeout)
        self.shard = strided_indices(len(train), rank, size)
        smallest = len(train) // size  # every rank does the smallest shard's steps
        if smallest < batch_size:
            raise ValueError(
                f"rank {rank}: --batch-size {batch_size} is larger than the smallest "
                f"shard of {smallest} images ({len(train)} in "
                f"{root}/train over {size} ranks); lower --batch-size or use "
                "fewer ranks"
            )
        self.val_share = strided_indices(len(val), rank, size)
        self.batch_size, self.workers, self.seed, self.rank = batch_size, workers, seed, rank
        self.skip_corrupt, self.pin_memory = skip_corrupt, pin_memory
        self.skipped = 0
        self.steps_per_epoch = smallest // batch_size
        self._regrouped: tuple[int, np.ndarray, int] | None = None  # see regroup

    def regroup(self, rank: int, size: int, epoch: int) -> None:
        """The survivors after a failure: validation is split over ``size`` ranks at once;
        from ``epoch`` on, training reads the strided share ``rank, rank + size, ...`` of
        the whole file list (the dead rank's files included), still ``steps_per_epoch``
        batches, so an epoch draws a fresh random subset of the larger share."""
        self.val_share = strided_indices(len(self.val), rank, size)
        self._regrouped = (epoch, strided_indices(len(self.train), rank, size), rank)

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        """Batches ``start, start + 1, ...`` of ``epoch`` for this rank."""
        shard, rank = self.shard, self.rank
        if self._regrouped is not None and epoch >= self._regrouped[0]:
            _, shard, rank = self._regrouped
        order = shard[np.random.default_rng([self.seed + rank, epoch]).permutation(len(shard))]
        b = self.batch_size
        keys = [
            [(int(i), epoch) for i in order[k * b : (k + 1) * b]]
            for k in range(start, self.steps_per_epoch)
        ]
        return self._checked(self._loader(self.train, keys))

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, ...]]:
        b, idx = self.batch_size, self.val_share
        keys = [[(int(i), -1) for i in idx[k : k + b]] for k in range(0, len(idx), b)]
        return self._checked(self._loader(self.val, keys))

    def _loader(
        self, dataset: ImageSamples, batches: list[list[tuple[int, int]]]
    ) -> torch.utils.data.DataLoader:
        extra: dict[str, Any] = {}
        if self.workers:
            extra = {"worker_init_fn": ignore_stop_signals, "multiprocessing_context": "fork"}
        return torch.utils.data.DataLoader(
            dataset,
            batch_sampler=batches,
            collate_fn=collate,
            num_workers=self.workers,
            pin_memory=self.pin_memory,
            **extra,
        )

    def _checked(
        self, loader: torch.utils.data.DataLoader
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y, bad in loader:
            stalled = [b[len(STALLED) :] for b in bad if b.startswith(STALLED)]
            if stalled:
                raise ValueError(
                    f"rank {self.rank}: {stalled[0]}; check the file system on this node "
                    "(the other ranks were not waiting for nothing), or raise "
                    "--comm-timeout (a sample may take half of it)"
                )
            if bad and not self.skip_corrupt:
                raise ValueError(
                    f"rank {self.rank}: cannot read image {bad[0]}; replace or "
                    "remove the file, or pass --skip-corrupt to skip unreadable "
                    "images (they are counted)"
                )
            if bad:
                self.skipped += len(bad)
                log.warning("rank %d: skipped unreadable image %s", self.rank, "; ".join(bad))
            yield x, y

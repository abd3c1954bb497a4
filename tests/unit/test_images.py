"""ImageFolder data in one process: layout checks, shards, resumable order, corrupt files."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

try:
    from .imagefolder import corrupt, make_image_folder
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from imagefolder import corrupt, make_image_folder

from gossipgrad.data.images import ImageFolderSource, ignore_stop_signals, scan_split
from gossipgrad.data.sources import SyntheticImages, open_source
from gossipgrad.options import DataOptions

torch.set_num_threads(1)


def source(
    root: Path, rank: int = 0, size: int = 1, batch: int = 2, workers: int = 0, **kw
) -> ImageFolderSource:
    return ImageFolderSource(str(root), 32, batch, workers, seed=5, rank=rank, size=size, **kw)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_image_folder(tmp_path / "data")


def test_missing_train_split_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "val" / "ant").mkdir(parents=True)
    with pytest.raises(ValueError, match=f"{tmp_path}/train does not exist"):
        source(tmp_path)


def test_empty_class_folder_names_the_folder(folder: Path) -> None:
    (folder / "train" / "dog").mkdir()
    (folder / "val" / "dog").mkdir()
    with pytest.raises(ValueError, match=f"class folder {folder}/train/dog holds no images"):
        source(folder)


def test_val_classes_must_match_train(folder: Path) -> None:
    for f in (folder / "val" / "cat").iterdir():
        f.unlink()
    (folder / "val" / "cat").rmdir()
    with pytest.raises(ValueError, match=r"val has different class folders.*missing \['cat'\]"):
        source(folder)


def test_batch_larger_than_shard_is_refused(folder: Path) -> None:
    with pytest.raises(ValueError, match="--batch-size 7 is larger than the smallest shard of 6"):
        source(folder, rank=1, size=2, batch=7)


def test_shards_partition_the_train_split(folder: Path) -> None:
    samples, classes = scan_split(str(folder), "train")
    assert classes == ["ant", "bee", "cat"] and len(samples) == 12
    shards = [source(folder, rank=r, size=3).shard for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(12))
    assert [source(folder, rank=r, size=3).steps_per_epoch for r in range(3)] == [2, 2, 2]


def test_resumed_epoch_sees_the_same_pixels_with_any_worker_count(folder: Path) -> None:
    full = list(source(folder, batch=3).train_batches(epoch=1))
    tail = list(source(folder, batch=3, workers=2).train_batches(epoch=1, start=2))
    assert len(full) == 4 and len(tail) == 2
    for (x, y), (xt, yt) in zip(full[2:], tail, strict=True):
        assert torch.equal(y, yt) and torch.equal(x, xt)
    other = list(source(folder, batch=3).train_batches(epoch=2))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(full, other, strict=True))


def test_validation_is_split_and_complete(folder: Path) -> None:
    got = [
        torch.cat([y for _, y in source(folder, rank=r, size=2).eval_batches()]) for r in range(2)
    ]
    assert sorted(torch.cat(got).tolist()) == [0, 0, 1, 1, 2, 2]
    x, _ = next(source(folder).eval_batches())
    assert x.shape == (2, 3, 32, 32)


def test_corrupt_image_is_an_error_naming_the_file(folder: Path) -> None:
    bad = corrupt(folder / "train" / "bee" / "2.jpg")
    with pytest.raises(ValueError, match=f"cannot read image {bad}.*--skip-corrupt"):
        for _ in source(folder).train_batches(0):
            pass


def test_skip_corrupt_drops_and_counts(folder: Path) -> None:
    corrupt(folder / "train" / "bee" / "2.jpg")
    src = source(folder, workers=1, skip_corrupt=True)
    sizes = [len(y) for _, y in src.train_batches(0)]
    assert src.skipped == 1 and sorted(sizes) == [1, 2, 2, 2, 2, 2]


def test_workers_ignore_stop_signals() -> None:
    class Handlers(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, _i: int) -> tuple[bool, bool]:
            return (
                signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN,
                signal.getsignal(signal.SIGTERM) is signal.SIG_IGN,
            )

    loader = torch.utils.data.DataLoader(
        Handlers(), num_workers=1, batch_size=None, worker_init_fn=ignore_stop_signals
    )
    assert [tuple(x) for x in loader] == [(True, True)]


def test_synthetic_images_have_the_imagenet_shape_and_repeat_exactly() -> None:
    opts = DataOptions(batch_size=4, synthetic=True, image_size=64)
    src = open_source(opts, rank=1, size=2)
    assert isinstance(src, SyntheticImages)
    assert src.classes == 1000 and src.in_shape == (3, 64, 64)
    x, y = next(src.train_batches(0, start=5))
    x2, y2 = next(open_source(opts, rank=1, size=2).train_batches(0, start=5))
    assert x.shape == (4, 3, 64, 64) and torch.equal(x, x2) and torch.equal(y, y2)


def test_num_classes_must_match_real_data(folder: Path) -> None:
    with pytest.raises(ValueError, match="--num-classes 10 does not match the 3 classes"):
        open_source(
            DataOptions(batch_size=2, data=str(folder), image_size=32, num_classes=10),
            rank=0,
            size=1,
        )

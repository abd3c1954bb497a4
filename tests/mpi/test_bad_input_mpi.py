"""Bad input under real ``mpiexec -n 2``: a clear message naming the path or value, a
non-zero exit, no traceback, and nothing already saved lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

try:
    from . import launch
    from .imagefolder import corrupt, make_image_folder
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from imagefolder import corrupt, make_image_folder

    import launch

pytestmark = pytest.mark.mpi

TINY = [
    "-a",
    "resnet18",
    "--image-size",
    "32",
    "-b",
    "2",
    "-j",
    "1",
    "--epochs",
    "1",
    "--no-progress",
]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("clean"))


@pytest.fixture
def folder(clean: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(clean, tmp_path / "data"))


def fails_with(args: list[str], message: str, timeout: float = 120) -> None:
    proc = launch.gossipgrad(2, ["train", *args], timeout=timeout)
    assert proc.returncode != 0, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.timeout(150)
def test_missing_train_split(tmp_path: Path) -> None:
    fails_with(
        [*TINY, "--data", str(tmp_path)], f"{tmp_path}/train does not exist or is not a directory"
    )


@pytest.mark.timeout(150)
def test_empty_class_folder(folder: Path) -> None:
    (folder / "train" / "dog").mkdir()
    (folder / "val" / "dog").mkdir()
    fails_with([*TINY, "--data", str(folder)], f"class folder {folder}/train/dog holds no images")


@pytest.mark.timeout(150)
def test_corrupt_jpeg_is_named_unless_skipped(folder: Path) -> None:
    bad = corrupt(folder / "train" / "bee" / "1.jpg")
    fails_with([*TINY, "--data", str(folder)], f"cannot read image {bad}")
    # -b 3: the batch holding the skipped image shrinks to 2 (BatchNorm needs 2 at 1x1 px)
    proc = launch.gossipgrad(
        2, ["train", *TINY, "--data", str(folder), "--skip-corrupt", "-b", "3"], timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["skipped_corrupt"] == 1
    assert f"skipped unreadable image {bad}" in proc.stderr


@pytest.mark.timeout(150)
def test_batch_larger_than_shard(folder: Path) -> None:
    fails_with(
        [*TINY, "--data", str(folder), "-b", "7"],
        "--batch-size 7 is larger than the smallest shard of 6 images",
    )


@pytest.mark.timeout(150)
def test_unreadable_checkpoint_is_named_and_kept(folder: Path, tmp_path: Path) -> None:
    junk = tmp_path / "run" / "ckpt-000000004.pt"
    junk.parent.mkdir()
    junk.write_bytes(b"\x00" * 64)
    fails_with(
        [*TINY, "--data", str(folder), "--run-dir", str(junk.parent), "--resume", "auto"],
        f"cannot read checkpoint {junk}",
    )
    assert junk.read_bytes() == b"\x00" * 64


@pytest.mark.timeout(240)
def test_checkpoint_of_another_model_is_refused_and_kept(folder: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = launch.gossipgrad(
        2, ["train", *TINY, "--data", str(folder), "--run-dir", str(run), "-a", "cnn"], timeout=120
    )
    assert first.returncode == 0, first.stderr
    saved = sorted(run.iterdir())
    before = [p.read_bytes() for p in saved]
    fails_with(
        [*TINY, "--data", str(folder), "--run-dir", str(run), "--resume", "auto"],
        "arch is 'cnn' in the checkpoint but 'resnet18' in this run",
    )
    assert sorted(run.iterdir()) == saved and [p.read_bytes() for p in saved] == before


@pytest.mark.timeout(150)
def test_cuda_requested_without_cuda(folder: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    fails_with(
        [*TINY, "--data", str(folder), "--device", "cuda"],
        "--device cuda, but torch sees no CUDA device",
    )

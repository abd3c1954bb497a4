"""ImageNet models from the command line under real ``mpiexec -n 2`` on a tiny ImageFolder.

Each launch has a subprocess deadline and each test a pytest-timeout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

try:
    from . import launch
    from .imagefolder import make_image_folder
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from imagefolder import make_image_folder

    import launch

pytestmark = pytest.mark.mpi

TINY = ["--image-size", "32", "-b", "2", "-j", "1", "--no-progress"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("imagenet"))


def summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ["resnet50", "googlenet"])
def test_model_trains_and_reports_top1_top5(folder: Path, tmp_path: Path, arch: str) -> None:
    proc = launch.gossipgrad(
        2,
        [
            "train",
            "-a",
            arch,
            "--data",
            str(folder),
            "--epochs",
            "1",
            "--run-dir",
            str(tmp_path),
            *TINY,
        ],
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "step 3 (epoch 1.00): top1 " in proc.stderr and " top5 " in proc.stderr
    result = summary(proc.stdout)
    assert result["arch"] == arch and result["steps"] == 3 and result["size"] == 2
    assert 0 <= result["top1"] <= result["top5"] <= 1
    state = torch.load(tmp_path / "ckpt-000000003.pt", weights_only=True)
    assert state["compat"]["arch"] == arch and state["compat"]["classes"] == 3


@pytest.mark.timeout(180)
def test_synthetic_reports_images_per_second() -> None:
    proc = launch.gossipgrad(
        2,
        [
            "train",
            "-a",
            "resnet18",
            "--synthetic",
            "--max-steps",
            "4",
            "--image-size",
            "32",
            "-b",
            "4",
            "--no-progress",
        ],
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr
    assert "images/s" in proc.stderr
    result = summary(proc.stdout)
    assert result["images_per_s"] > 0 and result["dataset"] == "synthetic-images"


@pytest.mark.timeout(240)
def test_evaluate_only_scores_the_checkpoint_on_any_size(folder: Path, tmp_path: Path) -> None:
    trained = launch.gossipgrad(
        0,
        [
            "train",
            "-a",
            "resnet18",
            "--data",
            str(folder),
            "--epochs",
            "1",
            "--run-dir",
            str(tmp_path),
            *TINY,
        ],
        timeout=120,
    )
    assert trained.returncode == 0, trained.stderr
    proc = launch.gossipgrad(
        2,
        [
            "train",
            "-a",
            "resnet18",
            "--data",
            str(folder),
            "--evaluate",
            "--resume",
            str(tmp_path / "ckpt-000000006.pt"),
            *TINY,
        ],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result, before = summary(proc.stdout), summary(trained.stdout)
    assert result["steps"] == 6 and result["start_step"] == 6
    assert result["top1"] == pytest.approx(before["top1"])
    assert result["test_loss"] == pytest.approx(before["test_loss"], rel=1e-5)

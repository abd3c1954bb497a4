"""Horovod's three PyTorch examples (their structure, written here under tests/support/examples/)
run under mpiexec with gossip by changing ``import horovod.torch as hvd`` to
``import gossipgrad.torch as hvd`` and nothing else; the face's multi-rank checks.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import pytest
from imagefolder import make_image_folder

from launch import REPO, mpiexec, run

EXAMPLES = Path(REPO) / "tests" / "support" / "examples"
HOROVOD, FACE = "import horovod.torch as hvd", "import gossipgrad.torch as hvd"


def ported(name: str, tmp_path: Path) -> Path:
    """``tests/support/examples/NAME`` with its import line changed; fails unless that is the
    only line that differs."""
    text = (EXAMPLES / name).read_text()
    new = text.replace(HOROVOD, FACE)
    changed = [
        line
        for line in difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == [f"-{HOROVOD}", f"+{FACE}"], changed
    path = tmp_path / name
    path.write_text(new)
    return path


def launch(script: Path, ranks: int, *args: str, timeout: float = 400, **env: str):
    return run(
        [mpiexec(), "-n", str(ranks), sys.executable, str(script), *args],
        timeout=timeout,
        **env,
    )


@pytest.mark.mpi
@pytest.mark.timeout(500)
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "mixed-precision"])
def test_the_mnist_pattern_trains_with_gossip(tmp_path, amp):
    args = ["--epochs", "6", "--lr", "0.1", "--momentum", "0.9"]
    out = launch(ported("hvd_mnist.py", tmp_path), 4, *args, *(["--use-mixed-precision"] * amp))
    assert out.returncode == 0, out.stdout + out.stderr
    accuracy = [float(a) for a in re.findall(r"Accuracy: ([\d.]+)%", out.stdout)]
    assert len(accuracy) == 6, out.stdout  # printed once per epoch, by rank 0 only
    # Horovod itself: 70.25 with these flags. With SGD the face mixes parameters (the
    # default that follows the optimizer); under AMP one run peaked at 63.25 and ended at 55
    assert max(accuracy) > 60.0 and accuracy[-1] > 50.0, accuracy


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_the_imagenet_pattern_trains_checkpoints_and_resumes_from_rank_0(tmp_path):
    data = make_image_folder(tmp_path / "data", per_class=8, val_per_class=4)
    script = ported("hvd_imagenet.py", tmp_path)
    common = ["--train-dir", str(data / "train"), "--val-dir", str(data / "val")]
    fmt = ["--checkpoint-format", str(tmp_path / "ckpt-{epoch}.pt")]
    first = launch(script, 4, *common, *fmt, "--epochs", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "ckpt-1.pt").exists() and "resumed from 0" in first.stdout
    # rank 0 loads the checkpoint alone, then broadcasts: the identical-start check passes
    again = launch(script, 4, *common, *fmt, "--epochs", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done at epoch 2, resumed from 1" in again.stdout, again.stdout
    assert again.stdout.count("validate epoch 2") == 1, again.stdout


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_the_synthetic_benchmark_pattern_reports_images_per_second(tmp_path):
    out = launch(ported("hvd_synthetic.py", tmp_path), 2, "--num-iters", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+ \+-[\d.]+", out.stdout), out.stdout
    assert out.stdout.count("Model: resnet18") == 1


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_fp16_compression_runs_on_the_fp16_wire_codec(tmp_path):
    """Horovod's ``--fp16-allreduce`` pattern: ``Compression.fp16`` is gossipgrad's fp16
    codec (a scale per buffer), and the example trains with it."""
    out = launch(
        ported("hvd_synthetic.py", tmp_path),
        2,
        "--fp16-allreduce",
        "--num-iters",
        "2",
        timeout=200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Img/sec per CPU" in out.stdout, out.stdout


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_face_checks_on_four_ranks():
    out = launch(EXAMPLES / "face_checks.py", 4, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    sys.path.insert(0, str(EXAMPLES))
    try:
        import face_checks
    finally:
        sys.path.pop(0)
    for check in face_checks.ALL:
        assert f"PASS {check.__name__}\n" in out.stdout, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_an_uneven_end_without_join_ends_the_job_naming_the_rank(tmp_path):
    script = tmp_path / "uneven.py"
    script.write_text(
        "import torch\nimport gossipgrad.torch as hvd\n"
        "hvd.init()\nmodel = torch.nn.Linear(4, 2)\n"
        "opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),\n"
        "    named_parameters=model.named_parameters())\n"
        "for _ in range(5 if hvd.rank() == 1 else 9):\n"
        "    opt.zero_grad(); model(torch.randn(3, 4)).sum().backward(); opt.step()\n"
    )
    out = launch(script, 3, timeout=200)
    assert out.returncode != 0
    assert "rank 1 stopped after 5 steps without join() while rank 2 ran 9" in out.stderr, (
        out.stderr
    )

"""A DDP script ports to gossipgrad in five changed lines: PyTorch's ImageNet example's
structure (tests/support/examples/ddp_imagenet.py) runs under ``mpiexec`` with gossip, its
``DistributedSampler()``, ``dist.all_reduce`` of metrics, checkpoints and ``--resume``
unchanged (``gossipgrad.init(torch_distributed=True)`` brings up the gloo group).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import pytest
import torch

from launch import REPO, mpiexec, run

ORIGINAL = Path(REPO) / "tests" / "support" / "examples" / "ddp_imagenet.py"

#: The port, as (line of the original, what it becomes); docs/guide.md shows the same diff.
PORT = [
    ("import torch.distributed as dist", ["import gossipgrad", "import torch.distributed as dist"]),
    (
        "best_acc1 = 0",
        ["best_acc1 = 0", "comm = gossipgrad.init(torch_distributed=True)  # the gloo group too"],
    ),
    (
        "        dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url)",
        [],
    ),
    (
        "    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)",
        [
            "    optimizer = gossipgrad.DistributedOptimizer(optimizer, model, comm)",
            "    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)",
        ],
    ),
    (
        "        if not args.multiprocessing_distributed or args.rank % ngpus_per_node == 0:",
        ["        if comm.rank == 0:"],
    ),
]


def port(text: str) -> str:
    lines = text.splitlines()
    for old, new in PORT:
        assert lines.count(old) == 1, old
        i = lines.index(old)
        lines[i : i + 1] = new
    return "\n".join(lines) + "\n"


def changed_lines(a: str, b: str) -> int:
    """Lines changed, added or removed (a replaced line counts once)."""
    ops = difflib.SequenceMatcher(None, a.splitlines(), b.splitlines()).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def test_the_port_is_five_changed_lines():
    text = ORIGINAL.read_text()
    assert changed_lines(text, port(text)) == 5


def _summaries(stdout: str) -> list[str]:
    """Each rank's validation summary (`` *  Acc@1 ... Acc@5 ...``), found anywhere in the
    output: ranks share one stdout through the launcher, so two may land on one line."""
    return [m.strip() for m in re.findall(r" \*  Acc@1 +[\d.]+ Acc@5 +[\d.]+", stdout)]


def _launch(script: Path, tmp_path: Path, *args: str):
    return run(
        [
            mpiexec(),
            "-n",
            "4",
            sys.executable,
            str(script),
            "--dist-url",
            "env://",
            "--dummy",
            "--checkpoint",
            str(tmp_path / "checkpoint.pth.tar"),
            "--seed",
            "0",
            *args,
        ],
        timeout=400,
    )


@pytest.mark.mpi
@pytest.mark.timeout(900)
def test_the_ported_ddp_script_trains_checkpoints_resumes_and_evaluates(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(port(ORIGINAL.read_text()))
    out = _launch(script, tmp_path, "--epochs", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    summaries = _summaries(out.stdout)
    assert len(summaries) == 4 and len(set(summaries)) == 1, out.stdout  # all-reduced metrics
    assert "same gradients" not in out.stderr, out.stderr  # DistributedSampler split the data
    state = torch.load(tmp_path / "checkpoint.pth.tar", weights_only=True)
    assert state["epoch"] == 1 and "gossipgrad" in state["optimizer"]
    resumed = _launch(
        script, tmp_path, "--epochs", "2", "--resume", str(tmp_path / "checkpoint.pth.tar")
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("=> loaded checkpoint") == 4
    assert torch.load(tmp_path / "checkpoint.pth.tar", weights_only=True)["epoch"] == 2
    evaluated = _launch(script, tmp_path, "-e", "--resume", str(tmp_path / "checkpoint.pth.tar"))
    assert evaluated.returncode == 0 and len(_summaries(evaluated.stdout)) == 4

"""The language-model task under a real mpiexec (2 ranks, each launch with a deadline):
``gossipgrad train -a gpt`` on a user's text, and a nanoGPT-style loop through both faces
(``import gossipgrad.torch as hvd`` and ``gossipgrad.DistributedOptimizer``), checked
against the same loop in one process on the joined batch."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from gossipgrad.data.corpus import stdlib_dir

from launch import REPO, gossipgrad, mpiexec, run

LOOP = Path(REPO) / "tests" / "support" / "examples" / "lm_loop.py"


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_train_gpt_on_a_text_file_at_two_ranks(tmp_path: Path):
    text = tmp_path / "heapq.txt"
    text.write_bytes((Path(stdlib_dir()) / "heapq.py").read_bytes())
    metrics = tmp_path / "m.jsonl"
    args = ["train", "-a", "gpt", "--dataset", f"text:{text}", "--layers", "1", "--hidden"]
    args += ["32", "--heads", "2", "--context", "32", "-b", "8", "--max-steps", "6"]
    args += ["-p", "3", "--shuffle-every", "1", "--no-progress", "--metrics-out", str(metrics)]
    out = gossipgrad(2, args, timeout=150)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["arch"] == "gpt" and summary["size"] == 2 and summary["steps"] == 6
    assert summary["strategy"] == "gossip" and summary["mix"] == "grad"  # adamw's default
    assert summary["test_perplexity"] == pytest.approx(math.exp(summary["test_loss"]))
    assert summary["test_loss"] < math.log(256)  # below knowing nothing
    assert summary["tokens_per_s_per_rank"] > 0 and "top1" not in summary
    assert re.search(r"loss \d+\.\d+ perplexity \d+\.\d+ on \d+ val tokens", out.stderr)
    assert re.search(r"throughput: [\d.]+ tokens/s \([\d.]+ per rank\)", out.stderr)
    logs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in logs if r["event"] == "log"] == [3, 6]


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_nanogpt_loop_runs_unchanged_and_allreduce_is_the_joined_batch():
    faces = ["--face", "hvd", "--face", "library", "--steps", "8"]
    out = run([mpiexec(), "-n", "2", sys.executable, str(LOOP), *faces], timeout=150)
    assert out.returncode == 0, out.stdout + out.stderr
    for face in ("hvd", "library"):
        evals = re.search(rf"{face} EVALS 4:([\d.]+) 8:([\d.]+)", out.stdout)
        assert evals and float(evals[2]) < float(evals[1]) < math.log(256), out.stdout
        match = re.search(rf"{face} MATCH loss (\S+) params (\S+)", out.stdout)
        assert match and float(match[1]) < 1e-5 and float(match[2]) < 1e-5, out.stdout

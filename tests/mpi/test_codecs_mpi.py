"""Lossy wire codecs and base2 under a real mpiexec: the checks of
tests/support/multirank/codec_checks.py at odd sizes and one that is not a power of two, then the
digits job trained through ``gossipgrad train --wire ...`` for every strategy that takes a
codec (gossip both mixes, allreduce, ps, and DDP's own compression hook), at 3 ranks."""

from __future__ import annotations

import json

import pytest

from launch import gossipgrad, needs_horovod, run_check_module

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(420)
@pytest.mark.parametrize("size", [3, 5, 6])
def test_codec_checks_under_mpiexec(size):
    # more ranks than cores on a test machine: waits yield instead of spinning
    run_check_module("codec_checks", size, 400, "--yield-waits")


def _train(tmp_path, *flags: str, size: int = 3) -> dict:
    metrics = tmp_path / "m.jsonl"
    out = gossipgrad(
        size,
        ["train", "--no-progress", "--epochs", "3", "--metrics-out", str(metrics), *flags],
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


RUNS = [
    ("gossip-param-bf16", ["--wire", "bf16"], 0.5),
    ("gossip-grad-fp8", ["--wire", "fp8", "--mix", "grad", "--sufficient-factors", "off"], 0.252),
    ("gossip-param-fp16-stale", ["--wire", "fp16", "--staleness", "1"], 0.5),
    ("gossip-lag-fp8", ["--wire", "fp8", "--max-lag", "2"], 0.252),
    ("allreduce-fp16", ["--strategy", "allreduce", "--wire", "fp16"], 0.5),
    ("ps-bf16", ["--strategy", "ps", "--wire", "bf16"], 0.5),
    ("ddp-bf16", ["--strategy", "ddp", "--wire", "bf16"], 0.5),
]


@pytest.fixture(scope="module")
def fp32_run(tmp_path_factory):
    """The summary of the same run on the fp32 wire, by strategy-and-flags key (computed on
    first use)."""
    cache: dict[str, dict] = {}

    def get(flags: list[str]) -> dict:
        base = [f for f in flags if f not in ("bf16", "fp16", "fp8", "--wire")]
        key = " ".join(base)
        if key not in cache:
            cache[key] = _train(tmp_path_factory.mktemp("fp32"), *base)
        return cache[key]

    return get


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name, flags, ratio", RUNS, ids=[r[0] for r in RUNS])
def test_a_lossy_wire_trains_digits_under_mpiexec(tmp_path, fp32_run, name, flags, ratio):
    summary = _train(tmp_path, *flags)
    fp32 = fp32_run(flags)
    assert summary["wire"] == flags[flags.index("--wire") + 1], summary
    # 3 epochs at 3 ranks (42 steps) end near 0.8 on fp32; the codec costs at most a point
    assert fp32["top1"] > 0.7, fp32
    if "--max-lag" not in flags:
        assert summary["top1"] >= fp32["top1"] - 0.01, (summary, fp32)
        assert summary["consensus_distance"] < 1e-2, summary
    else:
        # Under --max-lag a rank that is behind skips its step (docs/train.md, "Stragglers"): which
        # and how many depends on the machine's load, not on the codec; three fp32 runs on an
        # idle 2-core host ended at 0.76 to 0.79. Within 6 points of fp32 unless this run
        # skipped more of its samples, and clearly trained in any case.
        more_skipped = summary["samples_skipped"] > fp32["samples_skipped"]
        assert summary["top1"] >= fp32["top1"] - 0.06 or more_skipped, (summary, fp32)
        assert summary["top1"] > 0.6, summary
    want = ratio * fp32["bytes_sent_per_step"]
    assert summary["bytes_sent_per_step"] == pytest.approx(want, rel=0.01), summary


@pytest.mark.horovod
@pytest.mark.timeout(600)
@needs_horovod
def test_horovod_trains_with_its_fp16_compression(tmp_path):
    summary = _train(tmp_path, "--strategy", "horovod", "--wire", "fp16")
    full = _train(tmp_path, "--strategy", "horovod")
    assert summary["wire"] == "fp16" and full["top1"] > 0.7, (summary, full)
    assert summary["top1"] >= full["top1"] - 0.01, (summary, full)  # 3 epochs: near 0.8
    assert summary["bytes_sent_per_step"] == pytest.approx(0.5 * full["bytes_sent_per_step"])

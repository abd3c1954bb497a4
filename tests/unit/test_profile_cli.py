"""``gossipgrad profile`` and the profiler behind it: phases, per-parameter ready times."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.models import build_model
from gossipgrad.tools.measure.profiler import ArchRun, layout_profile, profile_arch, profile_step
from gossipgrad.tools.plan.formats import Profile

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gossipgrad", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_profile_cli_writes_a_valid_profile_in_backward_order(tmp_path):
    out = tmp_path / "profile.json"
    args = ["profile", "-a", "mlp", "--hidden", "64", "-b", "8"]
    proc = run_cli(*args, "--steps", "5", "--warmup", "2", "--threads", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "per-parameter buckets" in proc.stderr
    prof = Profile.load(out)  # validates every field
    ready = [b.ready_s for b in prof.buckets]
    assert ready == sorted(ready)
    assert all(0 <= r <= prof.backward_s for r in ready)
    assert prof.forward_s > 0 and prof.backward_s > 0 and prof.optimizer_s > 0
    model = build_model("mlp", (1, 8, 8), 10, 64)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert prof.param_bytes == prof.grad_bytes == nbytes
    assert len(prof.buckets) == len(list(model.parameters()))
    assert prof.batch_size == 8 and prof.memory_bytes is None  # CPU: no device memory


class Sleep(torch.autograd.Function):
    """Identity that sleeps ``fwd`` seconds forward and ``bwd`` seconds backward."""

    @staticmethod
    def forward(ctx, x, fwd, bwd):
        time.sleep(fwd)
        ctx.bwd = bwd
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.bwd)
        return grad, None, None


class Slow(torch.nn.Module):
    """first -> sleep (10 ms forward, 30 ms backward) -> second; ``extra`` is never used."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 2)
        self.extra = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.second(Sleep.apply(self.first(x), 0.01, 0.03))


def test_ready_times_follow_backward_and_phases_are_measured():
    model = Slow()
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    result = profile_step(model, x, y, steps=3, warmup=1, label="slow")
    prof = result.profile
    names = [p.name for p in result.params]
    assert sorted(names[:2]) == ["second.bias", "second.weight"]  # ready before the sleep
    assert sorted(names[2:4]) == ["first.bias", "first.weight"]  # ready after it
    assert sorted(names[4:]) == ["extra.bias", "extra.weight"]  # no gradient: last
    ready = {p.name: p.ready_s for p in result.params}
    # per step first >= second + 30 ms, so the medians keep that gap (lower bounds only: a
    # busy machine may add time anywhere)
    assert ready["first.weight"] - ready["second.weight"] >= 0.03
    assert ready["extra.weight"] == ready["extra.bias"] == prof.backward_s
    assert prof.forward_s >= 0.01 and prof.backward_s >= 0.03
    assert [b.index for b in prof.buckets] == [p.index for p in result.params]
    assert prof.param_bytes == prof.grad_bytes == 4 * (16 + 4 + 8 + 2 + 2 + 1)
    assert result.to_json()["buckets"][0]["name"] == names[0]
    # the hooks are gone: another backward records nothing new
    assert all(not getattr(p, "_post_accumulate_grad_hooks", None) for p in model.parameters())


def test_layout_profile_mirrors_the_engine_buckets():
    model = Slow()
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    result = profile_step(model, x, y, steps=1, warmup=0)
    ready = {p.name: p.ready_s for p in result.params}
    # reverse registration: extra.bias (4 B), extra.weight (8), second.bias (8),
    # second.weight (32) | first.bias (16) | first.weight (64); listed by ready time
    prof = layout_profile(result, model, cap_bytes=52)
    assert sorted(b.bytes for b in prof.buckets[:2]) == [16, 64]
    assert {b.ready_s for b in prof.buckets[:2]} == {ready["first.bias"], ready["first.weight"]}
    # the unused extra.* hold second.*'s bucket back to the end of backward, which merging
    # in backward order (the planner's rebucket) would not show
    assert (prof.buckets[2].bytes, prof.buckets[2].ready_s) == (52, prof.backward_s)
    one = layout_profile(result, model, cap_bytes=1 << 30)
    assert [b.bytes for b in one.buckets] == [prof.param_bytes]
    fine = layout_profile(result, model, cap_bytes=1)
    assert [b.ready_s for b in fine.buckets] == [b.ready_s for b in result.profile.buckets]
    assert layout_profile(result, Slow(), cap_bytes=52) == prof  # a rebuilt model works
    with pytest.raises(ValueError, match="model does not match the profile"):
        layout_profile(result, build_model("mlp", (1, 8, 8), 10, 16), cap_bytes=52)


def test_layout_order_reports_reverse_registration():
    mlp = build_model("mlp", (1, 8, 8), 10, 16)
    x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,))
    assert profile_step(mlp, x, y, steps=2, warmup=0).layout_order


def test_profile_arch_validates_its_arguments():
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        profile_arch(ArchRun("nope", 1))
    with pytest.raises(ValueError, match="--batch-size must be >= 1"):
        profile_arch(ArchRun("mlp", 0))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            profile_arch(ArchRun("mlp", 1, device="cuda"))


def test_profile_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["profile", "-a", "mlp", "--device", "nonsense", "--steps", "1"])
    assert res.exit_code == 1
    assert isinstance(res.exception, SystemExit)
    assert "Error:" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, ["profile", "-b", "0"])
    assert res.exit_code == 2 and "--batch-size" in res.output
    res = runner.invoke(
        main,
        ["profile", "--steps", "1", "--warmup", "0", "--out", str(tmp_path / "missing" / "p.json")],
    )
    assert res.exit_code == 1 and "cannot write" in res.output

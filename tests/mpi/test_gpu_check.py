"""scripts/gpu_check.py without a GPU: the skip logic, the plan, and its workers on CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from launch import mpiexec, run

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture()
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_cuda_skips_everything_with_the_reason_and_launches_nothing(
    gpu_check, monkeypatch, capsys
):
    monkeypatch.setattr(
        gpu_check, "cuda_status", lambda: {"available": False, "reason": "no CUDA device visible"}
    )

    def no_launch(*a, **k):
        raise AssertionError("a check was launched without a GPU")

    monkeypatch.setattr(gpu_check, "_launch", no_launch)
    assert gpu_check.main([]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["skipped"] is True and report["ok"] is True
    assert "no CUDA device visible" in report["reason"]


def test_plan_runs_direct_only_when_cuda_aware(gpu_check):
    gpu = {"available": True}
    assert gpu_check.plan(gpu, True) == dict.fromkeys(
        ("detect", "staging", "direct", "throughput", "offload", "standin")
    )
    todo = gpu_check.plan(gpu, False)
    assert todo["staging"] is None and todo["throughput"] is None and todo["offload"] is None
    assert "not CUDA-aware" in todo["direct"] and "GOSSIPGRAD_CUDA_AWARE=1" in todo["direct"]
    off = gpu_check.plan({"available": False, "reason": "CPU-only wheel"}, None)
    assert all("CPU-only wheel" in v for v in off.values())


@pytest.mark.parametrize("staging_ok", [True, False])
def test_with_a_gpu_the_checks_are_launched_and_failures_set_the_exit_code(
    gpu_check, monkeypatch, capsys, staging_ok
):
    monkeypatch.setattr(gpu_check, "cuda_status", lambda: {"available": True})
    launched = []

    def fake_launch(n, args, timeout):
        launched.append((n, args[0]))
        if args[0] == "_detect":
            return {"ok": True, "cuda_aware": False}
        if args[0] == "_exchange":
            assert args[args.index("--device") + 1] == "cuda"
            return {"ok": staging_ok, "exact": staging_ok}
        if args[0] == "_offload":
            return {"ok": True, "modes": {}}
        if args[0] == "_standin":
            return {"ok": True, "rows": []}
        return {"ok": True, "plain": {"images_per_s": 1.0}}

    monkeypatch.setattr(gpu_check, "_launch", fake_launch)
    assert gpu_check.main(["--steps", "2"]) == (0 if staging_ok else 1)
    report = json.loads(capsys.readouterr().out)
    assert launched == [
        (1, "_detect"),
        (2, "_exchange"),
        (0, "_throughput"),
        (0, "_offload"),
        *[(0, "_standin")] * 3,  # ResNet-50, GoogLeNet, VGG-16
    ]
    assert set(report["standin"]) == {"resnet50", "googlenet", "vgg16"}
    assert report["exchange"]["direct"]["skipped"] is True
    assert report["ok"] is staging_ok


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["staging", "direct"])
def test_exchange_worker_is_exact_on_cpu(path):
    out = run(
        [
            mpiexec(),
            "-n",
            "2",
            sys.executable,
            str(SCRIPT),
            "_exchange",
            "--device",
            "cpu",
            "--path",
            path,
            "--mb",
            "1",
        ],
        timeout=100,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["ok"] and rec["exact"] and rec["buckets"] == 4 and rec["bytes"] == 2**20, rec
    assert rec["gbit_per_s"] > 0


@pytest.mark.timeout(300)
def test_offload_worker_on_cpu_reports_every_mode_with_the_same_first_loss():
    out = run(
        [
            sys.executable,
            str(SCRIPT),
            "_offload",
            "--device",
            "cpu",
            "--arch",
            "resnet18",
            "--batch",
            "4",
            "--steps",
            "1",
            "--image-size",
            "32",
        ],
        timeout=280,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["ok"] and rec["same_first_loss"] and rec["device"] == "cpu", rec
    modes = rec["modes"]
    assert list(modes) == ["none", "activations", "optimizer", "activations,optimizer"]
    assert modes["none"]["activation_bytes_to_host_per_step"] == 0
    assert modes["activations"]["activation_bytes_to_host_per_step"] > 0
    assert modes["optimizer"]["optimizer_host_bytes"] > 0
    assert modes["none"]["peak_memory_bytes"] is None  # no device memory on a CPU
    assert all(m["images_per_s"] > 0 for m in modes.values())


@pytest.mark.timeout(300)
def test_standin_worker_on_cpu_profiles_saves_and_checks_each_setting(tmp_path):
    out = run(
        [sys.executable, str(SCRIPT), "_standin", "--device", "cpu", "--arch", "cnn"]
        + ["--precisions", "fp32", "--batches", "8,16", "--steps", "2", "--dilate", "2"]
        + ["--min-step-s", "0.02", "--out", str(tmp_path)],
        timeout=280,
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr  # 1: a ratio off on a busy host
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["arch"] == "cnn" and [r["batch"] for r in rec["rows"]] == [8, 16]
    for row in rec["rows"]:
        assert Path(row["profile"]).is_file() and row["profile"].endswith(f"-b{row['batch']}.json")
        assert row["dilate"] >= 2 and row["dilated"]["ratio"] > 0
        assert row["undilated"]["standin_step_s"] > 0
        assert isinstance(row["within_5pct"], bool)
    assert rec["ok"] == all(r["within_5pct"] for r in rec["rows"])

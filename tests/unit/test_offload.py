"""``--offload activations|optimizer`` on a CPU-only host: the same code path as on a GPU,
with results identical to running without it; the profile reports what moved (in training
under mpiexec: tests/mpi/test_offload_mpi.py)."""

from __future__ import annotations

import json

import pytest
import torch

from gossipgrad.engine.offload import ActivationOffload, HostOffloadOptimizer, Offloads
from gossipgrad.models import build_model, loss_fn

from launch import gossipgrad


def _step_grads(model, x, y, offload=None):
    model.zero_grad(set_to_none=True)
    if offload is None:
        loss = loss_fn(model(x), y)
        loss.backward()
    else:
        with offload.saving():
            loss = loss_fn(model(x), y)
            loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


@pytest.mark.timeout(300)
def test_activation_offload_on_resnet18_batch_32_gives_the_same_loss_and_gradients():
    torch.manual_seed(0)
    model = build_model("resnet18", (3, 32, 32), 10)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 3, 32, 32, generator=gen), torch.randint(0, 10, (32,), generator=gen)
    plain_loss, plain = _step_grads(model, x, y)
    offload = ActivationOffload(model, "cpu")
    loss, grads = _step_grads(model, x, y, offload)
    assert loss == plain_loss
    assert all(torch.equal(a, b) for a, b in zip(grads, plain, strict=True))
    # at least the stem's conv output (32 x 64 x 16 x 16 floats) and most of the rest moved
    assert offload.last_bytes >= 32 * 64 * 16 * 16 * 4 and offload.tensors_to_host > 10
    assert offload.bytes_to_host == offload.last_bytes
    with torch.no_grad():  # outside saving(): nothing is packed
        model(x)
    assert offload.bytes_to_host == offload.last_bytes


def test_parameters_and_small_tensors_stay_and_the_hooks_are_scoped():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    x, y = torch.randn(512, 64), torch.randint(0, 2, (512,))
    offload = ActivationOffload(model, "cpu", min_bytes=64 * 1024)
    _step_grads(model, x, y, offload)
    # x (128 KiB) and the hidden activations (128 KiB each) move; weights and targets stay
    sizes = 512 * 64 * 4
    assert offload.last_bytes % sizes == 0 and offload.last_bytes >= 2 * sizes
    moved_params = ActivationOffload(model, "cpu", min_bytes=0)
    _step_grads(model, x[:2], y[:2], moved_params)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert moved_params.last_bytes < param_bytes  # the weights (saved by Linear) stayed


def _sgd_run(wrap: bool, steps: int = 5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True
    )
    if wrap:
        opt = HostOffloadOptimizer(opt)
    gen = torch.Generator().manual_seed(2)
    for step in range(steps):
        x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        for g in opt.param_groups:
            g["lr"] = 0.1 / (1 + step)
        opt.step()
        with torch.no_grad():  # as gossip's parameter mixing does between steps
            model[0].weight.mul_(0.99)
    return model, opt


def test_host_optimizer_is_bit_identical_and_checkpoints_in_the_same_format():
    plain_model, plain = _sgd_run(False)
    host_model, host = _sgd_run(True)
    for p, q in zip(plain_model.parameters(), host_model.parameters(), strict=True):
        assert torch.equal(p, q)
    a, b = plain.state_dict(), host.state_dict()
    assert a["param_groups"] == b["param_groups"] and sorted(a["state"]) == sorted(b["state"])
    for k in a["state"]:
        assert torch.equal(a["state"][k]["momentum_buffer"], b["state"][k]["momentum_buffer"])
    fresh_model, fresh = _sgd_run(True, steps=0)
    fresh.load_state_dict(a)  # a plain optimizer's checkpoint loads into the host one
    assert torch.equal(
        fresh.state[fresh.param_groups[0]["params"][0]]["momentum_buffer"],
        a["state"][0]["momentum_buffer"],
    )
    assert host.host_bytes == 3 * sum(p.numel() * 4 for p in host_model.parameters())


def test_host_optimizer_refuses_a_stepped_optimizer():
    model = torch.nn.Linear(2, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 2)).sum().backward()
    sgd.step()
    with pytest.raises(ValueError, match="--offload optimizer needs an optimizer that has not"):
        HostOffloadOptimizer(sgd)


def test_offloads_report_what_moved():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    plan = Offloads(
        model,
        "cpu",
        ("activations", "optimizer"),
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
    )
    plan.activations.min_bytes = 0
    x, y = torch.randn(4, 64), torch.randint(0, 2, (4,))
    _step_grads(model, x, y, plan.activations)
    plan.optimizer.step()
    rep = plan.report()
    assert rep["what"] == ["activations", "optimizer"]
    assert rep["activation_bytes_to_host_per_step"] == plan.activations.last_bytes > 0
    assert rep["optimizer_host_bytes"] == plan.optimizer.host_bytes > 0


@pytest.mark.timeout(300)
def test_profile_reports_bytes_moved_and_peak_memory_with_and_without(tmp_path):
    out = tmp_path / "p.json"
    res = gossipgrad(
        0,
        [
            "profile",
            "-a",
            "cnn",
            "-b",
            "64",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--offload",
            "activations,optimizer",
            "--out",
            str(out),
        ],
        timeout=280,
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())["offload"]
    assert report["what"] == ["activations", "optimizer"]
    # cnn on digits: the first conv's output alone is 64 x 32 x 8 x 8 floats
    assert report["activation_bytes_to_host_per_step"] >= 64 * 32 * 8 * 8 * 4
    assert report["optimizer_host_bytes"] > 0
    assert report["peak_memory_bytes"] == {"without": None, "with": None}  # CPU: none
    assert report["step_s"]["without"] > 0 and report["step_s"]["with"] > 0
    assert "of saved activations to host per step" in res.stderr
    bad = gossipgrad(0, ["profile", "--offload", "disk"], timeout=120)
    assert bad.returncode == 2 and "unknown offload 'disk' (--offload)" in bad.stderr

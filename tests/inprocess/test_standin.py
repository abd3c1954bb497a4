"""The stand-in accelerator in one process: shapes, hooks, ready times, the engine, undo.

Timing here is loose on purpose (2 shared cores): the exact comparisons run on a
:class:`VirtualClock`, whose time only the stand-in's operations move; the tight numbers
are the benchmark's (``gossipgrad bench standin``, lab/records/standin.md).
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import gossipgrad
import gossipgrad.tools.devices
from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.buckets import install_forward_waits
from gossipgrad.models import build_model, loss_fn
from gossipgrad.strategies import build_optimizer
from gossipgrad.tools.devices import Standin, StandinProfile
from gossipgrad.tools.devices.clock import BLOCKED_S, DeviceClock, VirtualClock, host_waited
from lab.devices.published import nominal_profile, ready_times

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cnn_profile() -> StandinProfile:
    """A nominal 40 ms step of the digits cnn at batch 16 (its layers split by FLOPs)."""
    return nominal_profile("cnn", 16, 0.04)


def _cnn(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("cnn", (1, 8, 8), 10)


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def _ready_marks(model: torch.nn.Module, clock) -> tuple[dict[int, float], list]:  # noqa: ANN001
    marks: dict[int, float] = {}

    def hook(i: int):  # noqa: ANN202
        return lambda _p: marks.setdefault(i, clock.now()) and None

    hooks = [
        p.register_post_accumulate_grad_hook(hook(i)) for i, p in enumerate(model.parameters())
    ]
    return marks, hooks


def test_outputs_gradients_and_hook_times_are_the_real_models_and_the_profiles(cnn_profile):
    model, real = _cnn(), _cnn()
    clock = VirtualClock()
    handle = Standin(model, cnn_profile, dilate=3, clock=clock)
    marks, _ = _ready_marks(model, clock)
    x, y = _batch()
    out = model(x)
    assert out.shape == real(x).shape == (16, 10)
    forward = clock.now()
    assert forward == pytest.approx(3 * cnn_profile.planner.forward_s)
    loss_fn(out, y).backward()
    for p, q in zip(model.parameters(), real.parameters(), strict=True):
        assert p.grad is not None and p.grad.shape == q.shape and p.grad.dtype == q.dtype
    # every parameter's hook fired when the profile says, x dilate, in the profile's order
    expect = {b.index: b.ready_s for b in cnn_profile.planner.buckets}
    assert set(marks) == set(expect)
    for i, t in expect.items():
        assert marks[i] - forward == pytest.approx(3 * t, abs=1e-12)
    fired = sorted(marks, key=lambda i: (marks[i], -i))
    assert fired == [b.index for b in cnn_profile.planner.buckets]
    handle.remove()
    assert torch.equal(model(x), real(x))  # the real forward is back


def test_a_step_waits_the_profile_time_and_gives_the_cpu_away(cnn_profile):
    model = _cnn()
    handle = gossipgrad.tools.devices.standin(model, cnn_profile, dilate=2.5)  # 0.1 s per step
    opt = handle.optimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _batch()
    walls, cpus = [], []
    for _ in range(4):
        t, c = time.perf_counter(), os.times()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        c2 = os.times()
        walls.append(time.perf_counter() - t)
        cpus.append(c2.user + c2.system - c.user - c.system)
    wall, cpu = sum(walls[1:]) / 3, sum(cpus[1:]) / 3
    assert 0.095 <= wall <= 0.5, walls  # loose: a shared host; the bench measures tightly
    assert cpu <= 0.5 * wall, (cpus, walls)  # time.sleep: the CPU is given away
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert handle.clock.busy_s == pytest.approx(4 * 2.5 * cnn_profile.compute_s)


def _blocked(seconds: float) -> None:
    """The host blocks on something outside the device, and says so as the engine does."""
    start = time.perf_counter()
    time.sleep(seconds)
    host_waited(start, time.perf_counter())


def test_an_operation_after_a_blocking_wait_starts_when_the_wait_ended():
    """The device's lead hides host work, not a wait for the network: an operation called
    after the host blocked takes its whole time after the wait (the clock once placed it
    at the device's end, and the operation read 0.05 s short here)."""
    clock = DeviceClock()
    clock.sync()
    clock.run(0.05)
    _blocked(0.08)
    t = time.perf_counter()
    clock.run(0.05)
    assert time.perf_counter() - t >= 0.05 - 1e-4


def test_host_work_and_short_waits_stay_hidden_behind_the_device():
    """What the clock must keep: host work between operations (or a wait that returned at
    once) runs while the device is busy, so two 0.05 s operations with 0.02 s of host work
    between them take 0.1 s, not 0.12 s (best of three tries: a shared host may deschedule
    a sleep; a try can only read long, never short)."""

    def short_wait() -> None:
        time.sleep(0.02)
        now = time.perf_counter()
        host_waited(now - BLOCKED_S / 2, now)

    for between in (lambda: time.sleep(0.02), short_wait):
        tries = []
        for _ in range(3):
            clock = DeviceClock()
            clock.sync()
            t = time.perf_counter()
            clock.run(0.05)
            between()
            clock.run(0.05)
            tries.append(time.perf_counter() - t)
        assert min(tries) >= 0.1 - 1e-4, tries
        assert min(tries) < 0.115, tries


def test_a_wait_on_another_thread_or_before_a_sync_is_not_this_clocks():
    import threading

    clock = DeviceClock()
    clock.sync()
    clock.run(0.05)
    other = threading.Thread(target=_blocked, args=(0.08,))
    other.start()
    other.join()
    t = time.perf_counter()
    clock.run(0.05)
    assert time.perf_counter() - t < 0.05  # the other thread's wait placed nothing here
    clock.waited(time.perf_counter() - 1.0, time.perf_counter())
    clock.sync()  # a new step: waits reported before it are done with
    t = time.perf_counter()
    clock.run(0.02)
    assert time.perf_counter() - t < 0.05
    VirtualClock().waited(0.0, 1.0)  # no host timeline: nothing to place


def test_a_forward_wait_for_a_parameter_bucket_delays_the_layers_after_it(cnn_profile):
    """The engine's forward pre-hook (gossip's parameter mix, ps's pull) blocks before the
    last layer: that layer and everything after it (all of backward) start when the wait
    ended, so forward and backward take the layers before it, the wait, then the rest, in
    wall-clock time (the clock once let backward start at the device's end, before the
    wait ended: backward read the layers' time before the wait short)."""
    model = _cnn()
    handle = gossipgrad.tools.devices.standin(model, cnn_profile, dilate=10)
    bucket_of = {id(p): 0 for p in model[6].parameters()}
    waited = []

    def wait(own: list[int]) -> None:
        waited.append(own)
        time.sleep(0.2)  # the partner's bucket is on the wire

    hooks = install_forward_waits(model, bucket_of, wait)
    x, y = _batch()
    layers = [cnn_profile.layer(str(i)) for i in range(7)]
    before = 10 * sum(lt.forward_s for lt in layers[:6])
    after = 10 * (layers[6].forward_s + sum(lt.backward_s for lt in layers))
    try:
        t = time.perf_counter()
        loss_fn(model(x), y).backward()
        elapsed = time.perf_counter() - t
    finally:
        for h in hooks:
            h.remove()
        handle.remove()
    assert waited == [[0]]
    assert elapsed >= before + 0.2 + after - 1e-3, (elapsed, before, after)


def test_the_optimizer_class_rebuilds_as_ps_builds_its_shards(cnn_profile):
    clock = VirtualClock()
    model = _cnn()
    opt = Standin(model, cnn_profile, clock=clock).optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1)
    )
    shard = type(opt)([{"params": [next(model.parameters())], "lr": 0.1}], **opt.defaults)
    shard.step()  # waits its parameters' share of the optimizer time, on the same clock
    p0 = next(model.parameters())
    share = p0.numel() * p0.element_size() / cnn_profile.planner.param_bytes
    assert clock.now() == pytest.approx(share * cnn_profile.planner.optimizer_s)
    assert opt.state_dict()["param_groups"][0]["lr"] == 0.1


def test_a_profile_of_another_model_is_refused_naming_it(cnn_profile):
    with pytest.raises(
        ValueError,
        match=r"stand-in profile cnn-nominal.*does not fit Sequential: '0 is Flatten, not Conv2d'",
    ):
        Standin(build_model("mlp", (1, 8, 8), 10), cnn_profile)
    torch.manual_seed(0)
    wide = build_model("cnn", (1, 8, 8), 10, hidden=8)
    with pytest.raises(ValueError, match="'param_bytes'"):
        Standin(wide, cnn_profile)


def test_a_shipped_profile_is_what_its_builder_makes_today():
    from lab.devices.published import PUBLISHED, published_profile

    name = "googlenet-p100pcie-fp32-b128"  # python scripts/standin_profiles.py rebuilds all
    built = published_profile(name, PUBLISHED[name]).to_json()
    assert built == StandinProfile.load(name).to_json()


def test_meta_model_resnet_keeps_shapes_and_ready_times_match_the_shipped_profile():
    profile = StandinProfile.load("resnet50-p100-fp32-b32")
    with torch.device("meta"):
        model = build_model("resnet50", (3, 224, 224), 1000)
    buckets, names = ready_times(model, profile)
    assert names == profile.bucket_names
    assert [b.index for b in buckets] == [b.index for b in profile.planner.buckets]
    for got, want in zip(buckets, profile.planner.buckets, strict=True):
        assert got.ready_s == pytest.approx(want.ready_s, rel=1e-9, abs=1e-12)


def test_gossip_trains_on_stand_in_ranks_of_the_thread_world(cnn_profile):
    """Two thread-ranks, each its own stand-in device: buckets, hooks and exchange work,
    and every gradient is still a view into its bucket after the (sparse, empty) zero
    gradients of the second step were accumulated into it."""

    def rank(comm):  # noqa: ANN001, ANN202
        model = _cnn()
        handle = Standin(model, cnn_profile, clock=DeviceClock())
        opt = build_optimizer(
            handle.optimizer(torch.optim.SGD(model.parameters(), lr=0.1)),
            model,
            comm,
            mix="grad",
            sufficient_factors="off",  # else the Linear weight leaves the buckets
            sync="off",
            monitor_every=0,
        )
        marks, _ = _ready_marks(model, handle.clock)
        x, y = _batch()
        try:
            for _ in range(2):
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
            flats = {b.grads.untyped_storage().data_ptr() for b in opt.layout.buckets}
            in_buckets = all(
                p.grad.layout is torch.strided and p.grad.untyped_storage().data_ptr() in flats
                for p in model.parameters()
            )
            assert in_buckets, "p.grad left its bucket"
            return len(marks), opt.bytes_sent_per_step(), handle.clock.busy_s
        finally:
            opt.close()

    results = run_ranks(2, rank, timeout=60)
    n = sum(1 for _ in _cnn().parameters())
    for fired, sent, busy in results:
        assert fired == n and sent > 0
        assert busy == pytest.approx(2 * cnn_profile.compute_s)


def test_a_measured_cpu_profile_runs_on_its_stand_in(tmp_path):
    from gossipgrad.tools.measure.layers import profile_arch_layers
    from gossipgrad.tools.measure.profiler import ArchRun

    profile = profile_arch_layers(ArchRun("mlp", 8, 32, steps=3, warmup=1))
    assert profile.source["kind"] == "measured"
    assert sum(lt.forward_s for lt in profile.layers) == pytest.approx(profile.planner.forward_s)
    path = tmp_path / "mlp.json"
    profile.save(path)
    loaded = StandinProfile.load(path)
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10, hidden=32)
    clock = VirtualClock()
    Standin(model, loaded, clock=clock)
    x = torch.randn(8, 1, 8, 8)
    loss_fn(model(x), torch.zeros(8, dtype=torch.long)).backward()
    assert clock.now() == pytest.approx(profile.planner.forward_s + profile.planner.backward_s)


def test_profile_cli_layers_writes_a_stand_in_profile(tmp_path):
    from click.testing import CliRunner

    from gossipgrad.cli import main

    out = tmp_path / "mlp.json"
    args = ["profile", "-a", "mlp", "--hidden", "16", "-b", "8", "--steps", "2", "--warmup", "1"]
    res = CliRunner().invoke(main, [*args, "--threads", "1", "--layers", "--out", str(out)])
    assert res.exit_code == 0, res.output
    p = StandinProfile.load(out)
    assert p.source["kind"] == "measured" and "--layers" in p.source["command"]
    assert [lt.name for lt in p.layers] == [str(i) for i in range(6)] and p.hidden == 16
    res = CliRunner().invoke(main, [*args, "--precision", "bf16"])
    assert res.exit_code != 0 and "--precision needs --layers" in res.output

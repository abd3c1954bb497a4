"""The held-out split cannot leak: the whole held-out launch (``measure_held_out``: in-sample
calibration at size 2, held-out size 3) on the in-process world, with every training run
replaced by a table of step times. Changing the timing of every *scored* run -- in-sample
and held-out -- must leave every held-out prediction and the frozen calibration as they
were; only the calibration rounds may move them."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import pytest

from gossipgrad.comm.local import run_ranks
from gossipgrad.tools.plan import Bucket, CommModel, HostShare, LinkFit, NetworkFit, Profile
from lab.bench import plan_heldout, plan_runs, plan_validate
from lab.bench.plan_predict import Inputs
from lab.bench.plan_runs import Config
from lab.plan.heldout import FrozenCalibration

pytestmark = pytest.mark.timeout(120)

PROFILE = Profile(
    "mlp",
    4,
    "cpu",
    forward_s=0.004,
    backward_s=0.008,
    optimizer_s=0.001,
    param_bytes=2_000_000,
    buckets=(Bucket(0, 1_000_000, 0.003), Bucket(1, 1_000_000, 0.008)),
)
NET = NetworkFit(LinkFit(2e-5, 3e-10, 0.99), source="test")
CONFIGS = [
    Config("gossip", 1.0),
    Config("gossip", 1.0, staleness=1),
    Config("allreduce", 1.0),
    Config("allreduce", 1.0, "grad", False, 0),
]
CAL_STEPS = 7  # calibration runs are told apart from scored runs by their length
KW = dict(
    arch="mlp",
    hidden=8,
    batch_size=4,
    configs=CONFIGS,
    steps=2,
    warmup=0,
    profile_steps=2,
    net_max_mb=1.0,
    net_reps=1,
    calibrate_allreduce=False,
    calibrate_mb=None,
    calibrate_pairs=2,
    calibrate_steps=CAL_STEPS,
    confirm_rounds=1,
    passes=2,
)


def _inputs() -> Inputs:
    cm = CommModel.from_network(NET)
    return Inputs(
        SimpleNamespace(profile=PROFILE),
        SimpleNamespace(network=NET),
        1.0,
        cm,
        HostShare(2, 2),
        ["gossip", "allreduce"],
        1.0,
        PROFILE,
        {
            s: sum(cm.bucket_s(s, b.bytes, 2) for b in PROFILE.buckets)
            for s in ("gossip", "allreduce")
        },
        {c: PROFILE for c in CONFIGS},
    )


def _fake_run(scored_scale):
    """``run_config`` as a table: a step time from the configuration, size and length;
    scored runs (not ``CAL_STEPS`` long) are multiplied by ``scored_scale(cfg, size)``."""

    def run(comm, cfg, arch, hidden, batch_size, steps, warmup):
        base = 0.010 * comm.size * (1 + zlib.crc32(cfg.label.encode()) % 7 / 10)
        t = base if steps == CAL_STEPS else base * scored_scale(cfg, comm.size)
        return {"measured_s": t, "min_s": t, "max_s": t, "steps_s": [t] * steps}

    return run


def _launch(monkeypatch, scored_scale, **kw) -> dict:
    run = _fake_run(scored_scale)
    for module in (plan_runs, plan_validate):
        monkeypatch.setattr(module, "run_config", run)
    for module in (plan_validate, plan_heldout):
        monkeypatch.setattr(module, "measure_inputs", lambda comm, configs, **_: _inputs())
    monkeypatch.setattr(plan_heldout, "host_share", lambda comm: (2, comm.size))
    args = {"calibrate_size": 2, "predict_sizes": [3], "calibration": None, **KW, **kw}
    return run_ranks(3, lambda comm: plan_heldout.measure_held_out(comm, **args), timeout=90)[0]


PREDICTIONS = (
    "predicted_s",
    "predicted_exposed_comm_s",
    "predicted_host_share_s",
    "predicted_spare_core_s",
)


def _held_out(report: dict) -> list[dict]:
    return [r for r in report["configs"] if r.get("held_out")]


def test_no_scored_runs_timing_moves_a_held_out_prediction(monkeypatch):
    plain = _launch(monkeypatch, lambda cfg, size: 1.0)
    # Every scored run 1.5-3.4x slower, differently per configuration and size.
    skewed = _launch(
        monkeypatch, lambda cfg, size: 1.5 + (zlib.crc32(cfg.label.encode()) % 5 + size) / 4
    )
    assert plain["frozen_calibration"] == skewed["frozen_calibration"]
    a, b = _held_out(plain), _held_out(skewed)
    assert [r["config"] for r in a] == [c.label for c in CONFIGS] and len(b) == len(a)
    for x, y in zip(a, b, strict=True):
        assert x["measured_s"] != y["measured_s"]  # the scored runs did change ...
        for key in PREDICTIONS:  # ... and no prediction moved
            assert x[key] == y[key], (x["config"], key)
    check = [lc for lc in skewed["launches"] if lc.get("held_out")][0]["compute_check"]
    assert (
        check["predicted_s"]
        == [lc for lc in plain["launches"] if lc.get("held_out")][0]["compute_check"]["predicted_s"]
    )
    # The in-sample size was scored too, and its runs changed: they are not in the freeze.
    ins = [r for r in skewed["configs"] if not r.get("held_out")]
    assert len(ins) == len(CONFIGS) and all(r["size"] == 2 for r in ins)
    assert {"oos_mape_pct", "oos_worst_pct", "oos_tau_min", "oos_regret"} <= set(skewed)
    assert plain["oos_mape_pct"] != skewed["oos_mape_pct"]


def test_calibration_rounds_do_move_the_predictions(monkeypatch):
    """The converse, so that the test above could fail: the held-out predictions do
    depend on what the calibration measured."""
    plain = _launch(monkeypatch, lambda cfg, size: 1.0)
    slower = _fake_run(lambda cfg, size: 1.0)

    def cal_slower(comm, cfg, arch, hidden, batch_size, steps, warmup):
        out = slower(comm, cfg, arch, hidden, batch_size, steps, warmup)
        if steps == CAL_STEPS and cfg.strategy == "local":
            out = {**out, "measured_s": 2 * out["measured_s"]}
        return out

    for module in (plan_runs, plan_validate):
        monkeypatch.setattr(module, "run_config", cal_slower)
    args = {"calibrate_size": 2, "predict_sizes": [3], "calibration": None, **KW}
    moved = run_ranks(3, lambda comm: plan_heldout.measure_held_out(comm, **args), timeout=90)[0]
    assert moved["frozen_calibration"]["compute_factor"] == pytest.approx(
        2 * plain["frozen_calibration"]["compute_factor"]
    )
    assert all(
        x["predicted_s"] > y["predicted_s"]
        for x, y in zip(_held_out(moved), _held_out(plain), strict=True)
    )


def test_a_saved_calibration_predicts_the_next_launch_and_refuses_its_own_size(monkeypatch):
    first = _launch(monkeypatch, lambda cfg, size: 1.0)
    cal = FrozenCalibration.from_json(first["frozen_calibration"])
    again = _launch(monkeypatch, lambda cfg, size: 2.0, calibrate_size=None, calibration=cal)
    assert [lc.get("held_out") for lc in again["launches"]] == [True]  # nothing in-sample
    assert again["frozen_calibration"] == first["frozen_calibration"]
    for x, y in zip(_held_out(first), _held_out(again), strict=True):
        assert x["predicted_s"] == y["predicted_s"]
    with pytest.raises(ValueError, match="fitted at size 2 on loopback"):
        _launch(
            monkeypatch,
            lambda cfg, size: 1.0,
            calibrate_size=None,
            calibration=cal,
            predict_sizes=[2, 3],
        )

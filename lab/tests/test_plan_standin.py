"""The stand-in held-out split (lab.plan.standin, lab.plan.standin_score): a calibration
fitted on its own launches recovers known constants, a held-out launch never moves it, and
the side-by-side table reads the records as the benchmark they are. Pure: synthetic
records made by the model itself, no MPI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.plan.formats import ConcurrentFit, LinkFit, NetworkFit
from lab.plan.standin import HOST_GRID, StandinCalibration, calibrate, load_runs, predict_run
from lab.plan.standin_score import check_targets, hidden_fraction, score, side_by_side

PROFILE = "resnet50-p100-fp32-b64"
K = 10.0
RATES = {"1gbit": 8.4e-9, "2.5gbit": 3.4e-9}  # emulated seconds per byte
TRUE = StandinCalibration({PROFILE: 1.02}, {"gossip/grad": HOST_GRID[20]}, 0.1, (), "", 0)


def network(size: int, rate: str) -> tuple[NetworkFit, dict]:
    beta = RATES[rate]
    conc = beta * (3.0 if (size, rate) == (8, "2.5gbit") else 1.0)  # a shared bottleneck
    net = NetworkFit(
        LinkFit(0.0, beta, 1.0),
        source=f"netfit on test, emulated link rate {rate}",
        concurrent=ConcurrentFit(0.0, conc, 1.0, size=size),
        ranks_per_node=1,
    )
    return net, {**net.to_json(), "measurements": {"exchange_fit": {"duplex": 1.0}}}


NETS = {(n, r): network(n, r) for n in (2, 4, 8) for r in RATES}
PROFILES = {PROFILE: StandinProfile.load(PROFILE)}


def record(size: int, rate: str, cal: StandinCalibration = TRUE, skew: float = 1.0) -> dict:
    """A bench strategies record whose step times the model under ``cal`` predicts."""
    rows = []
    for name, strategy in (("gossip", "gossip"), ("local", "local")):
        rows.append(
            {
                "name": name,
                "strategy": strategy,
                "mix": "grad",
                "bucket_mb": 25.0,
                "staleness": 0,
                "step_s": 1.0,
                "phase_s": {"backward": 1.0},
                "wire_bytes_per_step": 102e6,
                "theory_bytes_per_step": 102e6,
            }  # fmt: skip
        )
    rec = {"bench": "strategies", "size": size, "emu_rate": rate, "mix": "grad",
           "bucket_mb": 25.0, "results": rows,
           "standin": {"profile": f"{PROFILE} (shipped)", "dilate": K}}  # fmt: skip
    for row, run in zip(rows, load_runs_from(rec), strict=True):
        row["step_s"] = K * predict_run(run, PROFILES, NETS, cal) * skew
    return rec


def load_runs_from(rec: dict):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(rec, f)
    return load_runs([f.name])


def runs(skew_at: tuple[int, str] | None = None, skew: float = 1.0):
    out = []
    for n in (2, 4, 8):
        for r in RATES:
            out += load_runs_from(record(n, r, skew=skew if (n, r) == skew_at else 1.0))
    return out


def test_calibration_recovers_the_constants_that_made_the_runs():
    rows = [r for r in runs() if r.size in (2, 4) and r.rate == "1gbit"]
    cal = calibrate(rows, PROFILES, NETS)
    assert cal.compute_factor[PROFILE] == pytest.approx(1.02)
    assert cal.host_s_per_byte["gossip/grad"] == pytest.approx(HOST_GRID[20])
    assert cal.interference == pytest.approx(0.1)
    assert cal.fit_mape == pytest.approx(0.0, abs=1e-9)


def test_held_out_scores_are_exact_when_the_model_made_the_runs():
    report = score(runs(), PROFILES, NETS, [2, 4], "1gbit")
    held = report["held_out"]
    assert held["n"] == 4  # gossip at 8 on 1gbit; 2, 4, 8 on 2.5gbit
    assert held["mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert set(report["by_split"]) == {"other size", "other rate"}
    # the plain model misses the shared bottleneck at 8 ranks on 2.5gbit
    worst = max(report["rows"], key=lambda r: abs(r["legacy_s"] - r["measured_s"]))
    assert (worst["size"], worst["rate"]) == (8, "2.5gbit")


def test_a_held_out_launch_never_moves_the_calibration():
    a = score(runs(), PROFILES, NETS, [2, 4], "1gbit")
    b = score(runs(skew_at=(8, "2.5gbit"), skew=1.5), PROFILES, NETS, [2, 4], "1gbit")
    assert a["calibration"] == b["calibration"]
    pa = {(r["size"], r["rate"], r["name"]): r["predicted_s"] for r in a["rows"]}
    pb = {(r["size"], r["rate"], r["name"]): r["predicted_s"] for r in b["rows"]}
    assert pa == pb
    assert b["held_out"]["mape_pct"] > a["held_out"]["mape_pct"]


def test_host_work_is_this_hosts_time_whatever_the_dilation():
    """Work done on the stand-in host is not dilated: a fitted host cost that dominates the
    step reads K times smaller in the cluster's time, so at K = 25 it is 10/25 of K = 10."""
    gossip = load_runs_from(record(8, "1gbit"))[0]
    heavy = replace(TRUE, host_s_per_byte={"gossip/grad": 1e-6}, interference=0.0)
    at = {k: predict_run(replace(gossip, dilate=k), PROFILES, NETS, heavy) for k in (10.0, 25.0)}
    assert at[10.0] > 5.0  # ~100 MB x 1e-6 s / 10: the host term is the step
    assert at[25.0] / at[10.0] == pytest.approx(10 / 25, rel=0.02)


def test_a_codec_row_is_priced_at_its_bytes_on_the_wire():
    """A bench row that names a wire codec is predicted as its fp32 twin behind links whose
    every per-byte time is halved (bf16: half the bytes on the wire); the same row at fp32
    reads as before."""
    rec = record(8, "2.5gbit")
    gossip = load_runs_from(rec)[0]
    rec["results"][0]["wire"] = "bf16"  # as bench strategies writes a codec row
    assert load_runs_from(rec)[0].wire == "bf16"
    net, doc = NETS[(8, "2.5gbit")]
    half_links = NetworkFit(
        LinkFit(0.0, net.p2p.beta_s_per_byte / 2, 1.0),
        source=net.source,
        concurrent=ConcurrentFit(0.0, net.concurrent.beta_s_per_byte / 2, 1.0, size=8),
        ranks_per_node=1,
    )
    nets = {**NETS, (8, "half"): (half_links, doc)}
    twin = predict_run(gossip, PROFILES, nets, TRUE, network_key=(8, "half"))
    coded = predict_run(replace(gossip, wire="bf16"), PROFILES, NETS, TRUE)
    assert coded == pytest.approx(twin, rel=1e-9)
    assert coded < predict_run(gossip, PROFILES, NETS, TRUE)
    assert predict_run(replace(gossip, wire="fp32"), PROFILES, NETS, TRUE) == predict_run(
        gossip, PROFILES, NETS, TRUE
    )


def test_side_by_side_efficiency_and_hidden_share():
    one = load_runs_from(record(2, "1gbit"))
    local1 = replace(one[1], size=1, step_s=0.25)
    table = side_by_side([*runs(), local1], {PROFILE: 64})
    row = next(t for t in table if (t["size"], t["name"], t["link"]) == (8, "gossip", "10 Gbit/s"))
    assert row["efficiency"] == pytest.approx(0.25 / row["step_s"], rel=1e-3)
    assert row["wire_s"] == pytest.approx(102e6 * 8 / 1e9 / K)
    assert row["samples_per_s"] == pytest.approx(64 * 8 / row["step_s"], rel=1e-3)
    assert hidden_fraction(1.0, 1.0, 0.5) == 1.0 and hidden_fraction(2.0, 1.0, 0.5) == 0.0
    assert hidden_fraction(1.0, 1.0, 0.0) is None
    assert isinstance(check_targets(table), list)


def test_refit_networks_reads_the_shaped_rate_off_the_recorded_times(tmp_path):
    """A committed netfit of a 1 Gbit/s emulated link: refitted, its ping-pong bandwidth is
    the shaped rate (the shaper's burst no longer sets the slope)."""
    from pathlib import Path

    from lab.plan.standin import load_networks

    here = Path(__file__).resolve().parents[2] / "lab/records/data/standin-heldout"
    path = here / "net-2-1gbit.json"
    ((net, doc),) = load_networks([path], refit=True).values()
    assert doc["refit"]
    assert 8 / net.p2p.beta_s_per_byte / 1e9 == pytest.approx(1.0, rel=0.10)
    assert net.p2p.r2 > 0.95
    ((recorded, _),) = load_networks([path]).values()
    assert recorded.p2p == NetworkFit.from_json(json.loads(path.read_text())).p2p
    bare = tmp_path / "net-bare.json"
    bare.write_text(json.dumps({k: v for k, v in doc.items() if k != "measurements"}))
    with pytest.raises(ValueError, match="no recorded ping-pong times"):
        load_networks([bare], refit=True)


# CPU-bound, no MPI: about two minutes of one core (13 scorings); the limit guards against a
# hang, it measures nothing, so it leaves room for a host whose cores other jobs share
# (load ~10 made the default 300 s too short; at load ~25 it took 19 minutes).
@pytest.mark.timeout(2400)
def test_the_rescore_script_scores_every_stored_launch_held_out(tmp_path):
    """``lab/standin_rescore.sh`` on the committed launches: every 8-rank GoogLeNet and
    ResNet-50 contender row (and the 2- and 4-rank rows at 2500mbit), every launch after the
    clock fix, every one with an in-flight netfit, every wire-codec launch and VGG-16's, is
    predicted, none of the 2- and 4-rank rows at 1gbit it calibrates on."""
    import glob
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    data = repo / "lab/records/data"
    out = tmp_path / "rescore"
    env = {"PATH": "/usr/bin:/bin", "PY": sys.executable}
    subprocess.run(["bash", "lab/standin_rescore.sh", str(out)], cwd=repo, env=env, check=True)
    launches = "*-*bit/run-*-8-*.json"
    groups = (
        ("googlenet-all", ["standin-*/run-googlenet*.json"]),
        ("resnet50-all", ["standin-*/run-resnet50-8*.json"]),
        ("clockfix-all", [f"standin-clockfix/{launches}"]),
        ("inflight-all", [f"standin-inflight/{launches}"]),
        ("codecs-all", [f"standin-codecs/{launches}"]),
        ("vgg16-late-k25", ["standin-late/vgg16/run-vgg16-8-1gbit-k25.json"]),
        ("vgg16-k25", ["standin-vgg16/k25/run-vgg16-8-*.json"]),
        ("vgg16-ps-4-whole", ["standin-ps-split/vgg16-4-whole/run-vgg16-4-*.json"]),
        ("vgg16-ps-4-split", ["standin-ps-split/vgg16-4-split/run-vgg16-4-*.json"]),
        ("vgg16-ps-8-split", ["standin-ps-split/vgg16-8-split/run-vgg16-8-*.json"]),
    )
    for name, patterns in groups:
        files = [f for p in patterns for f in glob.glob(str(data / p)) if "-1-host" not in f]
        held = [r for r in load_runs(files) if not (r.rate == "1gbit" and r.size in (2, 4))]
        if name.startswith("vgg16-ps"):  # priced in the layout the run used
            assert {r.split for r in held if r.strategy == "ps"} == {name.endswith("split")}
        doc = json.loads((out / f"{name}.json").read_text())
        assert len(doc["rows"]) == len({(r.group, r.name) for r in held}) > 0
        assert all(0 < row["predicted_s"] < 10 for row in doc["rows"])
        assert doc["calibration"]["sizes"] == [2, 4] and doc["calibration"]["rate"] == "1gbit"


def test_plan_validate_without_calibration_launches_says_which_to_add():
    """An 8-rank launch alone (``SIZES=8``) has nothing to calibrate on: one line naming
    the stored calibration launches, no traceback."""
    from pathlib import Path

    from click.testing import CliRunner

    from lab.cli import lab

    data = Path(__file__).resolve().parents[2] / "lab/records/data/standin-resnet50"
    args = ["plan-validate", "--standin-runs", str(data / "run-resnet50-8-400mbit.json")]
    args += ["--networks", str(data / "net-8-400mbit.json"), "--calibrate-sizes", "2,4"]
    args += ["--calibrate-rate", "1gbit"]
    out = CliRunner().invoke(lab, args)
    assert out.exit_code == 2, out.output
    assert "no --standin-runs launch at sizes 2,4 on 1gbit to calibrate on" in out.output
    assert "run-googlenet-{2,4}-1gbit.json" in out.output and "Traceback" not in out.output


def test_a_frozen_calibration_from_other_sizes_is_refused_in_one_line(tmp_path):
    """``--standin-calibration`` with ``--standin-runs`` reuses a fit only where it was made
    on the same sizes and rate: another one is named, with the flags to pass."""
    from pathlib import Path

    from click.testing import CliRunner

    from lab.cli import lab
    from lab.plan.standin import StandinCalibration

    frozen = StandinCalibration({}, {"ps": 1e-9}, 0.0, (2,), "1gbit", 3, 1.0)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"calibration": frozen.to_json()}))
    assert StandinCalibration.from_json(frozen.to_json()) == frozen
    data = Path(__file__).resolve().parents[2] / "lab/records/data/standin-heldout"
    args = ["plan-validate", "--standin-calibration", str(path)]
    for n in (2, 4):
        args += ["--standin-runs", str(data / f"run-googlenet-{n}-1gbit.json")]
        args += ["--networks", str(data / f"net-{n}-1gbit.json")]
    out = CliRunner().invoke(lab, [*args, "--calibrate-sizes", "2,4"])
    assert out.exit_code == 2, out.output
    assert "calibrated at sizes [2] on 1gbit, not [2, 4] on 1gbit" in out.output
    assert "Traceback" not in out.output


def test_the_in_flight_sweep_prices_a_queued_allreduce_in_the_stood_for_time():
    from gossipgrad.tools.plan.formats import AllreduceFit
    from lab.plan.standin import network_model

    beta = RATES["1gbit"]
    ring = 2 * 7 / 8 * beta  # the ideal ring's seconds per byte at 8 ranks
    net = NetworkFit(
        LinkFit(1e-4, beta, 1.0),
        AllreduceFit(14e-4, 1.5 * ring, 1.0, size=8),
        source="netfit on test, emulated link rate 1gbit",
        allreduce_in_flight=AllreduceFit(14e-4, 1.1 * ring, 1.0, size=8, in_flight=4),
    )
    model = network_model(net, net.to_json(), K)
    assert model.allreduce_bandwidth_factor == pytest.approx(1.5)
    assert model.queued_bandwidth_factor == pytest.approx(1.1)
    assert model.queued_latency_factor == pytest.approx(1.0)
    alone = model.bucket_s("allreduce", 2**20, 8)
    [queued] = model.queued_costs("allreduce", [2**20], 8)
    assert queued < alone  # and both in the stood-for time (/ K)
    assert alone == pytest.approx((14e-4 + 1.5 * ring * 2**20) / K)
    plain = network_model(replace(net, allreduce_in_flight=None), net.to_json(), K)
    assert plain.queued_costs("allreduce", [2**20], 8) is None


def test_without_in_flight_moves_only_gossipgrads_allreduce(tmp_path):
    """``plan-validate --without-in-flight`` on the first launch whose netfit has the
    in-flight sweep: the allreduce row is priced one bucket at a time (slower), every other
    contender's prediction is the same."""
    from pathlib import Path

    from click.testing import CliRunner

    from lab.cli import lab

    data = Path(__file__).resolve().parents[2] / "lab/records/data"
    h, d = data / "standin-heldout", data / "standin-inflight/resnet50-200mbit"
    args = ["plan-validate", "--calibrate-sizes", "2,4", "--calibrate-rate", "1gbit"]
    for n in (2, 4):
        args += ["--standin-runs", str(h / f"run-googlenet-{n}-1gbit.json")]
        args += ["--networks", str(h / f"net-{n}-1gbit.json")]
    args += ["--standin-runs", str(d / "run-resnet50-8-200mbit.json")]
    args += ["--networks", str(d / "net-8-200mbit.json"), "--refit-networks"]
    predicted = []
    for extra in ([], ["--without-in-flight"]):
        out = tmp_path / f"scored{len(extra)}.json"
        res = CliRunner().invoke(lab, [*args, *extra, "--out", str(out)])
        assert res.exit_code == 0, res.output
        rows = json.loads(out.read_text())["rows"]
        predicted.append({r["name"]: r["predicted_s"] for r in rows if r["size"] == 8})
    with_term, without = predicted
    assert set(with_term) == {"gossip", "allreduce", "ps", "ddp", "horovod", "local"}
    assert without["allreduce"] > 1.05 * with_term["allreduce"]
    assert all(without[k] == with_term[k] for k in with_term if k != "allreduce")


def test_a_ps_run_is_priced_with_the_layout_its_engine_used():
    """ps split VGG-16's 411 MB weight into parts in runs that say so (``split_parameters``,
    written by bench strategies since the split); older runs kept it whole, one owner."""
    from gossipgrad.tools.plan.patterns import ps_cap
    from lab.plan.standin import profile_for

    vgg = "vgg16-p100-fp32-b64"
    profiles = {vgg: StandinProfile.load(vgg)}
    rec = record(8, "1gbit")
    rec["standin"]["profile"] = vgg
    rec["results"] = [{**rec["results"][0], "name": "ps", "strategy": "ps"}]
    whole = load_runs_from(rec)[0]
    assert whole.split is False
    rec["results"][0]["split_parameters"] = True
    split = load_runs_from(rec)[0]
    assert split.split is True
    cap = ps_cap(profiles[vgg].planner.grad_bytes, 8, 25 * 2**20)
    kept = profile_for(whole, profiles, 1.0).buckets
    parts = profile_for(split, profiles, 1.0).buckets
    assert max(b.bytes for b in kept) > 400e6 > 5 * cap
    assert max(b.bytes for b in parts) <= cap
    assert sum(b.bytes for b in parts) == sum(b.bytes for b in kept)

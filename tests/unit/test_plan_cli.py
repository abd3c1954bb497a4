"""``gossipgrad plan``: files in, markdown (and PNG) out; bad input is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.tools.plan.formats import Bucket, LinkFit, NetworkFit, Profile
from gossipgrad.tools.plan.model import MIB

REPO = Path(__file__).resolve().parents[2]
PROFILE = Profile(
    "toy", 32, "cpu", 0.1, 0.2, 0.05, 4 * MIB, (Bucket(0, 2 * MIB, 0.1), Bucket(1, 2 * MIB, 0.2))
)
NETWORK = NetworkFit(LinkFit(1e-5, 1 / 1e9, 0.999), source="unit test")


@pytest.fixture
def files(tmp_path):
    PROFILE.save(tmp_path / "profile.json")
    NETWORK.save(tmp_path / "network.json")
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(main, ["plan", *args])


def base(d: Path) -> list[str]:
    return ["--profile", str(d / "profile.json"), "--network", str(d / "network.json")]


def blocking_step(d: Path, strategy: str, size: int, *extra: str) -> tuple[float, str]:
    """The predicted step of one blocking configuration (one 100 MiB bucket cap, staleness
    0, no overlap) read from its row, and the whole report."""
    res = invoke(*base(d), "--sizes", str(size), "--strategies", strategy, "--bucket-mb", "100",
                 "--staleness", "0", "--no-overlap", *extra)  # fmt: skip
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.output.splitlines() if ln.startswith(f"| {strategy} | {size} |"))
    return float(row.split("|")[5]), res.output


def test_plan_writes_table_and_png(files):
    md, png = files / "plan.md", files / "plan.png"
    res = invoke(*base(files), "--sizes", "2,4,8", "--png", str(png), "--out", str(md))
    assert res.exit_code == 0, res.output
    text = md.read_text()
    assert "Plan for toy (batch 32 on cpu), network: unit test" in text
    assert "**PREDICTION.**" in text and "throughput predictions only" in text
    assert "| strategy | size | bucket MiB |" in text
    for size in (2, 4, 8):
        assert any(f"| {size} |" in line for line in text.splitlines())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "throughput predictions only" in res.output  # the note on stderr


def test_plan_prints_to_stdout_with_every_row(files):
    res = invoke(*base(files), "--sizes", "4", "--strategies", "gossip", "--bucket-mb", "1,4",
                 "--staleness", "0", "--all-rows")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "All configurations:" in res.output
    assert res.output.count("| gossip | 4 |") == 3  # recommended + two bucket caps


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--sizes", "2,x"], 2, "expected a comma-separated list"),
        (["--sizes", ""], 2, "must not be empty"),
        (["--sizes", "0"], 1, "size must be an integer >= 1"),
        (["--sizes", "2", "--strategies", "ring"], 1, "unknown strategy"),
        (["--sizes", "2", "--staleness", "2"], 1, "staleness must be 0 or 1"),
        (["--sizes", "2", "--bucket-mb", "0"], 1, "bucket_mb values must be finite numbers > 0"),
        # the new user: millions of 1-byte parts, no answer within a minute
        (
            ["--sizes", "8", "--strategies", "ps", "--bucket-mb", "0.000001"],
            1,
            "--bucket-mb must be >= 0.000244 (256 bytes: each bucket is a message a step)",
        ),
        (  # the toy's 4 MiB over 100,000 servers: every part a message; answered at once
            ["--sizes", "100000", "--strategies", "gossip,ps"],
            1,
            "ps at 100000 ranks would split the parameters into",
        ),
        (["--sizes", "2", "--duplex", "3"], 2, "--duplex"),
        (["--sizes", "2", "--target-accuracy", "0.9"], 1, "must be given together"),
        (["--sizes", "2", "--calibrate-allreduce"], 1, "network has no 'allreduce' fit"),
        (["--sizes", "2", "--png", "/nonexistent/dir/p.png"], 1, "No such file or directory"),
    ],
)
def test_bad_options_are_clear_errors(files, extra, code, message):
    res = invoke(*base(files), *extra)
    assert res.exit_code == code, res.output
    assert message in res.output
    assert isinstance(res.exception, SystemExit)  # not an uncaught exception


def test_missing_files_and_bad_fields_name_the_problem(files):
    res = invoke("--profile", str(files / "nope.json"), "--network", str(files / "network.json"),
                 "--sizes", "2")  # fmt: skip
    assert res.exit_code == 2 and "does not exist" in res.output
    doc = PROFILE.to_json()
    doc["buckets"][1]["ready_s"] = 0.3
    (files / "profile.json").write_text(json.dumps(doc))
    res = invoke(*base(files), "--sizes", "2")
    assert res.exit_code == 1
    assert "profile field 'buckets[1].ready_s' must be <= backward_s (0.2), got 0.3" in res.output
    (files / "network.json").write_text("{not json")
    PROFILE.save(files / "profile.json")
    res = invoke(*base(files), "--sizes", "2")
    assert res.exit_code == 1 and "is not valid JSON" in res.output


def test_the_real_entry_point_prints_no_traceback(files):
    (files / "network.json").write_text(json.dumps({"p2p": {"alpha_s": -1}}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "gossipgrad", "plan", *base(files), "--sizes", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "network field 'p2p.alpha_s' must be >= 0.0, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plan_host_flags_add_the_contention_term(files):
    args = [*base(files), "--sizes", "2", "--strategies", "gossip", "--bucket-mb", "1",
            "--staleness", "0", "--all-rows"]  # fmt: skip
    free = invoke(*args)
    crowded = invoke(*args, "--host-cores", "2", "--ranks-per-host", "2", "--handoff-us", "1000")
    assert free.exit_code == 0 and crowded.exit_code == 0, crowded.output
    assert "cores per rank" not in free.output
    assert "1 cores per rank (no spare core: overlap 0 us/step, hand-off 1000 us/bucket" in (
        crowded.output
    )

    # two 2 MiB buckets: F + B + S + O + 2 ms > the overlapped prediction
    def step(out: str) -> float:
        return float(out.split("| gossip | 2 | 1 | 0 | ")[1].split(" |")[0])

    assert step(crowded.output) > step(free.output)
    per_step = invoke(*args, "--host-cores", "2", "--ranks-per-host", "2", "--overlap-us", "2000")
    assert per_step.exit_code == 0, per_step.output
    assert "overlap 2000 us/step, hand-off 0 us/bucket" in per_step.output
    # one 2 ms charge per step equals two 1 ms charges for the two buckets
    assert step(per_step.output) == pytest.approx(step(crowded.output), abs=2e-4)
    half = invoke(*args, "--ranks-per-host", "2")
    assert half.exit_code != 0 and "--host-cores and --ranks-per-host" in half.output


def test_plan_stale_flag_charges_staleness_one_without_a_spare_core(files):
    args = [*base(files), "--sizes", "2", "--strategies", "gossip", "--bucket-mb", "1",
            "--staleness", "1", "--host-cores", "2", "--ranks-per-host", "2"]  # fmt: skip
    plain, stale = invoke(*args), invoke(*args, "--stale-ns-per-byte", "10")
    assert plain.exit_code == 0 and stale.exit_code == 0, stale.output

    def step(out: str) -> float:
        return float(out.split("| gossip | 2 | 1 | 1 | ")[1].split(" |")[0])

    # 4 MiB of gradients at 10 ns/byte: 41.9 ms more per step
    assert step(stale.output) - step(plain.output) == pytest.approx(4 * MIB * 1e-8, abs=1e-4)


def test_calibration_factors_scale_the_prediction(files):
    """--compute-factor 2 doubles a blocking step's compute; --exchange-factor gossip=3
    triples the exchange: with the toy profile and link the step is closed-form."""

    def step_s(*extra: str) -> float:
        return blocking_step(files, "gossip", 2, *extra)[0]

    exchange = 1e-5 + 4 * MIB / 1e9  # one 4 MiB bucket: alpha + n beta
    assert step_s() == pytest.approx(0.35 + exchange, abs=1e-4)
    assert step_s("--compute-factor", "2") == pytest.approx(0.70 + exchange, abs=1e-4)
    assert step_s("--exchange-factor", "gossip=3") == pytest.approx(0.35 + 3 * exchange, abs=1e-4)
    res = invoke(
        *base(files),
        "--sizes",
        "2",
        "--compute-factor",
        "1.5",
        "--exchange-factor",
        "gossip=3",
        "--exchange-factor",
        "allreduce=2",
    )
    assert "in-step calibration: compute x1.5, gossip x3, allreduce x2" in res.output


def test_plan_wire_prices_the_codecs_bytes(files):
    """--wire bf16 halves the bandwidth term of the toy's one 4 MiB blocking exchange and
    says so in the title; an unknown codec is a one-line error naming the choices."""

    def step_s(*extra: str) -> tuple[float, str]:
        return blocking_step(files, "gossip", 2, *extra)

    fp32, _ = step_s()
    bf16, out = step_s("--wire", "bf16")
    assert fp32 == pytest.approx(0.35 + 1e-5 + 4 * MIB / 1e9, abs=1e-4)
    assert bf16 == pytest.approx(0.35 + 1e-5 + 2 * MIB / 1e9, abs=1e-4)
    assert "wire bf16 (0.5x the bytes)" in out
    res = invoke(*base(files), "--sizes", "2", "--wire", "fp9")
    assert res.exit_code == 2 and "'fp9' is not one of" in res.output, res.output


def test_plan_wire_leaves_out_what_the_runtime_refuses(files):
    """Horovod's own compression has no bf16: planned with --wire bf16 it is left out (and
    the title says so); with nothing else left the error says why, on one line."""
    res = invoke(*base(files), "--sizes", "2", "--strategies", "gossip,horovod,local",
                 "--wire", "bf16", "--all-rows")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "left out (not with bf16): horovod" in res.output
    assert "| horovod |" not in res.output and "| gossip | 2 |" in res.output
    alone = invoke(*base(files), "--sizes", "2", "--strategies", "horovod", "--wire", "fp8")
    assert alone.exit_code == 1 and "Traceback" not in alone.output, alone.output
    assert "--wire fp8: no strategy planned takes it" in alone.output


@pytest.mark.parametrize("bad", ["gossip", "gossip=0", "gossip=x", "ring=2", "gossip=inf"])
def test_bad_exchange_factor_is_one_clear_error(files, bad):
    res = invoke(*base(files), "--sizes", "2", "--exchange-factor", bad)
    assert res.exit_code == 2 and "--exchange-factor" in res.output, res.output


def test_plan_fabric_flags_change_the_prediction(files):
    slow = NetworkFit(LinkFit(1e-5, 1 / 1e8, 0.999), source="unit test")  # 0.1 GB/s
    slow.save(files / "network.json")
    args = [*base(files), "--sizes", "16", "--strategies", "gossip", "--bucket-mb", "4",
            "--staleness", "0", "--all-rows"]  # fmt: skip
    one = invoke(*args)
    shared = invoke(*args, "--ranks-per-node", "4")
    assert one.exit_code == 0 and shared.exit_code == 0, one.output + shared.output
    step = [ln for ln in one.output.splitlines() if ln.startswith("| gossip | 16 | 4 |")][0]
    step4 = [ln for ln in shared.output.splitlines() if ln.startswith("| gossip | 16 | 4 |")][0]
    assert float(step4.split("|")[5]) > float(step.split("|")[5])  # 4 ranks behind one NIC
    res = invoke(*args, "--mix", "both")
    assert res.exit_code == 2 and "--mix" in res.output


def test_plan_time_to_accuracy_from_measured_step_times(files):
    metrics = files / "m.jsonl"
    lines = []
    for size, steps in ((1, 100), (2, 60), (4, 40)):
        lines.append({"event": "eval", "size": size, "step": steps, "strategy": "gossip",
                      "test_accuracy": 0.95})  # fmt: skip
        lines.append({"event": "summary", "size": size, "steps": steps, "strategy": "gossip",
                      "test_accuracy": 0.95})  # fmt: skip
    metrics.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    row = {"strategy": "gossip", "name": "gossip", "step_s": 2.0, "step_s_undilated": 0.2}
    record = {"bench": "strategies", "size": 8, "results": [row]}
    (files / "s8.json").write_text("log line\n" + json.dumps(record) + "\n")
    res = invoke(*base(files), "--sizes", "8", "--metrics", str(metrics), "--target-accuracy",
                 "0.9", "--step-times", str(files / "s8.json"))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "step time MEASURED (bench records: s8.json)" in res.output
    row = [ln for ln in res.output.splitlines() if ln.startswith("| 8 | gossip |")][0]
    cells = [c.strip() for c in row.split("|")]
    steps = float(cells[5])  # predicted at 8 by the batch form fitted on sizes 1, 2, 4
    assert cells[7] == "0.2000" and float(cells[8]) == pytest.approx(steps * 0.2, abs=0.01)
    bad = invoke(*base(files), "--sizes", "8", "--metrics", str(metrics), "--target-accuracy",
                 "0.9", "--step-times", str(metrics))  # fmt: skip
    assert bad.exit_code == 1 and "not a 'gossipgrad bench strategies' or" in bad.output
    # a bench tta launch's rows (a dict by strategy) give their mean training step
    tta = {"bench": "tta", "size": 8, "results": {"gossip": {"strategy": "gossip", "step_s": 0.3}}}
    (files / "t8.json").write_text(json.dumps(tta) + "\n")
    res = invoke(*base(files), "--sizes", "8", "--metrics", str(metrics), "--target-accuracy",
                 "0.9", "--step-times", str(files / "t8.json"))  # fmt: skip
    row = [ln for ln in res.output.splitlines() if ln.startswith("| 8 | gossip |")][0]
    cells = [c.strip() for c in row.split("|")]
    assert cells[7] == "0.3000" and float(cells[8]) == pytest.approx(
        float(cells[5]) * 0.3, abs=0.01
    )


def test_plan_ps_whole_keeps_a_large_parameter_on_one_owner(tmp_path):
    """A 6 MiB parameter beside a 2 MiB one, 4 ranks: ps serves at most a quarter of the
    model each, so by default the large one is split across owners; --ps-whole (an optimizer
    that is not elementwise) keeps it on one and the step is slower, and the title says so."""
    prof = Profile("big", 32, "cpu", 0.1, 0.2, 0.05, 8 * MIB,
                   (Bucket(0, 6 * MIB, 0.1), Bucket(1, 2 * MIB, 0.2)))  # fmt: skip
    prof.save(tmp_path / "profile.json")
    NetworkFit(LinkFit(1e-5, 1 / 1e8, 0.999), source="100 MB/s").save(tmp_path / "network.json")

    def ps(*extra: str) -> tuple[float, str]:
        return blocking_step(tmp_path, "ps", 4, *extra)

    split, out = ps()
    whole, whole_out = ps("--ps-whole")
    assert whole > split
    assert "--ps-whole" in whole_out and "--ps-whole" not in out


def test_plan_prices_a_plugin_strategy_by_its_own_shape(files):
    """A plugin strategy (tests/support/plugins/toy_pairs.py) brings its exchange shape, and
    the planner prices it with no change under gossipgrad/: at two ranks its pair exchange
    is gossip's exchange (one bucket each way with one peer), so the predictions agree;
    at four its bytes are gossip's too (every rank has its pair)."""
    import toy_pairs  # registers the strategy and its shape

    toy, report = blocking_step(files, toy_pairs.NAME, 2)
    gossip, _ = blocking_step(files, "gossip", 2)
    assert toy == pytest.approx(gossip) and toy > PROFILE.compute_s
    assert f"| {toy_pairs.NAME} | 2 |" in report
    res = invoke(*base(files), "--sizes", "4", "--strategies", f"{toy_pairs.NAME},allreduce")
    assert res.exit_code == 0 and f"| {toy_pairs.NAME} | 4 |" in res.output, res.output

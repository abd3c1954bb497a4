"""``gossipgrad bench tta``: the race in-process (thread ranks) and under a real mpiexec, its
clocks, its stopping rules, its outputs, and that the planner reads what it writes."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import gossipgrad.tools.bench.tta as tta_mod
from gossipgrad.cli import main
from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.tools.bench.tta import TtaOptions, run_tta
from gossipgrad.tools.bench.tta_report import link_bits_per_s, markdown_table, metrics_lines
from gossipgrad.tools.plan.steps import measured_steps

from launch import JOIN_BYTES, gossipgrad

JOB = TrainConfig.from_flags(
    arch="mlp", hidden=16, batch_size=8, lr=0.05, max_steps=6, epochs=10_000, progress=False
)
HIDDEN16_BYTES = (64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10) * 4


def race(opts: TtaOptions, size: int = 2) -> dict:
    records = run_ranks(size, lambda comm: run_tta(comm, JOB, opts), timeout=150)
    assert all(
        json.dumps(r, sort_keys=True) == json.dumps(records[0], sort_keys=True) for r in records[1:]
    ), "ranks disagree about the record"
    return records[0]


@pytest.mark.timeout(180)
def test_every_strategy_runs_the_budget_with_its_curve_and_bytes():
    rec = race(TtaOptions(("gossip", "allreduce", "local"), target=1.0, steps=6, eval_every=2))
    assert list(rec["results"]) == ["gossip", "allreduce", "local"]
    assert rec["model_bytes"] == HIDDEN16_BYTES and rec["size"] == 2
    for name, r in rec["results"].items():
        assert [p[1] for p in r["curve"]] == [0, 2, 4, 6], name
        walls = [p[0] for p in r["curve"]]
        assert walls[0] == 0 and walls == sorted(walls) and walls[-1] == r["train_seconds"] > 0
        assert r["steps"] == 6 and r["stopped"] == "budget"
        assert r["seconds_to_target"] is None and r["steps_to_target"] is None  # 1.0: unreached
        assert r["final_accuracy"] == r["curve"][-1][2]
        assert r["wire_bytes_per_step"] is None  # not in the emulated cluster
    posted = {n: r["posted_bytes_per_step"] for n, r in rec["results"].items()}
    # 2 ranks: gossip sends the model once a step, allreduce reduces it once, local nothing;
    # each also has the join agreement's 3 int64 every 4 steps (engine/bucket/join.py), spread
    extra = posted["local"]
    assert 0 < extra <= JOIN_BYTES, posted
    assert posted == {
        "gossip": HIDDEN16_BYTES + extra,
        "allreduce": HIDDEN16_BYTES + extra,
        "local": extra,
    }


@pytest.mark.timeout(180)
def test_evaluation_is_off_the_training_clock(monkeypatch):
    real = tta_mod.evaluate

    def slow(*args, **kwargs):
        time.sleep(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(tta_mod, "evaluate", slow)
    rec = race(TtaOptions(("gossip",), target=1.0, steps=6, eval_every=2))
    r = rec["results"]["gossip"]
    assert r["evaluations"] == 4 and r["eval_seconds"] >= 4.0
    assert r["train_seconds"] < 1.0, r  # three evaluations fell between its segments


@pytest.mark.timeout(180)
def test_stop_at_target_and_time_limit_stop_after_one_segment():
    rec = race(
        TtaOptions(("gossip", "allreduce"), target=0.01, steps=6, eval_every=2, stop_at_target=True)
    )
    for r in rec["results"].values():
        assert (r["steps"], r["stopped"]) == (2, "target")
        assert (r["steps_to_target"], r["seconds_to_target"]) == (0, 0.0)  # above at step 0
        assert r["samples_to_target"] == 0
    rec = race(TtaOptions(("local",), target=1.0, steps=6, eval_every=2, time_limit_s=1e-9))
    assert (rec["results"]["local"]["steps"], rec["results"]["local"]["stopped"]) == (
        2,
        "time-limit",
    )


@pytest.mark.timeout(180)
def test_the_planner_reads_the_steps_the_bench_measured():
    rec = race(TtaOptions(("gossip", "local"), target=0.3, steps=6, eval_every=1))
    lines = metrics_lines(rec)
    measured = measured_steps(lines, 0.3)
    for name, r in rec["results"].items():
        got = measured.steps.get((name, 2))
        want = r["steps_to_target"]
        assert (got == (want,)) if want is not None else got is None, (name, got, want)
        if want is not None:
            assert r["samples_to_target"] == want * 8 * 2
    table = markdown_table(rec)
    assert table.count("\n") == 6 and "| gossip |" in table and "| local |" in table


def test_bad_options_name_their_flag():
    for kwargs, flag in (
        ({"strategies": ("gossip", "gossip")}, "--strategies"),
        ({"target": 1.5}, "--target"),
        ({"eval_every": 0}, "--eval-every"),
        ({"time_limit_s": -1.0}, "--time-limit"),
    ):
        with pytest.raises(ValueError, match=flag):
            TtaOptions(**kwargs)
    res = CliRunner().invoke(main, ["bench", "tta", "--target", "0"])
    assert res.exit_code == 2 and "--target" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["bench", "tta", "--hidden", "-3"])
    assert res.exit_code == 2 and "--hidden" in res.output


def test_link_rates():
    assert link_bits_per_s("10gbit") == 1e10 and link_bits_per_s("250kbit") == 2.5e5
    assert link_bits_per_s("fast") is None and link_bits_per_s("") is None


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_bench_tta_under_mpiexec_writes_what_it_reports(tmp_path):
    md, png, metrics = tmp_path / "t.md", tmp_path / "t.png", tmp_path / "t.jsonl"
    out = gossipgrad(
        2,
        [
            "bench",
            "tta",
            "--strategies",
            "gossip,allreduce,ddp,local",
            "--hidden",
            "16",
            "--batch-size",
            "8",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--target",
            "0.2",
            "--markdown",
            str(md),
            "--png",
            str(png),
            "--metrics-out",
            str(metrics),
            "--comm-timeout",
            "60",
        ],
        timeout=280,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout
    rec = json.loads(lines[0])
    assert rec["bench"] == "tta" and rec["size"] == 2 and rec["target"] == 0.2
    assert sorted(rec["results"]) == ["allreduce", "ddp", "gossip", "local"]  # JSON sorts keys
    for r in rec["results"].values():
        assert {
            "seconds_to_target",
            "steps_to_target",
            "samples_to_target",
            "final_accuracy",
            "wire_bytes_per_step",
            "eval_seconds",
            "curve",
        } <= set(r)
        assert [p[1] for p in r["curve"]] == [0, 2, 4]
    # ddp and allreduce average the same gradients from the same start: the same accuracies
    assert [p[2] for p in rec["results"]["ddp"]["curve"]] == [
        p[2] for p in rec["results"]["allreduce"]["curve"]
    ]
    assert sorted(md.read_text().splitlines()) == sorted(markdown_table(rec).splitlines())
    assert sorted(metrics.read_text().splitlines()) == sorted(metrics_lines(rec))
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.timeout(180)
def test_a_blocking_gossip_contender_trains_the_same_model_beside_the_polling_one(monkeypatch):
    built = []
    real = tta_mod.build_optimizer

    def spy(*args, **kwargs):
        opt = real(*args, **kwargs)
        built.append((args[2].policy.block, opt.timing.thread.block))
        return opt

    monkeypatch.setattr(tta_mod, "build_optimizer", spy)
    rec = race(TtaOptions(("gossip", "gossip@block"), target=1.0, steps=4, eval_every=2))
    plain, block = rec["results"]["gossip"], rec["results"]["gossip@block"]
    assert [p[1:] for p in plain["curve"]] == [p[1:] for p in block["curve"]]
    assert plain["posted_bytes_per_step"] == block["posted_bytes_per_step"] > 0
    assert sorted(set(built)) == [(False, False), (True, True)]  # 2 ranks x 2 contenders
    with pytest.raises(ValueError, match="--strategies: unknown variant 'gossip@spin'"):
        TtaOptions(("gossip@spin",))


@pytest.mark.timeout(180)
def test_how_often_a_staleness_one_contender_is_evaluated_does_not_change_it():
    """Evaluated every step or every third, gossip at staleness 1 trains the same model
    (the exchange in flight at a segment's end is still applied at the next step), and
    evaluated every step it still mixes: its curve is not ``local``'s (it was, when the
    segment's end dropped that exchange)."""
    name = "gossip:staleness=1"
    every = race(TtaOptions((name, "local"), target=1.0, steps=6, eval_every=1), size=4)
    third = race(TtaOptions((name,), target=1.0, steps=6, eval_every=3), size=4)
    at = {p[1]: p[2] for p in every["results"][name]["curve"]}
    assert [p[2] for p in third["results"][name]["curve"]] == [at[0], at[3], at[6]]
    alone = [p[2] for p in every["results"]["local"]["curve"]]
    assert [p[2] for p in every["results"][name]["curve"]] != alone

"""``--device standin:PROFILE`` under a real mpiexec: train and bench standin end to end."""

from __future__ import annotations

import json

import pytest

from lab.devices.published import nominal_profile

from launch import gossipgrad

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def mlp_profile(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("standin") / "mlp.json"
    nominal_profile("mlp", 32, 0.01).save(path)  # a 10 ms step of the digits MLP
    return str(path)


def _last_json(text: str) -> dict:
    return json.loads(next(ln for ln in reversed(text.splitlines()) if ln.startswith("{")))


@pytest.mark.timeout(300)
def test_train_on_two_stand_in_ranks_exits_0_and_its_summary_says_stand_in(mlp_profile, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    res = gossipgrad(
        2,
        ["train", "--device", f"standin:{mlp_profile}", "--dilate", "2", "--max-steps", "3"]
        + ["--no-progress", "--metrics-out", str(metrics)],
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "stand-in device: the model's arithmetic is not computed" in res.stderr
    s = _last_json(res.stdout)
    assert s["device"] == "standin" and s["steps"] == 3 and s["size"] == 2
    assert s["top1"] is None and s["test_accuracy"] is None  # accuracy is not reported
    rec = s["standin"]
    assert rec["dilate"] == 2 and rec["profile"] == mlp_profile
    assert rec["step_s_undilated"] == pytest.approx(rec["step_s"] / 2)
    assert rec["samples_per_s_undilated"] == pytest.approx(2 * rec["samples_per_s"])
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert all(r.get("top1") is None for r in records if r["event"] == "eval")


@pytest.mark.timeout(120)
def test_a_profile_of_another_model_is_a_one_line_error(mlp_profile):
    res = gossipgrad(0, ["train", "-a", "cnn", "--device", f"standin:{mlp_profile}"], timeout=90)
    assert res.returncode != 0
    assert f"--device standin:{mlp_profile} is a profile of mlp" in res.stderr, res.stderr


@pytest.mark.timeout(300)
def test_bench_standin_on_two_ranks_reports_time_ready_and_cpu(mlp_profile):
    res = gossipgrad(
        2,
        ["bench", "standin", "--profile", mlp_profile, "--dilate", "3"]
        + ["--strategies", "local,gossip", "--steps", "2", "--reps", "1", "--warmup", "0"],
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    r = _last_json(res.stdout)
    assert r["bench"] == "standin" and r["size"] == 2 and r["standin"]["dilate"] == 3
    assert [row["strategy"] for row in r["results"]] == ["local", "gossip"]
    for row in r["results"]:
        assert row["step_s"] > 0 and row["step_s_undilated"] == pytest.approx(
            row["step_s"] / 3, rel=1e-4
        )
        assert row["ready"]["params"] == 6 and row["ready"]["max_abs_error_s"] is not None
        assert row["cpu_s_per_step"] >= 0 and row["cpu_share"] is not None
    assert isinstance(r["checks"]["local_step_within_5pct"], bool)


@pytest.mark.timeout(300)
def test_bench_strategies_trains_the_profiled_model_on_stand_in_ranks(mlp_profile):
    res = gossipgrad(
        2,
        ["bench", "strategies", "--device", f"standin:{mlp_profile}", "--dilate", "2"]
        + ["--strategies", "gossip,local", "--steps", "1", "--reps", "1", "--warmup", "0"],
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    r = _last_json(res.stdout)
    assert r["standin"]["arch"] == "mlp" and r["standin"]["dilate"] == 2
    assert r["batch"] == 32  # the profile's batch when --batch is not given
    assert r["model_bytes"] == 104488  # the digits MLP, not the Linear stack
    for row in r["results"]:
        assert row["step_s_undilated"] == pytest.approx(row["step_s"] / 2, rel=1e-4)

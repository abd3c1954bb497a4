"""``python -m lab soak`` (lab/studies/soak.py): the summary of its samples, and a short soak
under mpiexec (fields; the 20,000-step figure is recorded in lab/records/stragglers.md)."""

from __future__ import annotations

import json

import pytest

from lab.studies import soak

from launch import lab


def _sample(step, rss, threads=4, fds=20):
    return {
        "step": step,
        "ranks": {
            "0": {"rss_kib": rss, "threads": threads, "fds": fds},
            "1": {"rss_kib": 1000, "threads": 4, "fds": 20},
        },
    }


def test_growth_is_measured_from_the_first_sample_and_counts_must_stay_constant():
    flat = soak.summarize([_sample(1000, 1000), _sample(2000, 1040), _sample(3000, 1020)])
    assert flat == {"rss_growth": 0.04, "threads_constant": True, "fds_constant": True}
    grew = soak.summarize([_sample(1000, 1000), _sample(2000, 1100, threads=5, fds=21)])
    assert grew == {"rss_growth": 0.1, "threads_constant": False, "fds_constant": False}
    assert soak.summarize([_sample(1000, 1000)])["rss_growth"] is None


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_short_soak_samples_every_rank(tmp_path):
    out_file = tmp_path / "soak.json"
    res = lab(
        0,
        [
            "soak",
            "--ranks",
            "2",
            "--steps",
            "300",
            "--every",
            "100",
            "--eval-every",
            "10",
            "--out",
            str(out_file),
        ],
        timeout=380,
    )
    record = json.loads(out_file.read_text())
    assert record["returncode"] == 0, record.get("stderr_tail")
    assert res.returncode == (0 if record["passed"] else 1)
    assert record["run"]["steps"] == 300 and "--max-lag 2 --shuffle" in record["command"]
    steps = [s["step"] for s in record["samples"]]
    assert len(steps) >= 2 and steps[0] >= 100 and steps == sorted(set(steps)), steps
    for s in record["samples"]:
        assert set(s["ranks"]) == {"0", "1"}
        for u in s["ranks"].values():
            assert u["rss_kib"] > 10_000 and u["threads"] >= 2 and u["fds"] >= 3, u
    assert isinstance(record["rss_growth"], float)

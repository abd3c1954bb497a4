"""Local steps follow a membership change: under Open MPI with ULFM (``--on-failure
continue``) a rank of a gossip-DiLoCo run and of a DiLoCo run over the allreduce dies
mid-run (``GOSSIPGRAD_INJECT_KILL``, between two outer exchanges), and the survivors,
re-anchored on their global average, finish every step. Digits on 4 ranks: 11 steps an
epoch, 3 epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch import OMPI_ENV, ompi_command, run

pytestmark = [pytest.mark.mpi, pytest.mark.ulfm]

DEADLINE = 600  # four Python ranks importing torch on a loaded 2-core machine take minutes


@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.parametrize("strategy", ["gossip", "allreduce"])
def test_a_rank_dies_between_outer_steps_and_the_survivors_finish(tmp_path: Path, strategy):
    metrics = tmp_path / "m.jsonl"
    args = ["train", "--epochs", "3", "--no-progress", "--comm-timeout", "60"]
    args += ["--strategy", strategy, "--timing", "local:4", "--rule", "outer"]
    args += ["--on-failure", "continue", "--metrics-out", str(metrics)]
    res = run(ompi_command(4, args), DEADLINE, **OMPI_ENV, GOSSIPGRAD_INJECT_KILL="2:14")
    assert res.returncode == 0, res.stderr[-4000:]
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert s["steps"] == 33 and s["size_final"] == 3 and [f["rank"] for f in s["failures"]] == [2]
    assert s["timing"] == "local:4" and s["outer_steps"] == 8  # steps 3, 7, ..., 31
    assert s["top1"] > 0.6, s  # still learning
    evals = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [e["consensus_distance"] for e in evals if e.get("event") == "eval"][-1] >= 0

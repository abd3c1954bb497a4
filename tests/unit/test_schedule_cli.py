"""``gossipgrad schedule`` on base2: pairs, weights and idle ranks shown and checked, and the
``--mixing`` record. In process (click's runner), no launcher."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gossipgrad.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, ["schedule", *args])


def test_base2_table_shows_weights_and_idle_ranks_and_checks_exactness():
    result = invoke("--size", "6", "--topology", "base2", "--no-rotate", "--check")
    assert result.exit_code == 0, result.output
    assert "cycle 4 steps, exact after 4" in result.output
    assert "step   0 (cycle 0, round 0): 0->1  1->0  2 idle  3->4  4->3  5 idle" in result.output
    assert "step   1 (cycle 0, round 1): 0->2 w=2/3  1 idle  2->0 w=2/3" in result.output
    assert "exact mean after 4 steps" in result.output


def test_auto_is_the_exact_schedule_and_dissemination_names_it():
    result = invoke("--size", "6", "--check")
    assert result.exit_code == 0, result.output
    assert "size 6, topology base2, cycle 4 steps, exact after 4" in result.output
    result = invoke("--size", "6", "--topology", "dissemination")
    assert "--topology base2 gives the exact mean after 4 steps" in result.output


def test_base2_json_has_weights_idle_and_period():
    result = invoke("-n", "5", "--topology", "base2", "--no-rotate", "--json")
    data = json.loads(result.output)
    assert (data["topology"], data["period"], data["exact_steps"]) == ("base2", 5, 5)
    assert data["cycle_length"] == 5 and data["best_exact"] == "base2"
    assert data["steps"][2] == [[4, 4], [2, 2], [1, 1], [3, 3], [0, 0]]
    assert data["weights"][2] == [0.8, 0.5, 0.5, 0.0, 0.8]
    assert data["idle"][:3] == [[4], [4], [3]]


def test_mixing_record_compares_the_topologies():
    result = invoke("--size", "12", "--mixing", "--tol", "1e-6")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = {row["topology"]: row for row in data["topologies"]}
    assert {"dissemination", "base2"} <= set(rows) and "hypercube" not in rows
    assert rows["base2"]["steps_to_tol"] == rows["base2"]["exact_steps"] == 5
    assert rows["dissemination"]["exact_steps"] is None
    assert rows["dissemination"]["steps_to_tol"] > 5
    assert rows["base2"]["error_after_period"] < 1e-12
    assert (data["auto"], data["best_exact"]) == ("base2", "base2")

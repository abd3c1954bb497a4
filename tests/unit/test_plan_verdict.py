"""The planner's "gossip cannot help" line: said where allreduce's exchange is a few percent
of its step (ResNet-50 on fast links), not where the links are slow."""

from __future__ import annotations

import json

import pytest

from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.plan.report import plan_report
from gossipgrad.tools.plan.verdict import cannot_help, link_gbit


def network(tmp_path, gbit: float):
    path = tmp_path / f"net-{gbit:g}.json"
    beta = 8 / (gbit * 1e9)
    path.write_text(json.dumps({"p2p": {"alpha_s": 5e-6, "beta_s_per_byte": beta, "r2": 1.0}}))
    return path


@pytest.fixture
def resnet50(tmp_path):
    path = tmp_path / "resnet50.json"
    StandinProfile.load("resnet50-p100-fp32-b64").planner.save(path)
    return path


def test_fast_links_get_the_line_and_slow_ones_do_not(tmp_path, resnet50):
    fast = plan_report(resnet50, network(tmp_path, 400), sizes=[128, 1024])
    assert "At 128 ranks allreduce's exchange is" in fast
    assert "at 400 Gbit/s" in fast and "(gossip cannot help)" in fast
    slow = plan_report(resnet50, network(tmp_path, 1), sizes=[128, 1024])
    assert "cannot help" not in slow


def test_the_bound_is_allreduces_step_over_compute():
    from gossipgrad.tools.plan.planner import PlanRow

    row = PlanRow("allreduce", 8, 25.0, 0, 0.11, 0.0, 0.0, None, 1, 0.0, 0.0, 0)
    assert cannot_help([row], 0.1, 100) == [
        "At 8 ranks allreduce's exchange is 9% of its step at 100 Gbit/s: no exchange can "
        "make a step more than 1.10x faster; DDP with the bf16 hook is as fast (gossip "
        "cannot help)."
    ]
    assert cannot_help([row], 0.09, 100) == []  # 18 %: an exchange can still gain
    assert link_gbit(8e-9 / 25) == pytest.approx(25.0)


def test_only_lockstep_allreduce_counts():
    """A staleness-1 allreduce hides its exchange, but it is not DDP's lockstep step."""
    from gossipgrad.tools.plan.planner import PlanRow

    lock = PlanRow("allreduce", 8, 25.0, 0, 0.2, 0.0, 0.0, None, 1, 0.0, 0.0, 0)
    stale = PlanRow("allreduce", 8, 25.0, 1, 0.1, 0.0, 0.0, None, 1, 0.0, 0.0, 0)
    assert cannot_help([lock, stale], 0.1, 10) == []

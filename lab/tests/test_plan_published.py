"""The published configurations (lab/plan/data/published.json) and their check: the file
holds what the issue asks for, every input is a field of it, and the prediction follows
its inputs (no assertion about agreeing with a paper: that is the check's result)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.plan.published import check, link_efficiency, load

DATA = Path(__file__).resolve().parents[1] / "plan" / "data" / "published.json"
FIELDS = {
    "id", "paper", "source", "stated", "verified", "model", "classes", "image_size",
    "batch_per_gpu", "gpu", "images_per_s_single", "gpus", "gpus_per_node", "link_gbit",
    "link", "intra", "strategy", "staleness", "mix", "sufficient_factors", "hierarchical",
    "quantity", "measured", "bound",
}  # fmt: skip
HOST = {
    "source": "netfit on test, emulated link rate 1gbit",
    "measurements": {
        "pingpong": {"nbytes": [1 << 20, 64 << 20], "seconds": [0.009, 0.56]},
        "exchange": {"nbytes": [1 << 20, 64 << 20], "seconds": [0.01, 0.57]},
    },
}


def test_the_file_holds_fifteen_configurations_from_four_papers_or_more():
    data = load(DATA)
    configs = data["configs"]
    assert len(configs) >= 15
    assert len({c["paper"].split(" (")[0] for c in configs}) >= 4
    assert len({c["id"] for c in configs}) == len(configs)
    for c in configs:
        assert FIELDS <= set(c), c["id"]
        assert c["gpu"] in data["gpus"]
        assert c["quantity"] in ("efficiency", "time_ratio")
        assert ("baseline_gpus" in c) == (c["quantity"] == "efficiency")
        assert ("versus" in c) == (c["quantity"] == "time_ratio")


def test_link_efficiency_is_this_hosts_largest_message_against_its_rate():
    assert link_efficiency(HOST) == pytest.approx((64 << 20) * 8 / 1e9 / 0.56)


@pytest.mark.timeout(120)
def test_a_prediction_follows_its_inputs():
    data = load(DATA)
    cfg = next(c for c in data["configs"] if c["id"] == "geeps-googlenet-16")
    fast = check({**data, "configs": [cfg]}, HOST)
    slow = check({**data, "configs": [{**cfg, "link_gbit": 1}]}, HOST)
    row, slow_row = fast["rows"][0], slow["rows"][0]
    assert 0 < slow_row["predicted"] < row["predicted"] <= 1.0
    assert row["error_pct"] == pytest.approx(
        100 * (row["predicted"] - cfg["measured"]) / cfg["measured"], abs=0.1
    )
    assert fast["n"] == 1 and fast["inputs"]["link_efficiency"] == pytest.approx(
        link_efficiency(HOST), rel=1e-3
    )

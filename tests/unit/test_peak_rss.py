"""The peak resident memory ``bench strategies`` reports per contender group (Linux)."""

from __future__ import annotations

import sys

import pytest
import torch

from gossipgrad.tools.bench.common import peak_rss_mb, reset_peak_rss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_the_peak_starts_again_from_what_is_held_after_a_reset():
    assert reset_peak_rss()
    before = peak_rss_mb()
    big = torch.ones(64 * 2**20)  # 256 MiB, touched
    held = peak_rss_mb()
    del big  # a block this size goes back to the system at once
    assert held is not None and before is not None and held - before > 200
    assert peak_rss_mb() == pytest.approx(held, abs=8)  # a peak stays after the free
    assert reset_peak_rss()
    after = peak_rss_mb()
    assert after is not None and after < held - 200

"""GOSSIPGRAD_INJECT_SLOW: the named rank's compute is stretched, the others' untouched."""

from __future__ import annotations

import time

import pytest

from gossipgrad.inject.straggler import Straggler
from gossipgrad.settings import Settings


def _timed_steps(straggler: Straggler, work_s: float, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        with straggler.compute():
            time.sleep(work_s)
    return time.perf_counter() - t0


def test_the_named_rank_computes_factor_times_as_long_and_others_do_not() -> None:
    env = Settings.from_env({"GOSSIPGRAD_INJECT_SLOW": "1:3"})
    slow, fast = Straggler(1, env), Straggler(0, env)
    assert (slow.factor, fast.factor) == (3.0, 1.0)
    t_fast = _timed_steps(fast, 0.02, 6)
    t_slow = _timed_steps(slow, 0.02, 6)
    # The first step has no previous compute time to stretch; each later one sleeps
    # (3 - 1) x the previous compute (>= 20 ms): at least 5 x 40 ms in all.
    assert fast.slept_s == 0.0 and slow.slept_s >= 5 * 2 * 0.02
    assert t_slow >= t_fast + 5 * 2 * 0.02 * 0.9


def test_bad_values_are_named() -> None:
    for bad in ("3", "x:2", "1:0.5", "-1:2"):
        with pytest.raises(ValueError, match="GOSSIPGRAD_INJECT_SLOW="):
            Settings.from_env({"GOSSIPGRAD_INJECT_SLOW": bad})

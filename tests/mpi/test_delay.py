"""Latency injection (GOSSIPGRAD_INJECT_DELAY_MS): parsing, the poster thread, and real MPI."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from gossipgrad.comm.base import CommTimeout, WaitContext
from gossipgrad.inject.delay import DelayedPoster
from gossipgrad.settings import Settings

from launch import mpiexec, run

ENV = "GOSSIPGRAD_INJECT_DELAY_MS"


def test_parse_delay_from_the_environment():
    assert Settings.from_env({}).inject_delay_ms == 0.0
    assert Settings.from_env({ENV: ""}).inject_delay_ms == 0.0
    assert Settings.from_env({ENV: "0"}).inject_delay_ms == 0.0
    assert Settings.from_env({ENV: "2.5"}).inject_delay_ms == pytest.approx(2.5)
    for bad in ("fast", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match=ENV):
            Settings.from_env({ENV: bad})


class _Done:
    def __init__(self, log: list, item: int) -> None:
        log.append((item, time.monotonic()))

    def test(self) -> bool:
        return True


@pytest.mark.timeout(30)
def test_poster_posts_each_message_late_and_in_order():
    poster = DelayedPoster(0.1)
    log: list = []
    t0 = time.monotonic()
    reqs = [poster.post(lambda i=i: _Done(log, i), WaitContext("x", 1, 5)) for i in range(5)]
    assert not any(r.test() for r in reqs), "posted before the delay"
    for r in reqs:
        r.wait(5)
    assert [i for i, _ in log] == list(range(5))
    assert all(t - t0 >= 0.1 for _, t in log), [t - t0 for _, t in log]
    assert log[-1][1] - t0 < 2.0


@pytest.mark.timeout(30)
def test_poster_errors_reach_the_caller_and_waits_have_deadlines():
    poster = DelayedPoster(0.01)

    def boom():
        raise RuntimeError("Isend failed")

    req = poster.post(boom, WaitContext("received nothing", 3, 1002, 7))
    with pytest.raises(RuntimeError, match="Isend failed"):
        req.wait(5)
    stuck = DelayedPoster(0.01)
    gate = threading.Event()
    slow = stuck.post(
        lambda: gate.wait(10) and _Done([], 0), WaitContext("received nothing", 3, 1002, 7)
    )
    with pytest.raises(CommTimeout, match=r"step 7: peer 3 received nothing .*GRAD_BUCKET_2"):
        slow.wait(0.2)
    gate.set()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_round_trip_pays_the_delay_twice_under_mpiexec():
    script = "tests/support/scripts/delay_check.py"
    plain = run([mpiexec(), "-n", "2", sys.executable, script], timeout=100)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    base = json.loads(plain.stdout.strip().splitlines()[-1])
    assert base == {**base, "delay_s": 0.0, "delay_thread": False}
    assert base["refused_without_delayer"] is None
    out = run([mpiexec(), "-n", "2", sys.executable, script], timeout=100, **{ENV: "100"})
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["delay_s"] == 0.1 and rec["delay_thread"]
    assert "GOSSIPGRAD_INJECT_DELAY_MS asks for 100 ms" in rec["refused_without_delayer"]
    assert 0.2 <= rec["round_trip_s"] < 0.2 + max(1.0, 10 * base["round_trip_s"]), rec

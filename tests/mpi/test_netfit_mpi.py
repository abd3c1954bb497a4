"""A real ``mpiexec -n 2 gossipgrad netfit`` (tier 3: launched from the plain test command).

The CPUs of a test machine are often shared with other jobs; a rank descheduled for a
scheduler tick turns a 10 us message into 4-8 ms. ``--stat min`` keeps the fastest of the
reps, so one clean rep per size is enough and the test does not flake on a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gossipgrad.tools.plan.formats import NetworkFit

REPO = Path(__file__).resolve().parents[2]
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no mpiexec at {MPIEXEC}"),
]


def test_netfit_on_two_ranks_writes_a_valid_network_fit(tmp_path):
    out = tmp_path / "network.json"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "gossipgrad", "netfit",
           "--max-mb", "1", "--reps", "5", "--stat", "min", "--comm-timeout", "60",
           "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    net = NetworkFit.load(out)  # validates every field
    assert net.p2p.alpha_s >= 0
    assert net.p2p.beta_s_per_byte > 0
    assert net.allreduce is not None and net.allreduce.size == 2
    assert "2 ranks on 1 host(s)" in net.source and "MPICH" in net.source
    doc = json.loads(out.read_text())
    pingpong = doc["measurements"]["pingpong"]
    assert pingpong["nbytes"] == [4096 * 2**i for i in range(9)]  # 4 KiB .. 1 MiB
    assert doc["measurements"]["allreduce"]["nbytes"][-1] == 1 << 20  # grown to --max-mb
    # four allreduces posted at once by default, fitted per allreduce
    assert net.allreduce_in_flight is not None and net.allreduce_in_flight.in_flight == 4
    assert net.allreduce_in_flight.beta_s_per_byte > 0
    assert doc["measurements"]["allreduce_in_flight"]["nbytes"][-1] >= 1 << 18  # 1 MiB / 4
    assert "4 allreduces in flight" in proc.stderr
    assert doc["measurements"]["stat"] == "min" and doc["measurements"]["peer"] == 1
    assert "p2p (ranks 0<->1): alpha" in proc.stderr  # rank 0's summary


def test_netfit_on_one_rank_is_a_usage_error():
    cmd = [MPIEXEC, "-n", "1", sys.executable, "-m", "gossipgrad", "netfit"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "netfit needs >= 2 ranks, got 1" in proc.stderr
    assert "Traceback" not in proc.stderr

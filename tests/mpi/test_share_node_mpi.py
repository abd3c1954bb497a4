"""Ranks of one host under a real mpiexec share its cores: their node count, local ranks,
torch threads and wait policy (the pure rules: tests/unit/test_share_node.py)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from gossipgrad import runtime

from launch import mpiexec, run

PROBE = """
import os, torch
from gossipgrad import runtime
from gossipgrad.comm.mpi import node_local_rank, node_size
comm = runtime.init(configure=True)
print(f"rank={comm.rank} node={node_size()} local={node_local_rank()} "
      f"threads={torch.get_num_threads()} spin={comm.policy.spin_s}", flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ranks_on_one_host_share_its_cores_under_mpiexec() -> None:
    """Host-name grouping (not MPI's shared-memory split, which MPIR_CVAR_NOLOCAL breaks):
    4 ranks count 4 on the node even with NOLOCAL, and back off instead of spinning when
    they outnumber the cores."""
    n = 4
    out = run(
        [mpiexec(), "-n", str(n), sys.executable, "-c", PROBE],
        timeout=100,
        MPIR_CVAR_NOLOCAL="1",
        GOSSIPGRAD_THREADS="",
        OMP_NUM_THREADS="",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # ranks print at once: lines may run together, so match records, not lines
    lines = sorted(re.findall(r"rank=\d+ node=\d+ local=\d+ threads=\d+ spin=[\d.]+", out.stdout))
    assert len(lines) == n, out.stdout
    cores = len(os.sched_getaffinity(0))
    spin = "0.0" if n > cores else str(runtime.WAIT_SPIN_S)
    locals_ = sorted(int(ln.split("local=")[1].split()[0]) for ln in lines)
    assert locals_ == list(range(n)), lines
    for ln in lines:
        assert f"node={n} " in ln, ln
        assert f"threads={max(1, cores // n)} " in ln, ln
        assert ln.endswith(f"spin={spin}"), ln

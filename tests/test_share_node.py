"""How a rank fits its share of the node: torch threads and the wait policy (spin or yield)."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

from gossipgrad import runtime
from gossipgrad.comm import base
from gossipgrad.comm.local import LocalWorld

from launch import mpiexec, run


@pytest.fixture(autouse=True)
def restore():
    threads = torch.get_num_threads()
    yield
    base.set_wait_spin(base.WAIT_SPIN_S)
    torch.set_num_threads(threads)


def test_one_rank_spins_in_waits(monkeypatch) -> None:
    monkeypatch.delenv("GOSSIPGRAD_WAIT_SPIN_S", raising=False)
    base.set_wait_spin(0.0)
    comm = LocalWorld(1).communicators()[0]
    assert runtime.share_node(comm)[1] == base.WAIT_SPIN_S
    assert base.spin_budget() == base.WAIT_SPIN_S  # pytest runs tests on the main thread


def test_environment_overrides_and_bad_values_are_named(monkeypatch) -> None:
    comm = LocalWorld(1).communicators()[0]
    monkeypatch.setenv("GOSSIPGRAD_WAIT_SPIN_S", "0.25")
    assert runtime.share_node(comm)[1] == 0.25
    assert base.spin_budget() == 0.25
    monkeypatch.setenv("GOSSIPGRAD_WAIT_SPIN_S", "fast")
    with pytest.raises(ValueError, match="GOSSIPGRAD_WAIT_SPIN_S='fast'"):
        runtime.share_node(comm)
    with pytest.raises(ValueError, match=">= 0"):
        base.set_wait_spin(-1)


def test_background_threads_never_spin() -> None:
    import threading

    seen = []
    t = threading.Thread(target=lambda: seen.append(base.spin_budget()))
    t.start()
    t.join()
    assert seen == [0.0]


PROBE = """
import os, torch
from gossipgrad import runtime
from gossipgrad.comm import base
from gossipgrad.comm.mpi import node_local_rank, node_size
comm = runtime.init()
print(f"rank={comm.rank} node={node_size()} local={node_local_rank()} "
      f"threads={torch.get_num_threads()} spin={base.spin_budget()}", flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ranks_on_one_host_share_its_cores_under_mpiexec() -> None:
    """Host-name grouping (not MPI's shared-memory split, which MPIR_CVAR_NOLOCAL breaks):
    4 ranks count 4 on the node even with NOLOCAL, and back off instead of spinning when
    they outnumber the cores."""
    n = 4
    out = run([mpiexec(), "-n", str(n), sys.executable, "-c", PROBE], timeout=100,
              MPIR_CVAR_NOLOCAL="1", GOSSIPGRAD_THREADS="", OMP_NUM_THREADS="")
    assert out.returncode == 0, out.stdout + out.stderr
    # ranks print at once: lines may run together, so match records, not lines
    lines = sorted(re.findall(r"rank=\d+ node=\d+ local=\d+ threads=\d+ spin=[\d.]+",
                              out.stdout))
    assert len(lines) == n, out.stdout
    cores = len(os.sched_getaffinity(0))
    spin = "0.0" if n > cores else str(base.WAIT_SPIN_S)
    locals_ = sorted(int(ln.split("local=")[1].split()[0]) for ln in lines)
    assert locals_ == list(range(n)), lines
    for ln in lines:
        assert f"node={n} " in ln, ln
        assert f"threads={max(1, cores // n)} " in ln, ln
        assert ln.endswith(f"spin={spin}"), ln

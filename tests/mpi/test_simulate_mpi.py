"""One code path, proved: the simulator's stack engine and real ``mpiexec`` ranks give the
same per-step losses and final parameters at 2, 4, 6 and 8 ranks, for gossip (parameter and
gradient mix), allreduce, local SGD and bounded lag with a fixed delay pattern (the jobs:
tests/support/simulate_jobs.py). One launch of 8 ranks runs every size on a sub-communicator
(tests/support/scripts/simulate_agreement.py); the stack runs here."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from launch import mpiexec, run
from simulate_jobs import JOBS, SIZES, STEPS, arrays, task
from simulate_jobs import run as run_job

pytestmark = pytest.mark.mpi


@pytest.fixture(autouse=True)
def one_thread():
    """Small steps run fastest on one torch thread (on a busy host, several times over)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_simulator_and_real_ranks_agree_at_2_4_6_8(tmp_path):
    out = run(
        [
            mpiexec(),
            "-n",
            str(max(SIZES)),
            sys.executable,
            "tests/support/scripts/simulate_agreement.py",
            str(tmp_path),
        ],
        timeout=420,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    data = task()
    finals = {}
    for size in SIZES:
        for name in JOBS:
            real = np.load(tmp_path / f"{size}-{name}.npz")
            sim = arrays(run_job(name, size, "stack", data=data))
            where = f"{name} at {size} ranks"
            assert real["losses"].shape == sim["losses"].shape == (STEPS, size), where
            np.testing.assert_allclose(sim["losses"], real["losses"], atol=2e-6, err_msg=where)
            np.testing.assert_allclose(sim["ranks"], real["ranks"], atol=2e-6, err_msg=where)
            np.testing.assert_allclose(
                sim["consensus"], real["consensus"], atol=2e-6, err_msg=where
            )
            finals[size, name] = real["ranks"]
    for size in SIZES:  # the jobs differ: each comparison saw its own exchange
        assert not np.allclose(finals[size, "gossip-param"], finals[size, "local"], atol=1e-4)
        assert not np.allclose(finals[size, "lag-param"], finals[size, "gossip-param"], atol=1e-4)
        spread = finals[size, "allreduce"] - finals[size, "allreduce"][0]
        assert np.abs(spread).max() == 0.0  # allreduce keeps every rank identical

"""Collective timeouts name the rank that did not arrive, under a real mpiexec: rank 2 of 4
is stopped (SIGSTOP) while the others wait in the stop agreement and in an evaluation
allreduce (tests/support/scripts/arrival_check.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from launch import REPO, env, mpiexec

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(120)
def test_stopped_rank_is_named_by_the_collectives(tmp_path):
    cmd = [
        mpiexec(),
        "-n",
        "4",
        sys.executable,
        "tests/support/scripts/arrival_check.py",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
        start_new_session=True,
    )
    wanted = [tmp_path / f"r{r}-{n}.txt" for r in (0, 1, 3) for n in (0, 1)]
    try:
        deadline = time.monotonic() + 90
        while not all(p.exists() for p in wanted):
            if time.monotonic() > deadline or proc.poll() is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                pytest.fail(f"not every message was written:\n{out}\n{err[-3000:]}")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    for path in wanted:
        message = path.read_text()
        rank, n = int(path.name[1]), int(path.name[3])
        what, step = ("stop agreement", 5) if n == 0 else ("evaluation", 9)
        assert message.startswith(f"rank {rank}, step {step}: {what} did not complete for "), (
            message
        )
        assert "rank 2 did not arrive (heard from ranks 0, 1, 3 within" in message, message
        assert "is rank 2 alive?" in message, message

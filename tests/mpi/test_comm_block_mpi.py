"""``GOSSIPGRAD_COMM_WAIT=block`` under a real mpiexec: the communication thread sits in
``MPI_Wait``; training gives the same result as polling, and a silent peer still ends the
wait at its deadline with a message naming it. And after an MPI error that is no peer
failure, no thread enters MPI again."""

from __future__ import annotations

import json
import re
import sys

import pytest

from launch import gossipgrad, mpiexec, run

TRAIN = ["train", "--no-progress", "--epochs", "2", "--hidden", "64"]


def _summary(out) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_blocking_and_polling_train_to_the_same_model():
    poll = _summary(gossipgrad(4, TRAIN, timeout=190, GOSSIPGRAD_COMM_WAIT="poll"))
    block = _summary(gossipgrad(4, TRAIN, timeout=190, GOSSIPGRAD_COMM_WAIT="block"))
    assert poll["strategy"] == "gossip" and poll["steps"] > 0
    for key in ("test_loss", "top1", "steps", "consensus_distance"):
        assert block[key] == poll[key], key


SILENT_PEER = """
import time
import torch
from gossipgrad.comm.base import CommTimeout, Tag
from gossipgrad.engine.bucket.mixer import make_mixer
from gossipgrad.comm.mpi import MpiCommunicator
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.commthread import CommThread
from gossipgrad.runtime import init

comm = init(timeout=2)
assert comm.policy.block and isinstance(comm, MpiCommunicator) and comm.thread_multiple
thread = CommThread(make_mixer("peer", comm, Schedule(2)), comm.timeout, block=True)
buf = torch.full((1000,), float(comm.rank))
if comm.rank == 0:
    thread.submit(3, lambda: thread.exchange.start(buf, 3, 9, Tag.PARAM_BUCKET + 3), eager=True)
    t0 = time.monotonic()
    try:
        thread.wait(3)
        print("no timeout", flush=True)
    except CommTimeout as exc:
        print(f"after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
    comm.barrier()  # now rank 1 takes part: the blocked MPI_Wait returns
    thread.wait(3)
    print("mixed", float(buf[0]), flush=True)
else:
    time.sleep(5)  # silent past rank 0's deadline
    comm.barrier()
    thread.submit(3, lambda: thread.exchange.start(buf, 3, 9, Tag.PARAM_BUCKET + 3), eager=True)
    thread.wait(3)
thread.close()
"""


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_a_thread_in_mpi_wait_leaves_the_deadline_and_the_names_to_the_caller(tmp_path):
    """Rank 1 stays silent for 5 s; rank 0's thread sits in MPI_Wait, and rank 0's wait
    ends at its deadline (2 s + 1) naming rank, step, peer and tag; later the exchange
    completes and mixes."""
    script = tmp_path / "silent.py"
    script.write_text(SILENT_PEER)
    out = run(
        [mpiexec(), "-n", "2", sys.executable, str(script)],
        timeout=120,
        GOSSIPGRAD_COMM_WAIT="block",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(
        r"after (\d+\.\d) s: rank 0, step 9: peer 1 sent nothing for 2 s "
        r"\(tag PARAM_BUCKET_3\)",
        out.stdout,
    )
    assert m, out.stdout + out.stderr
    assert 2.5 <= float(m.group(1)) <= 4.5, out.stdout
    assert "mixed 0.5" in out.stdout, out.stdout


TORN = """
import numpy as np
from gossipgrad.comm.base import CommError
from gossipgrad.runtime import init

comm = init(timeout=5)
if comm.rank == 1:
    comm.isend(np.ones(8), 0, 7).wait(5)
else:
    try:
        comm.irecv(np.zeros(2), 1, 7).wait(5)  # 8 doubles into 2: MPI_ERR_TRUNCATE
        print("first: no error", flush=True)
    except CommError:
        print("first: CommError", flush=True)
    except Exception as exc:
        print("first:", str(exc).splitlines()[0], flush=True)
    try:
        comm.isend(np.ones(1), 1, 8)
        print("second: entered MPI", flush=True)
    except CommError as exc:
        print("second:", exc, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(100)
def test_after_an_mpi_error_no_call_enters_mpi_again(tmp_path):
    """A truncated receive is an MPI error but no peer failure: it passes to the caller as
    MPI said it, and every later call through the communicator raises CommError naming
    it, without calling MPI (a torn MPICH state crashed a second thread once)."""
    script = tmp_path / "torn.py"
    script.write_text(TORN)
    out = run([mpiexec(), "-n", "2", sys.executable, str(script)], timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "first: Message truncated" in out.stdout, out.stdout + out.stderr
    assert "second: rank 0: MPI failed in this process (Message truncated)" in out.stdout

"""Round trips under ``GOSSIPGRAD_INJECT_DELAY_MS``: ``mpiexec -n 2 python delay_check.py``.

Rank 0 sends to rank 1, which answers; rank 0 prints one JSON line with the median round
trip, the communicator's delay and whether a delay thread exists.
"""

import json
import statistics
import sys
import time

import numpy as np

from gossipgrad.comm.base import Tag
from gossipgrad.comm.mpi import MpiCommunicator
from gossipgrad.inject.delay import DelayedPoster

try:  # a delay asked for, and no delayer: refused in one line, never silently not delayed
    MpiCommunicator(timeout=30)  # wraps COMM_WORLD: nothing to free
    refused = None
except ValueError as exc:
    refused = str(exc)
comm = MpiCommunicator(timeout=30, delayer=DelayedPoster)
if comm.size != 2:
    sys.exit(f"delay_check needs 2 ranks, got {comm.size}")
buf = np.zeros(1024)
rounds = []
for i in range(5):
    comm.barrier()
    t0 = time.perf_counter()
    if comm.rank == 0:
        buf[:] = i
        comm.isend(buf, 1, Tag.PINGPONG).wait(30)
        comm.irecv(buf, 1, Tag.PINGPONG).wait(30)
        assert buf[0] == i + 1, buf[0]
    else:
        comm.irecv(buf, 0, Tag.PINGPONG).wait(30)
        buf += 1
        comm.isend(buf, 0, Tag.PINGPONG).wait(30)
    rounds.append(time.perf_counter() - t0)
if comm.rank == 0:
    print(
        json.dumps(
            {
                "delay_s": comm.delay_s,
                "delay_thread": comm._poster is not None,
                "round_trip_s": statistics.median(rounds),
                "refused_without_delayer": refused,
            }
        ),
        flush=True,
    )

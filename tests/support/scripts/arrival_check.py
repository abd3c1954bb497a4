"""Collective timeouts name a stopped rank: ``mpiexec -n 4 python arrival_check.py OUTDIR``.

Rank 2 stops itself (SIGSTOP) after start-up; ranks 0, 1, 3 then enter the stop agreement
and an evaluation allreduce, each with a 2 s deadline, and write each CommTimeout's message
to OUTDIR/r<rank>-<n>.txt. They leave with os._exit (rank 2 never finishes); the test kills
the job.
"""

import os
import signal
import sys

import numpy as np

from gossipgrad.comm.base import CommTimeout, ReduceOp, WaitPolicy
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.mpi import MpiCommunicator
from gossipgrad.engine.run.signals import StopSignals

out = sys.argv[1]
comm = MpiCommunicator(timeout=2.0, policy=WaitPolicy(spin_s=0.0))
stop = StopSignals(comm, signals=())  # duplicates the communicator: collective
comm.barrier()
if comm.rank == 2:
    os.kill(os.getpid(), signal.SIGSTOP)
checks = [
    lambda: stop.agreed(step=5),
    lambda: allreduce_(comm, np.zeros(4), ReduceOp.SUM, what="evaluation", step=9),
]
for n, check in enumerate(checks):
    try:
        check()
        message = "no timeout"
    except CommTimeout as exc:
        message = str(exc)
    with open(os.path.join(out, f"r{comm.rank}-{n}.txt.tmp"), "w") as f:
        f.write(message)
    os.rename(
        os.path.join(out, f"r{comm.rank}-{n}.txt.tmp"), os.path.join(out, f"r{comm.rank}-{n}.txt")
    )
sys.stdout.flush()
os._exit(0)

"""Run every check in ps_checks.py on the real MPI world: ``mpiexec -n 4 python
run_ps_checks.py``. Rank 0 prints ``PASS name on N ranks`` lines; exits non-zero (aborting
all ranks) on the first failure."""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gossipgrad.comm.base import allreduce_  # noqa: E402
from gossipgrad.comm.mpi import MpiCommunicator  # noqa: E402

from multirank import ps_checks  # noqa: E402

torch.set_num_threads(1)
comm = MpiCommunicator(timeout=60)
for check in ps_checks.ALL:
    try:
        check(comm)
    except BaseException:
        traceback.print_exc()
        print(f"RANK {comm.rank}: FAIL {check.__name__}", flush=True)
        comm.abort(3)
    passed = allreduce_(comm, np.ones(1))[0]  # every rank got here without failing
    if comm.rank == 0:
        print(f"PASS {check.__name__} on {int(passed)} ranks", flush=True)

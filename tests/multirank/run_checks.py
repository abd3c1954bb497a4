"""Run every check in checks.py on the real MPI world: ``mpiexec -n 4 python run_checks.py``.

Rank 0 prints ``PASS name on N ranks`` or, for a check that does not apply to this world,
``SKIP name on N ranks: reason``; exits non-zero (aborting all ranks) on the first failure,
including ranks that disagree about whether a check applies.
"""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gossipgrad.comm.base import allreduce_  # noqa: E402
from gossipgrad.comm.mpi import MpiCommunicator  # noqa: E402

from multirank import checks  # noqa: E402

torch.set_num_threads(1)
comm = MpiCommunicator(timeout=60)
for check in checks.ALL:
    skipped = ""
    try:
        check(comm)
    except checks.NotApplicable as exc:
        skipped = str(exc) or "not applicable"
    except BaseException:
        traceback.print_exc()
        print(f"RANK {comm.rank}: FAIL {check.__name__}", flush=True)
        comm.abort(3)
    # every rank got here without failing: [ranks done, ranks that skipped]
    done, skips = allreduce_(comm, np.array([1.0, float(bool(skipped))]))
    if skips not in (0, done):
        print(f"RANK {comm.rank}: FAIL {check.__name__}: {int(skips)} of {int(done)} ranks "
              "skipped it", flush=True)
        comm.abort(3)
    if comm.rank == 0:
        verdict = f"SKIP {check.__name__} on {int(done)} ranks: {skipped}" if skips else \
            f"PASS {check.__name__} on {int(done)} ranks"
        print(verdict, flush=True)

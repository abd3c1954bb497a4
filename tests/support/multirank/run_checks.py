"""Run every check of one check module on the real MPI world:
``mpiexec -n 4 python tests/support/multirank/run_checks.py [MODULE] [--yield-waits]``.

MODULE is a module of this folder with an ``ALL`` list (default ``checks``; also
``ps_checks``, ``lag_checks``, ``factor_checks``, ``monitor_checks``). ``--yield-waits`` makes
waits yield the core instead of spinning (for ranks that outnumber the cores).

Rank 0 prints ``PASS name on N ranks`` or, for a check that does not apply to this world,
``SKIP name on N ranks: reason``; exits non-zero (aborting all ranks) on the first failure,
including ranks that disagree about whether a check applies.
"""

import argparse
import importlib
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gossipgrad.comm.base import WaitPolicy
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.mpi import MpiCommunicator  # noqa: E402

from multirank.checks import NotApplicable  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", nargs="?", default="checks")
    parser.add_argument("--yield-waits", action="store_true")
    args = parser.parse_args()
    module = importlib.import_module(f"multirank.{args.module}")
    torch.set_num_threads(1)
    policy = WaitPolicy(spin_s=0.0) if args.yield_waits else None
    comm = MpiCommunicator(timeout=60, policy=policy)
    for check in module.ALL:
        skipped = ""
        try:
            check(comm)
        except NotApplicable as exc:
            skipped = str(exc) or "not applicable"
        except BaseException:
            traceback.print_exc()
            print(f"RANK {comm.rank}: FAIL {check.__name__}", flush=True)
            comm.abort(3)
        # every rank got here without failing: [ranks done, ranks that skipped]
        done, skips = allreduce_(comm, np.array([1.0, float(bool(skipped))]))
        if skips not in (0, done):
            print(
                f"RANK {comm.rank}: FAIL {check.__name__}: {int(skips)} of {int(done)} "
                "ranks skipped it",
                flush=True,
            )
            comm.abort(3)
        if comm.rank == 0:
            verdict = (
                f"SKIP {check.__name__} on {int(done)} ranks: {skipped}"
                if skips
                else f"PASS {check.__name__} on {int(done)} ranks"
            )
            print(verdict, flush=True)


if __name__ == "__main__":
    main()

"""The agreement test's real side: ``mpiexec -n 8 python simulate_agreement.py OUTDIR``.

Every size of ``simulate_jobs.SIZES`` gets a group of ranks of its own (2 and 6 on disjoint
ranks, so they run at the same time; then 4, then 8), and runs every job of
``simulate_jobs.JOBS`` as real ranks (one ``DistributedOptimizer`` each:
``engine="ranks"`` on that group's communicator); the group's rank 0 saves
``OUTDIR/SIZE-NAME.npz`` (every rank's losses and final parameters, the final merge).
A rank waiting for its next group polls (and yields the core) rather than spinning in MPI.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gossipgrad.runtime import init  # noqa: E402

import simulate_jobs  # noqa: E402

#: (size, first rank) of each group, in the order every rank takes part in them.
GROUPS = ((2, 0), (6, 2), (4, 0), (8, 0))


def main() -> None:
    out = sys.argv[1]
    torch.set_num_threads(1)
    world = init(timeout=600)
    mine = []
    for size, first in GROUPS:  # every rank splits for every group, in the same order
        inside = first <= world.rank < first + size and first + size <= world.size
        comm = world.split(0 if inside else None)
        if comm is not None:
            mine.append((size, comm))
    data = simulate_jobs.task()
    for size, comm in mine:
        for name in simulate_jobs.JOBS:
            sim = simulate_jobs.run(name, size, "ranks", comm=comm, data=data)
            if comm.rank == 0:
                np.savez(os.path.join(out, f"{size}-{name}.npz"), **simulate_jobs.arrays(sim))
        comm.free()
    world.barrier()


if __name__ == "__main__":
    main()

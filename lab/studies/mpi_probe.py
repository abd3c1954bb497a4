#!/usr/bin/env python3
"""Transport probes: duplex rate and how polling drives progress (lab/records/benchmarks.md).

    python scripts/emucluster.py run -n 2 --rate 1gbit -- python -m lab mpi-probe duplex
    python scripts/emucluster.py run -n 2 --rate 1gbit -- python -m lab mpi-probe poll
    python scripts/emucluster.py run -n 8 --rate 1gbit -- python -m lab mpi-probe allreduce
    python scripts/emucluster.py run -n 8 --rate 250mbit -- python -m lab mpi-probe incast --mb 4

Plain mpi4py (no gossipgrad), rank 0 prints one JSON object of medians (MAX over ranks):

- ``duplex``: one direction (Send/Recv) vs both at once (Sendrecv) of ``--mb`` MiB between
  ranks 0 and 1, in MB/s per direction. UCX's default TCP rendezvous halves the duplex rate;
  compare with ``UCX_RNDV_SCHEME=get_zcopy``.
- ``poll``: an Isend/Irecv pair and an Iallreduce completed by ``MPI_Wait`` vs by polling
  ``MPI_Test`` with sleeps backing off to 1 ms, testing once or ``burst`` times per poll.
- ``allreduce``: ``MPI_Allreduce`` vs ``MPI_Iallreduce`` + Wait on ``--mb`` MiB (the
  allreduce strategy's own ceiling), with bus bandwidth ``2 (size - 1) / size * bytes / s``.
- ``incast``: every other rank sends ``--mb`` MiB to rank 0 at once (a parameter server's
  pushes to one owner), rank 0 sends it to every other rank at once (its pulls), and a ring
  shift (every rank to the next) for comparison; ``rank0_MB_per_s`` is what rank 0's link
  carried (``(size - 1) * bytes / s``): below one stream's rate, the senders collapse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI


def polled(reqs: list[MPI.Request], burst: int) -> None:
    pause = 0.0
    while True:
        for _ in range(burst):
            if MPI.Request.Testall(reqs):
                return
        time.sleep(pause)
        pause = min(max(pause * 2, 2e-5), 1e-3)


def methods(mode: str, comm: MPI.Comm, a: np.ndarray, b: np.ndarray) -> dict[str, Callable]:
    peer = comm.rank ^ 1

    def pair() -> list[MPI.Request]:
        return [comm.Irecv(b, peer, 4), comm.Isend(a, peer, 4)]

    def iallreduce() -> list[MPI.Request]:
        return [comm.Iallreduce(MPI.IN_PLACE, a, MPI.SUM)]

    if mode == "duplex":

        def oneway() -> None:
            if comm.rank == 0:
                comm.Send(a, 1, 3)
            elif comm.rank == 1:
                comm.Recv(b, 0, 3)

        return {
            "one_direction": oneway,
            "both_directions": lambda: comm.Sendrecv(a, peer, 3, b, peer, 3),
        }
    if mode == "incast":
        return incast_methods(comm, a, b)
    if mode == "allreduce":
        return {
            "Allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, a, MPI.SUM),
            "Iallreduce_wait": lambda: iallreduce()[0].Wait(),
        }
    out: dict[str, Callable] = {}
    for name, post in (("sendrecv", pair), ("iallreduce", iallreduce)):
        out[f"{name}_wait"] = lambda post=post: MPI.Request.Waitall(post())
        for burst in (1, 16):
            out[f"{name}_poll_burst{burst}"] = lambda post=post, k=burst: polled(post(), k)
    return out


def incast_methods(comm: MPI.Comm, a: np.ndarray, b: np.ndarray) -> dict[str, Callable]:
    others = range(1, comm.size)
    slots = [np.empty_like(b) for _ in others] if comm.rank == 0 else []

    def gather() -> None:
        if comm.rank == 0:
            reqs = [comm.Irecv(x, src, 5) for x, src in zip(slots, others, strict=True)]
            MPI.Request.Waitall(reqs)
        else:
            comm.Send(a, 0, 5)

    def scatter() -> None:
        if comm.rank == 0:
            MPI.Request.Waitall([comm.Isend(a, dst, 6) for dst in others])
        else:
            comm.Recv(b, 0, 6)

    def shift() -> None:
        nxt, prev = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        MPI.Request.Waitall([comm.Irecv(b, prev, 7), comm.Isend(a, nxt, 7)])

    return {"to_rank0": gather, "from_rank0": scatter, "ring_shift": shift}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lab mpi-probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("mode", choices=["duplex", "poll", "allreduce", "incast"])
    parser.add_argument("--mb", type=float, default=None, help="MiB (default 8, 4, 32, 4)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    mb = args.mb or {"duplex": 8, "poll": 4, "allreduce": 32, "incast": 4}[args.mode]
    n = int(mb * 2**20) // 4
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    run = methods(args.mode, comm, a, b)
    names = list(run)
    times: dict[str, list[float]] = {k: [] for k in names}
    for rep in range(args.reps + 1):
        k0 = rep % len(names)
        for name in names[k0:] + names[:k0]:
            comm.Barrier()
            t0 = time.perf_counter()
            run[name]()
            if rep:
                times[name].append(time.perf_counter() - t0)
    rec: dict = {"mode": args.mode, "size": comm.size, "bytes": n * 4, "reps": args.reps}
    for name in names:
        s = comm.allreduce(statistics.median(times[name]), MPI.MAX)
        rec[name] = {"ms": round(s * 1e3, 2), "MB_per_s": round(n * 4 / s / 1e6, 1)}
        if args.mode == "allreduce":
            rec[name]["bus_MB_per_s"] = round(2 * (comm.size - 1) / comm.size * n * 4 / s / 1e6, 1)
        if args.mode == "incast" and name != "ring_shift":
            rec[name]["rank0_MB_per_s"] = round((comm.size - 1) * n * 4 / s / 1e6, 1)
    if comm.rank == 0:
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()

"""Two-rank MPI ping-pong; rank 0 prints one JSON line with the measured bandwidth.

    mpiexec -n 2 python scripts/pingpong.py --size-mb 64 --iters 2

Each timed iteration sends `size` bytes 0 -> 1 and back, so mbit_per_s is
2 * size * iters * 8 / seconds / 1e6 (one direction at a time). Each rank also reports its
network namespace (inode of /proc/self/ns/net) and its global IPv4 addresses (`ip -o -4 addr`),
which shows whether the ranks really sit in different namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess

from mpi4py import MPI

TAG = 7


def addresses() -> list[str]:
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    return [f"{f[1]} {f[3]}" for f in (line.split() for line in out.splitlines()) if len(f) > 3]


def exchange(comm: MPI.Comm, buf: bytearray, iters: int) -> None:
    for _ in range(iters):
        if comm.rank == 0:
            comm.Send(buf, dest=1, tag=TAG)
            comm.Recv(buf, source=1, tag=TAG)
        else:
            comm.Recv(buf, source=0, tag=TAG)
            comm.Send(buf, dest=0, tag=TAG)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--iters", type=int, default=2)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit(f"pingpong needs exactly 2 ranks, got {comm.size}")
    exchange(comm, bytearray(1 << 20), 1)  # connect and warm up
    buf = bytearray(args.size_mb << 20)
    comm.Barrier()
    start = MPI.Wtime()
    exchange(comm, buf, args.iters)
    seconds = MPI.Wtime() - start
    me = {
        "rank": comm.rank,
        "host": socket.gethostname(),
        "netns": os.environ.get("GOSSIPGRAD_EMU_NETNS", ""),
        "netns_inode": os.stat("/proc/self/ns/net").st_ino,
        "addrs": addresses(),
    }
    ranks = comm.gather(me, root=0)
    if comm.rank == 0:
        mbit = 2 * len(buf) * args.iters * 8 / seconds / 1e6
        print(
            json.dumps(
                {
                    "bytes": len(buf),
                    "iters": args.iters,
                    "seconds": round(seconds, 3),
                    "mbit_per_s": round(mbit, 1),
                    "ranks": ranks,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()

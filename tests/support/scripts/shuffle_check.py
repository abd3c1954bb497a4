"""Real-MPI shuffle check:
``mpiexec -n 7 python tests/support/scripts/shuffle_check.py --rounds 1000``.

Every rank starts with ``--shard`` samples (ids rank*shard .. , payload filled with the id) and
runs one shuffle round per step. Every ``--check-every`` steps (while the shuffle thread is
talking on its own communicator) and at the end, each rank adds 1 at the index of every
sample id it holds in a counts vector; an allreduce must give all ones: nothing lost, nothing
duplicated. Payloads and labels must still match their ids. At the end every rank's worker
must have applied ``--rounds`` rounds, and (on 2+ ranks, with samples to swap) every rank must
hold samples that started on another rank: the shuffle moved data, not just kept it. Rank 0
prints one JSON line with the rounds done and foreign samples it measured (over all ranks)
and the rounds per second. Any failure aborts every rank with a non-zero exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.mpi import MpiCommunicator
from gossipgrad.shuffle import ShardStore, ShuffleWorker


def make_store(rank: int, shard: int, kind: str, dim: int) -> ShardStore:
    ids = np.arange(rank * shard, (rank + 1) * shard)
    if kind == "tensor":
        data = torch.tensor(ids, dtype=torch.float32).unsqueeze(1).repeat(1, dim)
        return ShardStore.of_tensors(ids, ids % 7, data)
    if kind == "bytes":
        return ShardStore.of_bytes(ids, ids % 7, [str(i).encode() * (i % 9) for i in ids])
    return ShardStore.of_indices(ids, ids % 7)


def check(comm: MpiCommunicator, store: ShardStore, total: int, where: str) -> None:
    s = store.read_all()
    counts = np.zeros(total, dtype=np.int64)
    np.add.at(counts, s.ids, 1)
    allreduce_(comm, counts)
    if not np.all(counts == 1):
        lost, dup = np.flatnonzero(counts == 0), np.flatnonzero(counts > 1)
        raise AssertionError(
            f"rank {comm.rank}, {where}: lost ids {lost[:10].tolist()}, "
            f"duplicated ids {dup[:10].tolist()}"
        )
    if not np.array_equal(s.labels, s.ids % 7):
        raise AssertionError(f"rank {comm.rank}, {where}: labels do not match ids")
    if store.kind == "tensor":
        want = torch.tensor(s.ids, dtype=torch.float32).unsqueeze(1).expand_as(s.payload)
        if not torch.equal(s.payload, want):
            raise AssertionError(f"rank {comm.rank}, {where}: payloads do not match ids")
    if store.kind == "bytes" and s.payload != [str(i).encode() * (i % 9) for i in s.ids]:
        raise AssertionError(f"rank {comm.rank}, {where}: payloads do not match ids")


def check_moved(
    comm: MpiCommunicator,
    store: ShardStore,
    shard: int,
    rounds_done: int,
    rounds: int,
    samples: int,
) -> dict:
    """Every rank applied ``rounds`` rounds; on 2+ ranks, every rank holds samples from
    other ranks' shards (ids outside its own). Returns the figures over all ranks."""
    if rounds_done != rounds:
        raise AssertionError(
            f"rank {comm.rank}: the worker applied {rounds_done} rounds, not {rounds}"
        )
    foreign = int(np.count_nonzero(store.read_all().ids // shard != comm.rank))
    if comm.size > 1 and samples > 0 and rounds > 0 and foreign == 0:
        raise AssertionError(
            f"rank {comm.rank}: after {rounds} rounds it holds only its own samples; nothing moved"
        )
    low = allreduce_(comm, np.array([rounds_done, -rounds_done, foreign]), ReduceOp.MIN)
    total = allreduce_(comm, np.array([foreign]), ReduceOp.SUM)
    return {
        "rounds_done_min": int(low[0]),
        "rounds_done_max": int(-low[1]),
        "foreign_min": int(low[2]),
        "foreign_total": int(total[0]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--shard", type=int, default=32)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--dim", type=int, default=64, help="floats per tensor sample")
    p.add_argument("--kind", choices=["tensor", "bytes", "index"], default="tensor")
    p.add_argument("--mode", choices=["auto", "thread", "inline"], default="auto")
    p.add_argument("--check-every", type=int, default=100)
    p.add_argument(
        "--compute-ms",
        type=float,
        default=0.0,
        help="sleep this long per step, standing in for forward/backward",
    )
    p.add_argument("--comm-timeout", type=float, default=60.0)
    args = p.parse_args()

    comm = MpiCommunicator(timeout=args.comm_timeout)
    try:
        store = make_store(comm.rank, args.shard, args.kind, args.dim)
        total = args.shard * comm.size
        comm.barrier()
        t0 = time.perf_counter()
        with ShuffleWorker(
            store, comm, samples=args.samples, every=1, seed=7, mode=args.mode
        ) as worker:
            mode = worker.mode.value
            for step in range(args.rounds):
                if args.compute_ms:
                    time.sleep(args.compute_ms / 1000)
                worker.on_step(step)
                if step % args.check_every == 0:
                    check(comm, store, total, f"step {step}")
        elapsed = np.array([time.perf_counter() - t0])
        check(comm, store, total, "end")
        moved = check_moved(comm, store, args.shard, worker.rounds_done, args.rounds, args.samples)
        allreduce_(comm, elapsed, ReduceOp.MAX)
        if comm.rank == 0:
            print(
                json.dumps(
                    {
                        "check": "shuffle",
                        "ok": True,
                        "size": comm.size,
                        "kind": args.kind,
                        "mode": mode,
                        "rounds": args.rounds,
                        **moved,
                        "samples": args.samples,
                        "dim": args.dim,
                        "seconds": round(float(elapsed[0]), 3),
                        "rounds_per_s": round(args.rounds / float(elapsed[0]), 1),
                        "compute_ms": args.compute_ms,
                        "overhead_ms_per_step": round(
                            1000 * float(elapsed[0]) / args.rounds - args.compute_ms, 3
                        ),
                    }
                ),
                flush=True,
            )
    except BaseException:  # noqa: BLE001 - one failing rank aborts all, never a hang
        traceback.print_exc()
        sys.stderr.flush()
        comm.abort(1)


if __name__ == "__main__":
    main()

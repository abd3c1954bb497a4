"""``gossipgrad bench exchange``: gossipgrad's bucketed exchange vs a raw MPI Sendrecv.

    mpiexec -n 2 gossipgrad bench exchange --sizes-mb 1,100 --reps 10

For each model size N, every repetition times three ways of swapping N bytes with this
step's peer, in rotating order, each started after a barrier:

- ``raw``: one blocking ``MPI_Sendrecv`` of the N bytes (mpi4py; the wire limit here);
- ``exchange``: the N bytes as ``--bucket-mb`` buckets, each handed to the communication
  thread and posted by :class:`~gossipgrad.comm.transport.PeerTransport` exactly as
  training does, without the average (transfer only);
- ``exchange_mix``: the same with the average ``(own + peer) / 2`` (what training pays).

Times are the MAX over ranks of each repetition, then the median over repetitions. The
schedule's permutation for the step is computed before the clock starts (a seeded RNG, about
60 us once per cycle, the same for every method).
``profile_s`` splits ``exchange_mix``: ``post`` (all ``start`` calls: schedule look-up,
buffers, ``Isend``/``Irecv``) and ``mix`` (all ``finish`` calls: the average); the rest of
its time is the transfer and noticing its end. ``--cprofile N`` adds, per size, the N
functions with the most own time in ``exchange_mix`` (rank 0's training thread, which does
the polling while it waits), per exchange. ``ratio = exchange / raw`` (1.0 is the limit),
``ratio_mix = exchange_mix / raw``; the ``_paired`` ratios are medians over repetitions of
the ratio within a repetition (the methods run back to back), which a machine whose load
drifts during the run disturbs less.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Tag
from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.transport import PeerTransport, Pending
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.rules import Average
from gossipgrad.engine.commthread import CommThread
from gossipgrad.tools.bench.common import link_info, max_over_ranks, median, rounded, timed

METHODS = ("raw", "exchange", "exchange_mix")


class TransferOnly(BucketMixer):
    """Training's posts and waits without the average: isolates the transfer."""

    def __init__(self, comm: Communicator, schedule: Schedule) -> None:
        super().__init__(PeerTransport(comm, schedule), Codec(), Average())

    def finish(self, pending: Pending) -> None:
        self.transport.wait(pending)


class Timed(BucketMixer):
    """Training's bucket exchange, adding the seconds spent posting (``start``) and
    finishing (``finish``: the average) to ``spent`` -- the profile of ``exchange_mix``."""

    def __init__(self, comm: Communicator, schedule: Schedule) -> None:
        super().__init__(PeerTransport(comm, schedule), Codec(), Average())
        self.spent = {"post": 0.0, "mix": 0.0}

    def start(self, buf: torch.Tensor, index: int, step: int, tag: int) -> Pending:
        t0 = time.perf_counter()
        try:
            return super().start(buf, index, step, tag)
        finally:
            self.spent["post"] += time.perf_counter() - t0

    def finish(self, pending: Pending) -> None:
        t0 = time.perf_counter()
        super().finish(pending)
        self.spent["mix"] += time.perf_counter() - t0


def split_buckets(flat: torch.Tensor, bucket_bytes: int) -> list[torch.Tensor]:
    """Contiguous views of ``flat`` of at most ``bucket_bytes`` each (the last may be short)."""
    per = max(1, bucket_bytes // flat.element_size())
    return [flat[i : i + per] for i in range(0, flat.numel(), per)]


def exchange_buckets(thread: CommThread, buckets: list[torch.Tensor], step: int) -> None:
    """Hand every bucket to the communication thread, as backward hooks do, and wait."""
    ex = thread.exchange
    for i, b in enumerate(buckets):
        thread.submit(
            i, lambda b=b, i=i: ex.start(b, i, step, Tag.GRAD_BUCKET + i), eager=not b.is_cuda
        )
    for i in range(len(buckets)):
        thread.wait(i)


def measure_size(
    comm: Communicator,
    nbytes: int,
    bucket_bytes: int,
    reps: int,
    warmup: int,
    threads: dict[str, CommThread],
    schedule: Schedule,
    cprofile: int = 0,
) -> dict[str, Any]:
    """Median seconds of each method for one model size; with ``cprofile`` > 0 also the top
    functions (by own time) of ``exchange_mix`` in the training thread of rank 0."""
    numel = max(1, nbytes // 4)
    profiler = cProfile.Profile() if cprofile and comm.rank == 0 else None
    run, n_buckets = _methods(comm, numel, bucket_bytes, threads, schedule, profiler)
    times, profile = _time_methods(
        comm, run, reps, warmup, schedule, threads["exchange_mix"].exchange.spent
    )
    worst = {m: max_over_ranks(comm, times[m]) for m in METHODS}
    med = {m: median(worst[m]) for m in METHODS}
    paired = {
        m: median([x / r for x, r in zip(worst[m], worst["raw"], strict=True)])
        for m in ("exchange", "exchange_mix")
    }
    extra = {"cprofile": top_functions(profiler, cprofile, warmup + reps)} if profiler else {}
    return {
        "size_mb": rounded(nbytes / 2**20),
        "bytes": numel * 4,
        "buckets": n_buckets,
        **extra,
        **{f"{m}_s": rounded(med[m]) for m in METHODS},
        "ratio": rounded(med["exchange"] / med["raw"], 4),
        "ratio_mix": rounded(med["exchange_mix"] / med["raw"], 4),
        "ratio_paired": rounded(paired["exchange"], 4),
        "ratio_mix_paired": rounded(paired["exchange_mix"], 4),
        "profile_s": {k: rounded(median(max_over_ranks(comm, v))) for k, v in profile.items()},
        "raw_gbit_per_s": rounded(numel * 4 * 8 / med["raw"] / 1e9, 4),
        "exchange_gbit_per_s": rounded(numel * 4 * 8 / med["exchange"] / 1e9, 4),
    }


def _methods(
    comm: Communicator,
    numel: int,
    bucket_bytes: int,
    threads: dict[str, CommThread],
    schedule: Schedule,
    profiler: cProfile.Profile | None,
) -> tuple[dict[str, Callable[[int], None]], int]:
    """One step of each method on a random model of ``numel`` floats (``exchange_mix``
    under ``profiler`` when given), and the number of buckets."""
    # Lazy: importing comm.mpi initialises MPI, and the CLI imports this module in every
    # process, also without a launcher.
    from gossipgrad.comm.mpi import raw_sendrecv_seconds

    flat = torch.randn(numel, generator=torch.Generator().manual_seed(comm.rank))
    recv = torch.empty_like(flat)
    buckets = split_buckets(flat, bucket_bytes)

    def raw(step: int) -> None:
        peers = schedule.peers(comm.rank, step)
        raw_sendrecv_seconds(comm, flat, peers.dst, recv, peers.src, Tag.PINGPONG)

    def mixed(step: int) -> None:
        if profiler is not None:
            profiler.enable()
        try:
            exchange_buckets(threads["exchange_mix"], buckets, step)
        finally:
            if profiler is not None:
                profiler.disable()

    return {
        "raw": raw,
        "exchange": lambda step: exchange_buckets(threads["exchange"], buckets, step),
        "exchange_mix": mixed,
    }, len(buckets)


def _time_methods(
    comm: Communicator,
    run: dict[str, Callable[[int], None]],
    reps: int,
    warmup: int,
    schedule: Schedule,
    spent: dict[str, float],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds of each method per timed rep (methods in rotating order, so none always goes
    first), and ``exchange_mix``'s post and mix seconds per rep."""
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    profile: dict[str, list[float]] = {"post": [], "mix": []}
    for rep in range(warmup + reps):
        schedule.peers(comm.rank, rep)  # the cycle's permutation (~60 us, once per cycle)
        for m in METHODS[rep % 3 :] + METHODS[: rep % 3]:
            before = dict(spent)
            t = timed(comm, lambda m=m, rep=rep: run[m](rep))
            if rep >= warmup:
                times[m].append(t)
                if m == "exchange_mix":
                    for k in profile:
                        profile[k].append(spent[k] - before[k])
    return times, profile


def top_functions(profiler: cProfile.Profile, n: int, calls: int) -> list[dict[str, Any]]:
    """The ``n`` functions with the most own time, per exchange (``calls`` of them)."""
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:n]
    return [
        {
            "function": f"{os.path.basename(f)}:{line}({name})",
            "calls": nc / calls,
            "own_us": rounded(tt / calls * 1e6, 4),
            "cumulative_us": rounded(ct / calls * 1e6, 4),
        }
        for (f, line, name), (_, nc, tt, ct, _) in rows
    ]


def run_exchange(
    comm: Communicator,
    sizes_mb: list[float],
    bucket_mb: float = 25.0,
    reps: int = 10,
    warmup: int = 2,
    seed: int = 0,
    cprofile: int = 0,
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if comm.size < 2:
        raise ValueError(
            "bench exchange needs at least 2 ranks: mpiexec -n 2 gossipgrad bench exchange"
        )
    if reps < 1 or warmup < 0:
        raise ValueError(f"--reps must be >= 1 and --warmup >= 0, got {reps} and {warmup}")
    schedule = Schedule(comm.size, "auto", seed)
    threads = {
        "exchange": CommThread(TransferOnly(comm, schedule), comm.timeout),
        "exchange_mix": CommThread(Timed(comm, schedule), comm.timeout),
    }
    try:
        results = [
            measure_size(
                comm,
                int(mb * 2**20),
                int(bucket_mb * 2**20),
                reps,
                warmup,
                threads,
                schedule,
                cprofile,
            )
            for mb in sizes_mb
        ]
    finally:
        for t in threads.values():
            t.close()
    from gossipgrad.comm.mpi import library_version  # lazy: initialises MPI (see above)

    return {
        "bench": "exchange",
        "size": comm.size,
        "reps": reps,
        "warmup": warmup,
        "bucket_mb": bucket_mb,
        "limit_ratio": 1.0,
        "results": results,
        "mpi": library_version(),
        **link_info(),
    }

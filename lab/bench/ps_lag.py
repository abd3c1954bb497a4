"""``python -m lab ps-lag``: ps throughput with a slow rank, per ``--max-lag``, in one launch.

    mpiexec -n 8 python -m lab ps-lag --lags 0,2 --slow 3:2

One ps model copy (:func:`gossipgrad.tools.bench.common.make_stack`) per lag; blocks of ``--steps``
steps run in rotating order over (lag, straggler off/on), ``--warmup`` untimed rounds first,
then ``--reps`` timed ones. With the straggler on, rank RANK's forward and backward take
FACTOR times as long (:class:`gossipgrad.inject.straggler.Straggler`, the mechanism of
``GOSSIPGRAD_INJECT_SLOW``), on every step or, with ``--slow-every N``, on one step in N.
That mechanism stretches the measured forward and backward, which include the waits of
forward pre-hooks for parameters, so a slow rank that also waits slows down further.

``--rotate``: the slowness moves between ranks instead, rank ``t mod size`` is slow at
step t, by a fixed pause of (FACTOR - 1) x the model's local compute time (measured once
before, without communication; MAX over ranks). Every rank is then as fast as the others on
average, the case a slack is for; a rank that is slower on average bounds every lag.

A block is timed from a barrier to the end of a drain (every update applied, every rank at
the same clock), so a lag's head start is paid for inside the block; ``step_s`` is the
median over blocks of the block time / steps, MAX over ranks. Per lag, ``relative``:
samples/s with the straggler over samples/s without; ``lag_over_first_lag``: samples/s with
the straggler relative to the first of ``--lags`` (0 by default) with the straggler.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.inject.straggler import Straggler
from gossipgrad.settings import Settings
from gossipgrad.tools.bench.common import (
    Trainer,
    finite,
    link_info,
    make_stack,
    max_over_ranks,
    median,
    rounded,
)


class Intermittent:
    """A straggler that is slow on one step in ``every`` (1: always)."""

    def __init__(self, slow: Straggler, every: int) -> None:
        self.slow, self.every, self.steps = slow, every, 0
        self.fast = Straggler(-1, env=Settings())

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        self.steps += 1
        with (self.slow if self.steps % self.every == 0 else self.fast).compute():
            yield


class Rotating:
    """Slow on this rank's turn: a pause of ``pause_s`` before step t's compute when
    ``t mod size == rank``."""

    def __init__(self, rank: int, size: int, pause_s: float) -> None:
        self.rank, self.size, self.pause_s, self.steps = rank, size, pause_s, 0

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        if self.steps % self.size == self.rank:
            time.sleep(self.pause_s)
        self.steps += 1
        yield


def local_compute_s(comm: Communicator, width: int, layers: int, batch: int) -> float:
    """Median forward + backward seconds of the bench model without communication (3 timed
    after 1 untimed), MAX over ranks."""
    model = make_stack(width, layers)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1))
    times = []
    for i in range(4):
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        if i:
            times.append(time.perf_counter() - t0)
    return max_over_ranks(comm, [median(times)])[0]


def parse_slow(text: str, size: int) -> tuple[int, float]:
    """``--slow RANK:FACTOR`` -> (rank, factor); ValueError naming the flag."""
    try:
        rank, factor = Settings.from_env({"GOSSIPGRAD_INJECT_SLOW": text}).inject_slow
    except (ValueError, TypeError):
        raise ValueError(
            f"--slow {text!r}: expected RANK:FACTOR with FACTOR >= 1, e.g. 3:2"
        ) from None
    if rank >= size:
        raise ValueError(
            f"--slow {text!r}: rank {rank} does not exist at {size} ranks; choose 0..{size - 1}"
        )
    return rank, factor


# Over 60 lines on purpose: the try/finally that closes every model copy must enclose the runs.
def run_ps_lag(
    comm: Communicator,
    lags: list[int],
    slow: tuple[int, float],
    slow_every: int = 1,
    width: int = 512,
    layers: int = 4,
    batch: int = 8,
    bucket_mb: float = 25.0,
    steps: int = 10,
    reps: int = 3,
    warmup: int = 1,
    rotate: bool = False,
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if not lags or len(set(lags)) != len(lags) or min(lags) < 0:
        raise ValueError(f"--lags {lags}: name each lag (>= 0) once, e.g. 0,2")
    if batch < 1 or steps < 1 or reps < 1 or warmup < 0 or slow_every < 1:
        raise ValueError("need --batch, --steps, --reps, --slow-every >= 1 and --warmup >= 0")
    env = Settings(inject_slow=slow)
    trainers, slowed = {}, {}
    fast = Straggler(comm.rank, env=Settings())
    compute_s = local_compute_s(comm, width, layers, batch) if rotate else None
    try:
        for lag in lags:
            trainers[lag] = Trainer(comm, "ps", width, layers, bucket_mb=bucket_mb, max_lag=lag)
            trainers[lag].set_batch(batch)
            slowed[lag] = (
                Rotating(comm.rank, comm.size, (slow[1] - 1) * compute_s)
                if rotate
                else Intermittent(Straggler(comm.rank, env=env), slow_every)
            )
        configs = [(lag, on) for lag in lags for on in (False, True)]
        times: dict[tuple[int, bool], list[float]] = {c: [] for c in configs}
        for rep in range(warmup + reps):
            k = rep % len(configs)
            for lag, on in configs[k:] + configs[:k]:
                tr = trainers[lag]
                tr.straggler = slowed[lag] if on else fast
                seconds = _block(comm, tr, steps)
                if rep >= warmup:
                    times[(lag, on)].append(seconds / steps)
    finally:
        for tr in trainers.values():
            tr.close()
    rows = []
    for lag, on in configs:
        step_s = median(max_over_ranks(comm, times[(lag, on)]))
        rows.append(
            {
                "max_lag": lag,
                "straggler": on,
                "step_s": rounded(step_s),
                "samples_per_s": rounded(batch * comm.size / step_s, 5),
            }
        )
    rate = {(r["max_lag"], r["straggler"]): r["samples_per_s"] for r in rows}
    base = lags[0]
    return {
        "bench": "ps-lag",
        "size": comm.size,
        "width": width,
        "layers": layers,
        "batch": batch,
        "bucket_mb": bucket_mb,
        "slow": list(slow),
        "slow_every": slow_every,
        "rotate": rotate,
        "compute_s": finite(compute_s) if rotate else None,
        "steps": steps,
        "reps": reps,
        "warmup": warmup,
        "results": rows,
        "relative": {str(lag): finite(rate[(lag, True)] / rate[(lag, False)]) for lag in lags},
        "lag_over_first_lag": {
            str(lag): finite(rate[(lag, True)] / rate[(base, True)]) for lag in lags
        },
        **link_info(),
    }


def _block(comm: Communicator, trainer: Trainer, steps: int) -> float:
    """Seconds from a barrier to the end of ``steps`` steps and a drain, on this rank."""
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    trainer.opt.drain()
    return time.perf_counter() - t0

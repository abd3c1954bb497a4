"""``gossipgrad bench``: benchmarks that print one JSON object on rank 0.

    mpiexec -n 2 gossipgrad bench exchange --sizes-mb 1,100
    mpiexec -n 2 gossipgrad bench overlap --comm-fraction 0.5
    python scripts/emucluster.py run -n 8 --rate 1gbit -- gossipgrad bench strategies --png s.png

See docs/benchmarks.md for what each measures and the numbers they produced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

log = logging.getLogger("gossipgrad")

_TIMEOUT = click.option("--comm-timeout", type=float, default=120.0, show_default=True,
                        help="Seconds any wait may take before the job aborts.")
_REPS = click.option("--reps", type=click.IntRange(1), default=10, show_default=True,
                     help="Timed repetitions (the median is reported).")
_WARMUP = click.option("--warmup", type=click.IntRange(0), default=2, show_default=True,
                       help="Untimed repetitions first.")


def _run(comm_timeout: float, body: Callable[[Any], dict[str, Any]]) -> None:
    """Start the world, run ``body(comm)``, print its record on rank 0; abort on failure."""
    import torch

    from gossipgrad.bench.common import emit
    from gossipgrad.comm.base import CommError
    from gossipgrad.runtime import abort_job, init

    torch.set_num_threads(1)
    comm = init(comm_timeout)
    try:
        record = body(comm)
    except ValueError as exc:
        if comm.size == 1:
            raise click.UsageError(str(exc)) from exc
        abort_job(comm, f"rank {comm.rank}: {exc}")
    except (CommError, RuntimeError, OSError) as exc:
        abort_job(comm, f"rank {comm.rank}: {exc}")
    emit(comm, record)


@click.group()
def bench() -> None:
    """Measure the runtime: exchange vs raw MPI, overlap, strategies side by side."""


@bench.command()
@click.option("--sizes-mb", default="1,100", show_default=True,
              help="Comma-separated model sizes in MiB.")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True,
              help="Largest bucket, as in training.")
@_REPS
@_WARMUP
@_TIMEOUT
def exchange(sizes_mb: str, bucket_mb: float, reps: int, warmup: int,
             comm_timeout: float) -> None:
    """gossipgrad's bucketed exchange (comm thread) vs one raw MPI Sendrecv of the same bytes."""
    from gossipgrad.bench.common import parse_sizes_mb
    from gossipgrad.bench.exchange import run_exchange

    try:
        sizes = parse_sizes_mb(sizes_mb)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if bucket_mb <= 0:
        raise click.BadParameter(f"must be > 0, got {bucket_mb}", param_hint="--bucket-mb")
    _run(comm_timeout, lambda comm: run_exchange(comm, sizes, bucket_mb, reps, warmup))

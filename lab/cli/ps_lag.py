"""``python -m lab ps-lag``: ps with a slow rank, per --max-lag (lab.bench.ps_lag).

mpiexec -n 8 python -m lab ps-lag --lags 0,2 --slow 3:2
"""

from __future__ import annotations

from typing import Any

import click

from gossipgrad.cli.options import BUCKET_MB, COMM_TIMEOUT, timed_blocks
from lab.cli.options import mlp_model


@click.command("ps-lag")
@click.option(
    "--lags",
    default="0,2",
    show_default=True,
    help="Comma-separated --max-lag values, one ps model copy each.",
)
@click.option(
    "--slow",
    default="3:2",
    show_default=True,
    help="RANK:FACTOR: that rank's compute takes FACTOR times as long when the straggler is on.",
)
@click.option(
    "--slow-every",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="The straggler is slow on one step in N (1: every step).",
)
@click.option(
    "--rotate",
    is_flag=True,
    help="The slowness moves: rank t mod size is slow at step t, by (FACTOR - 1) x "
    "the local compute time (RANK of --slow is ignored).",
)
@mlp_model(batch=8)
@BUCKET_MB
@timed_blocks(
    10,
    "Steps per timed block (a drain ends each block).",
    "Timed rounds over every (lag, straggler) pair (the median is reported).",
)
@COMM_TIMEOUT
def ps_lag(
    lags: str,
    slow: str,
    slow_every: int,
    rotate: bool,
    width: int,
    layers: int,
    batch: int,
    bucket_mb: float,
    steps: int,
    reps: int,
    warmup: int,
    comm_timeout: float,
) -> None:
    """ps throughput with and without a slow rank, for each --max-lag, in one launch."""
    from gossipgrad.tools.cli.output import run_bench
    from lab.bench.ps_lag import parse_slow, run_ps_lag

    try:
        lag_list = [int(x) for x in lags.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{lags!r}: expected comma-separated whole numbers, e.g. 0,2", param_hint="--lags"
        ) from None

    def body(comm: Any) -> dict[str, Any]:
        return run_ps_lag(
            comm,
            lag_list,
            parse_slow(slow, comm.size),
            slow_every,
            width,
            layers,
            batch,
            bucket_mb,
            steps,
            reps,
            warmup,
            rotate,
        )

    run_bench(comm_timeout, body)

"""``python -m lab stragglers``: samples/s of the whole job with one slow rank vs without,
per strategy (:mod:`lab.bench.stragglers`).

    mpiexec -n 8 python -m lab stragglers --markdown stragglers.md
"""

from __future__ import annotations

from typing import Any

import click

from gossipgrad.cli.options import BUCKET_MB, COMM_TIMEOUT, timed_blocks
from gossipgrad.tools.cli.output import run_bench
from lab.cli.options import mlp_model


@click.command("stragglers")
@click.option(
    "--contenders",
    default="gossip:0,gossip:2,gossip:4,allreduce,ddp",
    show_default=True,
    help="Comma-separated strategies; gossip:S is gossip with --max-lag S.",
)
@click.option(
    "--slow",
    default=None,
    metavar="RANK:FACTOR",
    help="The slow rank and how many times as long its compute takes "
    "(default: GOSSIPGRAD_INJECT_SLOW, else the last rank at 2).",
)
@mlp_model(batch=64)
@BUCKET_MB
@timed_blocks(
    40,
    "Steps per block.",
    "Timed blocks per contender and condition (the median is reported).",
    "Untimed blocks per contender and condition first.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a Markdown table here (rank 0).",
)
@COMM_TIMEOUT
def stragglers(
    contenders: str,
    slow: str | None,
    width: int,
    layers: int,
    batch: int,
    bucket_mb: float,
    steps: int,
    reps: int,
    warmup: int,
    markdown: str | None,
    comm_timeout: float,
) -> None:
    """Samples/s of the whole job with one slow rank vs without, per strategy."""
    from gossipgrad.settings import settings
    from lab.bench.stragglers import (
        markdown_table,
        parse_contenders,
        parse_slow,
        run_stragglers,
    )

    try:
        names = parse_contenders(contenders)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc

    def body(comm: Any) -> dict[str, Any]:
        record = run_stragglers(
            comm,
            names,
            parse_slow(slow, comm.size, settings()),
            width,
            layers,
            batch,
            steps,
            reps,
            warmup,
            bucket_mb,
        )
        if comm.rank == 0 and markdown:
            with open(markdown, "w", encoding="utf-8") as f:
                f.write(markdown_table(record))
        return record

    run_bench(comm_timeout, body)

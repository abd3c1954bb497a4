"""``gossipgrad bench``: benchmarks that print one JSON object on rank 0.

    mpiexec -n 2 gossipgrad bench exchange --sizes-mb 1,100
    mpiexec -n 2 gossipgrad bench overlap --comm-fraction 0.5
    python scripts/emucluster.py run -n 8 --rate 1gbit -- gossipgrad bench strategies --png s.png
    gossipgrad bench convergence --sizes 4,7,8 --markdown conv.md   # launches mpiexec itself

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
    from gossipgrad.runtime import call_or_abort, init

    torch.set_num_threads(1)
    comm = init(comm_timeout)
    try:
        record = call_or_abort(comm, body)
    except ValueError as exc:  # one rank: the user's mistake
        raise click.UsageError(str(exc)) from exc
    emit(comm, record)


@click.group()
def bench() -> None:
    """Measure the runtime: exchange vs raw MPI, overlap, strategies side by side."""


@bench.command()
@click.option("--sizes-mb", default="1,100", show_default=True,
              help="Comma-separated model sizes in MiB.")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True,
              help="Largest bucket, as in training.")
@click.option("--cprofile", type=click.IntRange(0), default=0, show_default=True,
              help="Add the N functions with the most own time in exchange_mix (rank 0).")
@_REPS
@_WARMUP
@_TIMEOUT
def exchange(sizes_mb: str, bucket_mb: float, cprofile: int, reps: int, warmup: int,
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
    _run(comm_timeout, lambda comm: run_exchange(comm, sizes, bucket_mb, reps, warmup,
                                                 cprofile=cprofile))


@bench.command()
@click.option("--width", type=click.IntRange(1), default=1024, show_default=True,
              help="Features of each Linear layer.")
@click.option("--layers", type=click.IntRange(1), default=8, show_default=True)
@click.option("--mix", type=click.Choice(["param", "grad"]), default="param", show_default=True)
@click.option("--comm-fraction", type=float, default=0.5, show_default=True,
              help="Choose the batch so the exchange takes this fraction of backward.")
@click.option("--batch", type=click.IntRange(0), default=0, show_default=True,
              help="Samples per rank per step (0 = calibrate from --comm-fraction).")
@click.option("--bucket-mb", type=float, default=4.0, show_default=True)
@click.option("--staleness", type=click.IntRange(0, 1), default=0, show_default=True,
              help="Of the overlapped configuration (1: complete each exchange at the next "
                   "step, behind its forward and backward).")
@click.option("--steps", type=click.IntRange(1), default=4, show_default=True,
              help="Timed steps per block.")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Blocks per configuration (the median is reported).")
@_TIMEOUT
def overlap(width: int, layers: int, mix: str, comm_fraction: float, batch: int,
            bucket_mb: float, staleness: int, steps: int, reps: int,
            comm_timeout: float) -> None:
    """Step time: compute only vs blocking exchange vs overlapped exchange."""
    from gossipgrad.bench.overlap import run_overlap

    if bucket_mb <= 0:
        raise click.BadParameter(f"must be > 0, got {bucket_mb}", param_hint="--bucket-mb")
    _run(comm_timeout, lambda comm: run_overlap(comm, width, layers, mix, comm_fraction, batch,
                                                bucket_mb, steps, reps, staleness))


@bench.command()
@click.option("--strategies", default="gossip,allreduce,local", show_default=True,
              help="Comma-separated strategy names (any the engine factory knows).")
@click.option("--width", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--layers", type=click.IntRange(1), default=8, show_default=True,
              help="Linear(width, width) layers: 8 x 1024 is a 33.6 MB model.")
@click.option("--batch", type=click.IntRange(1), default=8, show_default=True,
              help="Samples per rank per step (small: communication-bound).")
@click.option("--mix", type=click.Choice(["param", "grad"]), default="param", show_default=True,
              help="What gossip mixes (allreduce always averages gradients).")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True)
@click.option("--overlap/--no-overlap", default=True, show_default=True)
@click.option("--staleness", type=click.IntRange(0, 1), default=0, show_default=True,
              help="For gossip and allreduce (1: complete each exchange at the next step).")
@click.option("--steps", type=click.IntRange(1), default=3, show_default=True,
              help="Timed steps per block.")
@click.option("--reps", type=click.IntRange(1), default=3, show_default=True,
              help="Timed blocks per strategy (the median is reported).")
@click.option("--warmup", type=click.IntRange(0), default=1, show_default=True,
              help="Untimed blocks per strategy first.")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Write a bar chart here (rank 0; needs matplotlib).")
@click.option("--markdown", type=click.Path(dir_okay=False), default=None,
              help="Write a Markdown table here (rank 0).")
@_TIMEOUT
def strategies(strategies: str, width: int, layers: int, batch: int, mix: str,
               bucket_mb: float, overlap: bool, staleness: int, steps: int, reps: int,
               warmup: int, png: str | None, markdown: str | None,
               comm_timeout: float) -> None:
    """gossip vs allreduce vs local on the same model, ranks and links, in one launch."""
    from gossipgrad.bench.strategies import markdown_table, plot_png, run_strategies

    names = [s.strip() for s in strategies.split(",") if s.strip()]
    if bucket_mb <= 0:
        raise click.BadParameter(f"must be > 0, got {bucket_mb}", param_hint="--bucket-mb")

    def body(comm: Any) -> dict[str, Any]:
        record = run_strategies(comm, names, width, layers, batch, mix, bucket_mb, overlap,
                                steps, reps, warmup, staleness)
        if comm.rank == 0 and markdown:
            with open(markdown, "w", encoding="utf-8") as f:
                f.write(markdown_table(record))
        if comm.rank == 0 and png:
            plot_png(record, png)
        return record

    _run(comm_timeout, body)


@bench.command()
@click.option("--tasks", default="digits,templates", show_default=True,
              help="Comma-separated built-in datasets.")
@click.option("--sizes", default="4,7,8", show_default=True, help="Comma-separated rank counts.")
@click.option("--modes", default="allreduce,param,grad,grad-adaptive", show_default=True,
              help="Comma-separated modes: allreduce, param, grad (--sync off), grad-adaptive.")
@click.option("--epochs", type=click.IntRange(1), default=20, show_default=True,
              help="Epochs of every run (evaluated once, after the last).")
@click.option("--seeds", default="0", show_default=True,
              help="Comma-separated seeds; every cell runs once per seed (means reported).")
@click.option("--extra", default="", help="More `gossipgrad train` flags for every run, "
              "one quoted string (they come last, so they win).")
@click.option("--timeout", type=float, default=1800.0, show_default=True,
              help="Seconds one run may take before the benchmark fails.")
@click.option("--markdown", type=click.Path(dir_okay=False), default=None,
              help="Write the Markdown table here.")
def convergence(tasks: str, sizes: str, modes: str, epochs: int, seeds: str, extra: str,
                timeout: float, markdown: str | None) -> None:
    """Accuracy of gossip grad / param / grad-adaptive against allreduce (not under mpiexec:
    it launches one `mpiexec -n SIZE gossipgrad train` per cell)."""
    import json
    import shlex

    from gossipgrad.bench import convergence as conv

    try:
        task_list = conv.parse_list(tasks, "--tasks", conv.TASKS)
        mode_list = conv.parse_list(modes, "--modes", tuple(conv.MODES))
        size_list = conv.parse_sizes(sizes)
        seed_list = conv.parse_seeds(seeds)
        record = conv.run_convergence(
            task_list, size_list, mode_list, epochs, seed_list, shlex.split(extra), timeout,
            on_cell=lambda r: click.echo(json.dumps(r, sort_keys=True), err=True))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(conv.markdown_table(record))
    click.echo(json.dumps(record, sort_keys=True))


def _register_more() -> None:
    """Benchmarks that live with their feature: the shuffle's cost, the planner's accuracy."""
    from gossipgrad.bench.plan_validate import plan_validate
    from gossipgrad.bench.shuffle_cost import shuffle

    bench.add_command(shuffle)
    bench.add_command(plan_validate)


_register_more()

"""``gossipgrad bench tta``: time to accuracy, every strategy side by side in one launch.

    python scripts/emucluster.py run -n 8 --rate 1gbit -- gossipgrad bench tta \\
        --strategies gossip,allreduce,ddp,horovod,local --markdown tta.md --png tta.png
    gossipgrad bench tta --strategies gossip,allreduce --metrics-out tta-1.jsonl  # 1 rank

Parses the options into a :class:`~gossipgrad.engine.run.config.TrainConfig` (the job) and
:class:`~gossipgrad.tools.bench.tta.TtaOptions` (the race), runs
:func:`gossipgrad.tools.bench.tta.run_tta` on every rank; rank 0 prints the JSON and writes the
optional files. What it measures: :mod:`gossipgrad.tools.bench.tta`, docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gossipgrad.cli.options import BUCKET_MB, COMM_TIMEOUT, GOSSIP_MIX
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.tools.bench.tta import TtaOptions, run_tta
from gossipgrad.tools.bench.tta_report import markdown_table, metrics_lines, plot_png
from gossipgrad.tools.cli.output import output_file, run_bench

#: The job's defaults: a wide MLP on digits (17.4 MB of parameters: 0.14 s on a 1 Gbit/s
#: link, about one step of its compute at batch 16 with 8 ranks on 2 cores).
JOB = {"arch": "mlp", "hidden": 2048, "batch_size": 16, "lr": 0.05}


@click.command("tta")
@click.option(
    "--strategies",
    default="gossip,allreduce,ddp,local",
    show_default=True,
    help="Comma-separated strategies (any the engine factory knows, e.g. horovod).",
)
@click.option(
    "--target",
    type=float,
    default=0.9,
    show_default=True,
    help="Test accuracy to reach (consensus model).",
)
@click.option(
    "--steps",
    type=int,
    default=200,
    show_default=True,
    help="Step budget, also the length of the learning-rate schedule.",
)
@click.option(
    "--eval-every",
    type=int,
    default=2,
    show_default=True,
    help="Steps between evaluations (the resolution of steps to target).",
)
@click.option(
    "--stop-at-target", is_flag=True, help="Stop each strategy once it reaches the target."
)
@click.option(
    "--time-limit",
    type=float,
    default=0.0,
    show_default=True,
    help="Stop a strategy whose training clock passed this many seconds (0: none).",
)
@click.option("--arch", default=JOB["arch"], show_default=True)
@click.option("--hidden", type=int, default=JOB["hidden"], show_default=True)
@click.option("--dataset", default="digits", show_default=True)
@click.option(
    "--batch-size",
    "-b",
    type=int,
    default=JOB["batch_size"],
    show_default=True,
    help="Samples per rank per step.",
)
@click.option("--lr", type=float, default=JOB["lr"], show_default=True)
@click.option("--momentum", type=float, default=0.9, show_default=True)
@GOSSIP_MIX
@BUCKET_MB
@click.option("--partition", default="iid", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@output_file("--markdown", "Write a Markdown table here (rank 0).")
@output_file("--png", "Plot accuracy against training seconds here (rank 0; needs matplotlib).")
@output_file("--metrics-out", "Write JSON lines for 'gossipgrad plan --metrics' here (rank 0).")
@COMM_TIMEOUT
def tta(
    strategies: str,
    target: float,
    steps: int,
    eval_every: int,
    stop_at_target: bool,
    time_limit: float,
    markdown: str | None,
    png: str | None,
    metrics_out: str | None,
    comm_timeout: float,
    **job: Any,
) -> None:
    """Steps, samples and seconds to a target test accuracy per strategy, in one launch."""
    try:
        opts = TtaOptions(
            tuple(s.strip() for s in strategies.split(",") if s.strip()),
            target,
            steps,
            eval_every,
            stop_at_target,
            time_limit,
        )
        cfg = TrainConfig.from_flags(**job, max_steps=steps, epochs=10_000, progress=False)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc

    def body(comm: Any) -> dict[str, Any]:
        record = run_tta(comm, cfg, opts)
        if comm.rank == 0:
            write_files(record, markdown, png, metrics_out)
        return record

    run_bench(comm_timeout, body)


def write_files(
    record: dict[str, Any], markdown: str | None, png: str | None, metrics_out: str | None
) -> None:
    """The optional outputs (rank 0 only)."""
    if markdown:
        Path(markdown).write_text(markdown_table(record), encoding="utf-8")
    if metrics_out:
        Path(metrics_out).write_text("\n".join(metrics_lines(record)) + "\n", encoding="utf-8")
    if png:
        plot_png(record, png)

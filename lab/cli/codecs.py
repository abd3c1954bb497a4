"""``python -m lab codecs``: accuracy of each wire codec against fp32 per strategy, one
``mpiexec -n SIZE gossipgrad train --wire WIRE`` per cell (lab.bench.codecs).

    python -m lab codecs --sizes 7,8 --rows codecs.jsonl --markdown codecs.md
"""

from __future__ import annotations

import click


@click.command("codecs")
@click.option("--tasks", default="digits,templates", show_default=True)
@click.option("--sizes", default="7,8", show_default=True, help="Comma-separated rank counts.")
@click.option(
    "--modes",
    default="param,grad,allreduce,ps",
    show_default=True,
    help="Comma-separated: param, grad (gossip mixes), allreduce, ps.",
)
@click.option("--wires", default="fp32,bf16,fp16,fp8", show_default=True)
@click.option(
    "--topologies",
    default="auto",
    show_default=True,
    help="Comma-separated schedules for the gossip modes (auto, base2, dissemination ...).",
)
@click.option("--epochs", type=click.IntRange(1), default=20, show_default=True)
@click.option("--timeout", type=float, default=3600.0, show_default=True)
@click.option(
    "--rows",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append each cell here as a JSON line; cells already there are not run again.",
)
@click.option("--markdown", type=click.Path(dir_okay=False), default=None)
def codecs(
    tasks: str,
    sizes: str,
    modes: str,
    wires: str,
    topologies: str,
    epochs: int,
    timeout: float,
    rows: str | None,
    markdown: str | None,
) -> None:
    """Accuracy per wire codec (not under mpiexec: it launches one run per cell)."""
    import json

    from lab.bench import codecs as study
    from lab.bench import convergence as conv

    try:
        record = study.run_codecs(
            conv.parse_list(tasks, "--tasks", conv.TASKS),
            conv.parse_sizes(sizes),
            conv.parse_list(modes, "--modes", tuple(study.MODES)),
            conv.parse_list(wires, "--wires", study.WIRES),
            conv.parse_list(topologies, "--topologies"),
            epochs,
            timeout,
            rows,
            on_cell=lambda r: click.echo(json.dumps(r, sort_keys=True), err=True),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(study.markdown_table(record))
    click.echo(json.dumps(record, sort_keys=True))

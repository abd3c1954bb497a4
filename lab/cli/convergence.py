"""``python -m lab convergence``: accuracy of the gossip mixes against allreduce, one
``mpiexec -n SIZE gossipgrad train`` per cell (lab.bench.convergence).

    python -m lab convergence --sizes 4,7,8 --markdown conv.md
"""

from __future__ import annotations

import click


@click.command("convergence")
@click.option(
    "--tasks",
    default="digits,templates",
    show_default=True,
    help="Comma-separated built-in datasets.",
)
@click.option("--sizes", default="4,7,8", show_default=True, help="Comma-separated rank counts.")
@click.option(
    "--modes",
    default="allreduce,param,grad,grad-adaptive",
    show_default=True,
    help="Comma-separated modes: allreduce, param, grad (--sync off), grad-adaptive.",
)
@click.option(
    "--epochs",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Epochs of every run (evaluated once, after the last).",
)
@click.option(
    "--seeds",
    default="0",
    show_default=True,
    help="Comma-separated seeds; every cell runs once per seed (means reported).",
)
@click.option(
    "--extra",
    default="",
    help="More `gossipgrad train` flags for every gossip run, one quoted string (they come "
    "last, so they win); the allreduce reference runs as it is.",
)
@click.option(
    "--timeout",
    type=float,
    default=1800.0,
    show_default=True,
    help="Seconds one run may take before the benchmark fails.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the Markdown table here.",
)
def convergence(
    tasks: str,
    sizes: str,
    modes: str,
    epochs: int,
    seeds: str,
    extra: str,
    timeout: float,
    markdown: str | None,
) -> None:
    """Accuracy of gossip grad / param / grad-adaptive against allreduce (not under mpiexec:
    it launches one `mpiexec -n SIZE gossipgrad train` per cell)."""
    import json
    import shlex

    from lab.bench import convergence as conv

    try:
        task_list = conv.parse_list(tasks, "--tasks", conv.TASKS)
        mode_list = conv.parse_list(modes, "--modes", tuple(conv.MODES))
        size_list = conv.parse_sizes(sizes)
        seed_list = conv.parse_seeds(seeds)
        record = conv.run_convergence(
            task_list,
            size_list,
            mode_list,
            epochs,
            seed_list,
            shlex.split(extra),
            timeout,
            on_cell=lambda r: click.echo(json.dumps(r, sort_keys=True), err=True),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(conv.markdown_table(record))
    click.echo(json.dumps(record, sort_keys=True))

"""``gossipgrad schedule``: print who pairs with whom, and check the invariants."""

from __future__ import annotations

import json

import click

from gossipgrad.comm.schedule import Schedule, check_schedule
from gossipgrad.options import Topology


@click.command()
@click.option("--size", "-n", type=int, required=True, help="Number of ranks.")
@click.option("--steps", "-k", type=int, default=None, help="Steps to show [default: 2 cycles].")
@click.option(
    "--topology", type=click.Choice([t.value for t in Topology]), default="auto", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--no-rotate", is_flag=True, help="Keep the same rank numbering every cycle.")
@click.option("--check", is_flag=True, help="Verify the invariants; exit 1 on a violation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def schedule(
    size: int,
    steps: int | None,
    topology: str,
    seed: int,
    no_rotate: bool,
    check: bool,
    as_json: bool,
) -> None:
    """Show the partner schedule: at each step, rank -> dst (and <- src)."""
    if size < 1:
        raise click.BadParameter(f"must be >= 1, got {size}", param_hint="--size")
    try:
        sched = Schedule(size, topology, seed, rotate=not no_rotate)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    steps = steps if steps is not None else max(2 * sched.cycle_length, 1)
    if steps < 1:
        raise click.BadParameter(f"must be >= 1, got {steps}", param_hint="--steps")
    table = sched.table(steps)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "size": size,
                    "topology": sched.topology.value,
                    "cycle_length": sched.cycle_length,
                    "steps": [[[p.dst, p.src] if p else None for p in row] for row in table],
                }
            )
        )
    else:
        click.echo(
            f"size {size}, topology {sched.topology.value}, cycle {sched.cycle_length} "
            f"steps, seed {seed}, rotation {'off' if no_rotate else 'on'}"
        )
        for t, row in enumerate(table):
            pairs = "  ".join(
                f"{r}->{p.dst}" + ("" if p.src == p.dst else f"<-{p.src}")
                for r, p in enumerate(row)
                if p
            )
            click.echo(
                f"step {t:3d} (cycle {sched.cycle(t)}, dim {t % max(1, sched.cycle_length)})"
                f": {pairs or 'no communication'}"
            )
    if check:
        problems = check_schedule(sched, steps)
        for p in problems:
            click.echo(f"VIOLATION {p}", err=True)
        if problems:
            raise SystemExit(1)
        click.echo(f"ok: {steps} steps, every send has its receive", err=True)

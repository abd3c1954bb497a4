"""``gossipgrad schedule``: print who pairs with whom, check the invariants, or measure how
fast pure mixing reaches the mean (``--mixing``, one JSON record)."""

from __future__ import annotations

import json
from fractions import Fraction

import click

from gossipgrad.comm.schedule import Peers, Schedule, best_exact_topology, check_schedule
from gossipgrad.comm.schedule_mixing import exactness_problems, mixing_record
from gossipgrad.registry import TOPOLOGIES


@click.command()
@click.option("--size", "-n", type=int, required=True, help="Number of ranks.")
@click.option("--steps", "-k", type=int, default=None, help="Steps to show [default: 2 cycles].")
@click.option(
    "--topology", type=click.Choice(TOPOLOGIES.names()), default="auto", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--no-rotate", is_flag=True, help="Keep the same rank numbering every cycle.")
@click.option(
    "--check", is_flag=True, help="Verify the invariants (and exactness); exit 1 on a violation."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--mixing",
    is_flag=True,
    help="Print one JSON record instead: steps of pure mixing each topology needs to reach "
    "--tol at this size (lab/records/schedules.md).",
)
@click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=1e-6, show_default=True)
@click.option("--dim", type=click.IntRange(1), default=16, show_default=True, help="--mixing.")
def schedule(
    size: int,
    steps: int | None,
    topology: str,
    seed: int,
    no_rotate: bool,
    check: bool,
    as_json: bool,
    mixing: bool,
    tol: float,
    dim: int,
) -> None:
    """Show the partner schedule: at each step, rank -> dst (and <- src), the weight where it
    is not 1/2, and idle ranks."""
    if size < 1:
        raise click.BadParameter(f"must be >= 1, got {size}", param_hint="--size")
    if mixing:
        click.echo(json.dumps(mixing_record(size, tol, dim, seed, rotate=not no_rotate)))
        return
    try:
        sched = Schedule(size, topology, seed, rotate=not no_rotate)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    steps = steps if steps is not None else max(2 * sched.cycle_length, 1)
    if steps < 1:
        raise click.BadParameter(f"must be >= 1, got {steps}", param_hint="--steps")
    table = sched.table(steps)
    if as_json:
        click.echo(json.dumps(_record(sched, table)))
    else:
        _print_table(sched, table, no_rotate)
    if check:
        _check(sched, steps)


def _record(sched: Schedule, table: list[list[Peers | None]]) -> dict[str, object]:
    return {
        "size": sched.size,
        "topology": sched.topology,
        "cycle_length": sched.cycle_length,
        "period": sched.period,
        "exact_steps": sched.exact_steps,
        "best_exact": best_exact_topology(sched.size),
        "steps": [[[p.dst, p.src] if p else None for p in row] for row in table],
        "weights": [[p.weight if p else None for p in row] for row in table],
        "idle": [[r for r, p in enumerate(row) if p and p.idle] for row in table],
    }


def _print_table(sched: Schedule, table: list[list[Peers | None]], no_rotate: bool) -> None:
    exact = f", exact after {sched.exact_steps}" if sched.exact_steps else ""
    click.echo(
        f"size {sched.size}, topology {sched.topology}, cycle {sched.cycle_length} "
        f"steps{exact}, seed {sched.seed}, rotation {'off' if no_rotate else 'on'}"
    )
    if sched.exact_steps is None:
        best = Schedule(sched.size, best_exact_topology(sched.size))
        click.echo(
            f"(not exact at this size; --topology {best.topology} gives the exact mean "
            f"after {best.exact_steps} steps)"
        )
    label = sched.spec.step_label
    for t, row in enumerate(table):
        pairs = "  ".join(_peer_text(r, p, sched.size) for r, p in enumerate(row) if p)
        click.echo(
            f"step {t:3d} (cycle {sched.cycle(t)}, {label} {t % max(1, sched.cycle_length)})"
            f": {pairs or 'no communication'}"
        )


def _peer_text(rank: int, p: Peers, size: int) -> str:
    """``0->1``, ``0->1<-3`` (dissemination), ``4->0 w=4/5`` or ``3 idle``."""
    if p.idle:
        return f"{rank} idle"
    text = f"{rank}->{p.dst}" + ("" if p.src == p.dst else f"<-{p.src}")
    return text if p.weight == 0.5 else f"{text} w={Fraction(p.weight).limit_denominator(size)}"


def _check(sched: Schedule, steps: int) -> None:
    problems = check_schedule(sched, steps) + exactness_problems(sched, steps)
    for p in problems:
        click.echo(f"VIOLATION {p}", err=True)
    if problems:
        raise SystemExit(1)
    exact = f"; exact mean after {sched.exact_steps} steps" if sched.exact_steps else ""
    click.echo(f"ok: {steps} steps, every send has its receive{exact}", err=True)

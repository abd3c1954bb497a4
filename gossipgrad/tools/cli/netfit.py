"""``gossipgrad netfit``: fit the network (alpha, beta) -> the planner's network JSON.

    mpiexec -n 2 gossipgrad netfit --out network.json
    srun -N 2 --ntasks-per-node 1 gossipgrad netfit --out network.json
    gossipgrad netfit --refit old.json --out network.json   # no launch: refit saved times

Parses and validates, then calls :func:`gossipgrad.tools.measure.netfit.measure_network` on every
rank; rank 0 writes the result and logs a summary.
"""

from __future__ import annotations

import json
import logging

import click

from gossipgrad.cli.options import COMM_TIMEOUT
from gossipgrad.cli.output import write_output
from gossipgrad.comm.base import CommError
from gossipgrad.runtime import abort_job, init, launched_by_mpi
from gossipgrad.tools.cli.output import output_file
from gossipgrad.tools.measure.netfit import NetfitResult, measure_network
from gossipgrad.tools.measure.refit import load_document, refit_network
from gossipgrad.tools.measure.sweeps import Sweep

log = logging.getLogger("gossipgrad")
POOR_R2 = 0.9


@click.command()
@click.option(
    "--min-kb",
    type=click.FloatRange(min=0.004),
    default=4,
    show_default=True,
    help="Smallest message (KiB); sizes double from here.",
)
@click.option(
    "--max-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Largest message (MiB) [default: 64 on one host, 256 across hosts].",
)
@click.option(
    "--reps",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Timed repetitions per size (after one warm-up); the median is kept.",
)
@click.option(
    "--stat",
    type=click.Choice(["median", "min"]),
    default="median",
    show_default=True,
    help="Per size: median of the reps, or the fastest (robust on a busy machine).",
)
@click.option(
    "--max-message-s",
    type=click.FloatRange(min=0, min_open=True),
    default=0.25,
    show_default=True,
    help="Stop growing the message once one takes longer (s).",
)
@click.option(
    "--peer",
    type=click.IntRange(min=1),
    default=None,
    help="Rank 0's ping-pong partner [default: first rank on another host, else 1].",
)
@click.option(
    "--exchange/--no-exchange",
    default=True,
    show_default=True,
    help="Also time simultaneous send+receive (estimates the duplex factor).",
)
@click.option(
    "--allreduce/--no-allreduce",
    default=True,
    show_default=True,
    help="Also time allreduce at the launched size.",
)
@click.option(
    "--allreduce-mb",
    type=click.FloatRange(min=0),
    default=32.0,
    show_default=True,
    help="Grow the allreduce sweep to at least this size however long a message takes "
    "(the bucket sizes training allreduces; 0: stop at --max-message-s like the others).",
)
@click.option(
    "--allreduce-in-flight",
    type=click.IntRange(min=0),
    default=4,
    show_default=True,
    help="Also time this many allreduces posted at once (a step's buckets queued behind "
    "each other; 0 or 1: not measured).",
)
@click.option(
    "--concurrent/--no-concurrent",
    default=True,
    show_default=True,
    help="Also time every rank sending at once (a ring shift), as a training step loads "
    "the network.",
)
@COMM_TIMEOUT
@output_file("--out", "Rank 0 writes the network JSON here (default: stdout).")
@click.option(
    "--refit",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Refit a saved netfit JSON from the times it recorded (no launch, no measuring).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log on every rank.")
def netfit(
    min_kb: float,
    max_mb: float | None,
    reps: int,
    stat: str,
    max_message_s: float,
    peer: int | None,
    exchange: bool,
    allreduce: bool,
    allreduce_mb: float,
    allreduce_in_flight: int,
    concurrent: bool,
    comm_timeout: float,
    out: str | None,
    refit: str | None,
    verbose: bool,
) -> None:
    """Fit the network: ping-pong (alpha, beta) between two ranks and allreduce at the
    launched size. Run under mpiexec/srun with >= 2 ranks (``--refit``: none needed)."""
    if refit is not None:
        return _refit(refit, out)
    if not launched_by_mpi():
        raise click.UsageError("netfit needs >= 2 ranks: mpiexec -n 2 gossipgrad netfit")
    comm = init(comm_timeout, verbose, configure=True)
    if comm.size < 2:
        raise click.UsageError(
            f"netfit needs >= 2 ranks, got {comm.size}: mpiexec -n 2 gossipgrad netfit"
        )
    if peer is not None and peer >= comm.size:
        raise click.BadParameter(f"must be a rank < {comm.size}, got {peer}", param_hint="--peer")
    # Lazy: importing comm.mpi initialises MPI, which only a launched job may do.
    from gossipgrad.comm.mpi import library_version

    try:
        result = measure_network(
            comm,
            min_bytes=round(min_kb * 1024),
            max_bytes=None if max_mb is None else round(max_mb * 2**20),
            reps=reps,
            peer=peer,
            max_message_s=max_message_s,
            exchange=exchange,
            allreduce=allreduce,
            concurrent=concurrent,
            stat=stat,
            source=" ".join(library_version().split()),
            allreduce_bytes=round(allreduce_mb * 2**20),
            allreduce_in_flight=allreduce_in_flight,
        )
    except (CommError, ValueError) as exc:
        abort_job(comm, f"rank {comm.rank}: netfit: {exc}")
    if comm.rank != 0:
        return
    write_output(json.dumps(result.to_json(), indent=2), out)
    log.info("%s", _summary(result))
    _warn_poor_fits(result)


def _warn_poor_fits(result: NetfitResult) -> None:
    """One warning per sweep that could not be fitted or fits its line poorly."""
    for name, sweep in (
        ("ping-pong", result.pingpong),
        ("exchange", result.exchange),
        ("allreduce", result.allreduce),
        ("allreduce in flight", result.allreduce_in_flight),
        ("concurrent", result.concurrent),
    ):
        if sweep is not None and sweep.problem is not None:
            log.warning("%s not fitted: %s", name, sweep.problem)
        elif sweep is not None and sweep.fit is not None and sweep.fit.r2 < POOR_R2:
            log.warning("%s fit is poor (R^2 %.3f): %s", name, sweep.fit.r2, _outliers(sweep))


def _refit(path: str, out: str | None) -> None:
    """``--refit``: the saved document's fits recomputed from its recorded times."""
    try:
        saved = load_document(path)
        doc = refit_network(saved, where=path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    write_output(json.dumps(doc, indent=2), out)
    old, new = saved["p2p"], doc["p2p"]
    click.echo(
        f"refit {path}: p2p {_gbit(old)} -> {_gbit(new)} Gbit/s, alpha "
        f"{old['alpha_s'] * 1e6:.1f} -> {new['alpha_s'] * 1e6:.1f} us, R^2 "
        f"{old['r2']:.3f} -> {new['r2']:.3f}",
        err=True,
    )


def _gbit(fit: dict) -> str:
    return f"{8 / fit['beta_s_per_byte'] / 1e9:.3g}"


def _outliers(sweep: Sweep) -> str:
    bad = [
        f"{n} B took {t * 1e6:.1f} us, {t / sweep.fit.seconds(n):.2g}x the line"
        for n, t in zip(sweep.nbytes, sweep.seconds, strict=True)
        if not 1 / 1.5 < t / sweep.fit.seconds(n) < 1.5
    ]
    return ("; ".join(bad) or "no point is off the line by more than 1.5x") + (
        ". Slow outliers usually mean other processes competing for the CPUs or the network: "
        "rerun on an idle machine, with more --reps, or with --stat min"
    )


def _summary(result: NetfitResult) -> str:
    p2p = result.network.p2p
    line = (
        f"p2p (ranks 0<->{result.peer}): alpha {p2p.alpha_s * 1e6:.2f} us, "
        f"{1e-9 / p2p.beta_s_per_byte:.2f} GB/s, R^2 {p2p.r2:.4f}"
    )
    if result.duplex is not None:
        line += f"; exchange duplex {result.duplex:.2f}"
    ar = result.network.allreduce
    if ar is not None:
        line += (
            f"; allreduce at {ar.size}: alpha {ar.alpha_s * 1e6:.2f} us, "
            f"{1e-9 / ar.beta_s_per_byte:.2f} GB/s, R^2 {ar.r2:.4f}"
        )
    ark = result.network.allreduce_in_flight
    if ark is not None:
        line += (
            f"; {ark.in_flight} allreduces in flight: {1e-9 / ark.beta_s_per_byte:.2f} GB/s "
            f"each, R^2 {ark.r2:.4f}"
        )
    cc = result.network.concurrent
    if cc is not None:
        line += (
            f"; all {cc.size} ranks sending at once: {1e-9 / cc.beta_s_per_byte:.2f} GB/s "
            f"per rank, R^2 {cc.r2:.4f}"
        )
    return line + f"; {result.network.ranks_per_node} rank(s) per node"

"""``gossipgrad simulate``: many virtual ranks in one process, through the runtime's code.

    gossipgrad simulate --size 256 --task templates:100000 --global-batch 1024 \\
        --strategy gossip --partition sorted --epochs 5 --out run.jsonl
    mpiexec -n 4 gossipgrad simulate --engine ranks --task digits --steps 50 --save real.npz

Prints one JSON object per step (``--out -``; default: only the summary) and the summary
last; ``--save`` keeps every rank's losses and final parameters (``.npz``). Under a
launcher with ``--engine ranks`` every rank is one real rank of the job (the check that
the simulator and the runtime agree). What it runs: :mod:`gossipgrad.tools.simulate`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from gossipgrad.cli.options import COMM_TIMEOUT


def _stragglers(_ctx: Any, _param: Any, values: tuple[str, ...]) -> tuple[tuple[int, float], ...]:
    out = []
    for v in values:
        rank, sep, factor = v.partition(":")
        try:
            out.append((int(rank), float(factor)))
        except ValueError:
            raise click.BadParameter(
                f"{v!r}: give RANK:FACTOR, e.g. 3:2 (rank 3 computes twice as slowly)",
                param_hint="--straggler",
            ) from None
        if not sep:
            raise click.BadParameter(f"{v!r}: give RANK:FACTOR", param_hint="--straggler")
    return tuple(out)


@click.command("simulate")
@click.option("--size", type=int, default=0, help="Virtual ranks (under a launcher: the launch's).")
@click.option(
    "--task", default="templates", show_default=True, help="templates[:SAMPLES] or digits."
)
@click.option("--hidden", type=int, default=128, show_default=True, help="The MLP's width.")
@click.option("--steps", type=int, default=0, help="Steps (0: --epochs).")
@click.option("--epochs", type=float, default=1.0, show_default=True)
@click.option("--batch", type=int, default=0, help="Samples per rank and step.")
@click.option("--global-batch", type=int, default=0, help="Samples per step, all ranks.")
@click.option(
    "--lr-scale", type=click.Choice(["none", "linear", "sqrt"]), default="none", show_default=True
)
@click.option("--lr-batch", type=int, default=0, help="Global batch --lr is meant for.")
@click.option("--optimizer", type=click.Choice(["sgd", "adam", "adamw"]), default="sgd")
@click.option("--lr", type=float, default=0.1, show_default=True)
@click.option("--momentum", type=float, default=0.9, show_default=True)
@click.option("--weight-decay", type=float, default=0.0, show_default=True)
@click.option("--warmup-epochs", type=float, default=0.0, show_default=True)
@click.option("--strategy", default="gossip", show_default=True)
@click.option("--mix", type=click.Choice(["param", "grad"]), default=None)
@click.option("--topology", default="auto", show_default=True)
@click.option(
    "--timing",
    default=None,
    help="lockstep (the default), stale, or lag:S, as train --timing (local:H and early are "
    "not simulated).",
)
@click.option("--staleness", type=int, default=None, help="Older spelling: 1 is --timing stale.")
@click.option("--max-lag", type=int, default=None, help="Older spelling: S is --timing lag:S.")
@click.option(
    "--delays", default=None, help="Fixed lag pattern: const:K, cycle:K1,K2,..., random:SEED."
)
@click.option("--sync-every", type=int, default=0, show_default=True)
@click.option("--sync", type=click.Choice(["auto", "adaptive", "off"]), default="auto")
@click.option("--wire", default="fp32", show_default=True)
@click.option("--rule", default="average", show_default=True)
@click.option("--partition", default="iid", show_default=True, help="iid, sorted, dirichlet:ALPHA.")
@click.option("--shuffle/--no-shuffle", default=False, show_default=True)
@click.option("--shuffle-every", type=int, default=2, show_default=True)
@click.option("--shuffle-samples", type=int, default=8, show_default=True)
@click.option("--compute-ms", type=float, default=100.0, show_default=True, help="One rank's step.")
@click.option(
    "--profile", "profile_path", default=None, help="A planner profile (gossipgrad profile)."
)
@click.option("--network", "network_path", default=None, help="A netfit (gossipgrad netfit).")
@click.option("--link-gbit", type=float, default=10.0, show_default=True)
@click.option("--latency-us", type=float, default=20.0, show_default=True)
@click.option("--jitter", type=float, default=0.0, show_default=True, help="Compute's CV.")
@click.option("--straggler", multiple=True, callback=_stragglers, help="RANK:FACTOR (repeat).")
@click.option("--eval-every", type=int, default=0, help="Steps between evaluations (0: epochs).")
@click.option("--rank-eval", type=int, default=32, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--label", default=None, help="The run's name in its records (default: strategy).")
@click.option("--engine", type=click.Choice(["stack", "ranks"]), default="stack", show_default=True)
@click.option("--threads", type=int, default=0, help="torch threads (0: torch's default).")
@click.option("--out", default=None, help="JSON lines of every step (- for stdout).")
@click.option("--save", default=None, help="An .npz of the losses and final parameters.")
@click.option("--progress/--no-progress", default=True, show_default=True)
@COMM_TIMEOUT
def simulate(**kw: Any) -> None:
    """Simulate a data-parallel job on many ranks (gossip, allreduce, local ...)."""
    import torch

    from gossipgrad.startup import under_launcher
    from gossipgrad.tools.simulate import simulate as run
    from gossipgrad.tools.simulate.tasks import mlp, task_named

    threads = kw.pop("threads")
    if threads:
        torch.set_num_threads(threads)
    comm = None
    timeout = kw.pop("comm_timeout")
    if under_launcher():
        if kw["engine"] != "ranks":
            raise click.UsageError("under a launcher give --engine ranks (one rank a process)")
        from gossipgrad.runtime import init

        comm = init(timeout)
        kw["size"] = kw["size"] or comm.size
    if kw["size"] < 1:
        raise click.UsageError("give --size N (the virtual ranks)")
    try:
        task = task_named(kw.pop("task"))
        hidden = kw.pop("hidden")
        clock = _clock(kw)
        out, save, progress = kw.pop("out"), kw.pop("save"), kw.pop("progress")
        size = kw.pop("size")
        result = run(
            lambda: mlp(task, hidden),
            task,
            size,
            clock=clock,
            out=out,
            progress=progress and (comm is None or comm.rank == 0),
            comm=comm,
            **{k: v for k, v in kw.items() if v is not None},
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if result is None:  # a rank other than 0
        return
    if save:
        import numpy as np

        np.savez(
            save,
            losses=result.losses,
            ranks=result.ranks.numpy(),
            consensus=result.consensus.numpy(),
        )
    if out != "-":
        print(json.dumps({"event": "summary", **result.summary}, default=str), file=sys.stdout)


def _clock(kw: dict[str, Any]) -> Any:
    """The clock's options, taken out of ``kw``."""
    from gossipgrad.tools.plan.formats import NetworkFit, Profile
    from gossipgrad.tools.simulate import ClockOptions

    profile, network = kw.pop("profile_path"), kw.pop("network_path")
    return ClockOptions(
        compute_s=kw.pop("compute_ms") / 1e3,
        profile=Profile.load(profile) if profile else None,
        network=NetworkFit.load(network) if network else None,
        link_gbit=kw.pop("link_gbit"),
        latency_us=kw.pop("latency_us"),
        jitter=kw.pop("jitter"),
        stragglers=kw.pop("straggler"),
        seed=kw["seed"],
    )

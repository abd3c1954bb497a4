"""``gossipgrad bench shuffle``: step time with the background shuffle on versus off.

    mpiexec -n 4 gossipgrad bench shuffle --steps 300 --reps 3

Both settings train the same job in the same launch, alternating, ``reps`` times each; the
JSON reports the median seconds per step of each, their ratio and the median of the
back-to-back pairs' ratios (target <= 1.05).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import click

from gossipgrad.comm.base import Communicator
from gossipgrad.engine.config import TrainConfig
from gossipgrad.options import ShuffleOptions


def measure(comm: Communicator, base: TrainConfig, reps: int) -> dict[str, Any]:
    """``reps`` pairs of runs, off/on then on/off alternately (a drifting load falls on
    both); ``ratio`` is on/off of the medians, ``ratio_paired`` the median of the pairs'
    ratios (the steadier figure on a shared machine)."""
    from gossipgrad.engine.trainer import train

    times: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(reps):
        for on in (False, True) if rep % 2 == 0 else (True, False):
            cfg = base.replace(shuffle=on, progress=False, metrics_out=None)
            summary = train(cfg, comm)
            times[on].append(summary["wall_seconds"] / summary["steps"])
    on, off = statistics.median(times[True]), statistics.median(times[False])
    paired = statistics.median(a / b for a, b in zip(times[True], times[False], strict=True))
    return {"benchmark": "shuffle", "size": comm.size, "steps": base.optim.max_steps,
            "reps": reps, "shuffle_samples": base.shuffle.shuffle_samples,
            "shuffle_every": base.shuffle.shuffle_every,
            "step_s_shuffle_on": on, "step_s_shuffle_off": off, "ratio": on / off,
            "ratio_paired": paired, "target_ratio": 1.05, "samples_on": times[True],
            "samples_off": times[False]}


@click.command("shuffle")
@click.option("--steps", type=int, default=300, show_default=True, help="Steps per run.")
@click.option("--reps", type=int, default=3, show_default=True, help="Runs of each setting.")
@click.option("--samples", type=int, default=ShuffleOptions().shuffle_samples, show_default=True,
              help="--shuffle-samples.")
@click.option("--every", type=int, default=ShuffleOptions().shuffle_every, show_default=True,
              help="--shuffle-every.")
@click.option("--arch", default="mlp", show_default=True)
@click.option("--hidden", type=int, default=0, show_default=True)
def shuffle(steps: int, reps: int, samples: int, every: int, arch: str, hidden: int) -> None:
    """Step time with the sample shuffle on vs off (JSON on rank 0)."""
    import logging

    from gossipgrad.runtime import init

    comm = init()
    logging.getLogger("gossipgrad").setLevel(logging.WARNING)
    base = TrainConfig.from_flags(arch=arch, hidden=hidden, epochs=10_000, max_steps=steps,
                                  shuffle_samples=samples, shuffle_every=every,
                                  eval_every=10_000)
    result = measure(comm, base, reps)
    if comm.rank == 0:
        click.echo(json.dumps(result))

"""What ``gossipgrad bench shuffle`` runs: step time with the background shuffle on versus off.

    mpiexec -n 4 gossipgrad bench shuffle --steps 300 --reps 3

Both settings train the same job in the same launch, alternating, ``reps`` times each; the
JSON reports the median seconds per step of each, their ratio and the median of the
back-to-back pairs' ratios (target <= 1.05).
"""

from __future__ import annotations

import statistics
from typing import Any

from gossipgrad.comm.base import Communicator
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.trainer import train


def measure(comm: Communicator, base: TrainConfig, reps: int) -> dict[str, Any]:
    """``reps`` pairs of runs, off/on then on/off alternately (a drifting load falls on
    both); ``ratio`` is on/off of the medians, ``ratio_paired`` the median of the pairs'
    ratios (the steadier figure on a shared machine)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(reps):
        for on in (False, True) if rep % 2 == 0 else (True, False):
            cfg = base.replace(shuffle=on, progress=False, metrics_out=None)
            summary = train(cfg, comm)
            times[on].append(summary["wall_seconds"] / summary["steps"])
    on, off = statistics.median(times[True]), statistics.median(times[False])
    paired = statistics.median(a / b for a, b in zip(times[True], times[False], strict=True))
    return {
        "benchmark": "shuffle",
        "size": comm.size,
        "steps": base.optim.max_steps,
        "reps": reps,
        "shuffle_samples": base.shuffle.shuffle_samples,
        "shuffle_every": base.shuffle.shuffle_every,
        "step_s_shuffle_on": on,
        "step_s_shuffle_off": off,
        "ratio": on / off,
        "ratio_paired": paired,
        "target_ratio": 1.05,
        "samples_on": times[True],
        "samples_off": times[False],
    }

"""What ``gossipgrad schedule --mixing`` prints: steps of pure mixing each schedule needs.

    gossipgrad schedule --size 6 --mixing --tol 1e-6

Pure (one process, no transport): every topology that runs at ``size`` mixes the same
random vectors (:mod:`gossipgrad.comm.schedule_mixing`); the record gives, per topology,
the steps until the relative error is at most ``tol``, its period and the steps after which
it is exact (None where it only contracts), and the share of rank-steps spent idle.
"""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.schedule import (
    Schedule,
    best_exact_topology,
    is_power_of_two,
    resolve_topology,
)
from gossipgrad.comm.schedule_mixing import mix_error, steps_to
from gossipgrad.options import Topology


def mixing_record(
    size: int, tol: float, dim: int = 16, seed: int = 0, rotate: bool = True
) -> dict[str, Any]:
    """The record for ``size`` ranks (schedules and vectors both from ``seed``)."""
    topologies = [Topology.DISSEMINATION, Topology.BASE2]
    if is_power_of_two(size):
        topologies.insert(0, Topology.HYPERCUBE)
    rows = []
    for topo in topologies:
        sched = Schedule(size, topo, seed, rotate=rotate)
        period = sched.period
        idle = sum(p is not None and p.idle for row in sched.table(period) for p in row)
        rows.append(
            {
                "topology": topo.value,
                "period": period,
                "exact_steps": sched.exact_steps,
                "steps_to_tol": steps_to(sched, tol, dim, seed),
                "error_after_period": mix_error(sched, period, dim, seed)[-1],
                "idle_fraction": idle / (size * period) if period else 0.0,
            }
        )
    return {
        "benchmark": "schedule-mixing",
        "size": size,
        "tol": tol,
        "dim": dim,
        "seed": seed,
        "rotate": rotate,
        "auto": resolve_topology(Topology.AUTO, size).value,
        "best_exact": best_exact_topology(size).value,
        "topologies": rows,
    }

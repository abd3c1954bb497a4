"""Pure mixing along a schedule, simulated: how fast its steps bring random vectors to their
mean. PURE: numpy only, no transport (the engine's exchange does the real thing).

    >>> from gossipgrad.comm.schedule import Schedule
    >>> steps_to(Schedule(6, "base2"), 1e-6), steps_to(Schedule(6, "dissemination"), 1e-6)
    (4, 23)

Every rank starts from its own standard normal vector (seeded) and each step applies the
schedule's mixing rule ``x = (1 - weight) * x + weight * x_from_src`` on all ranks at
once, an idle rank keeping its value. The error after ``t`` steps is
``||X_t - mean||_F / ||X_0 - mean||_F`` over all ranks, ``mean`` being the initial mean
(mixing keeps it, so this also catches a schedule that moves the mean).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count, islice, repeat
from typing import Any

import numpy as np

from gossipgrad.comm.schedule import Schedule, best_exact_topology, resolve_topology
from gossipgrad.registry import TOPOLOGIES

__all__ = ["EXACT_TOL", "exactness_problems", "mix_error", "mixing_record", "steps_to"]

EXACT_TOL = 1e-12
"""Relative error under which a pass of pure mixing counts as the exact mean."""


def mix_error(
    schedule: Schedule, steps: int, dim: int = 16, seed: int = 0, start: int = 0
) -> list[float]:
    """Relative errors after 0, 1, ..., ``steps`` steps of pure mixing from step ``start``
    (``errors[0] == 1.0``; all 0.0 for one rank, which is its own mean)."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    return list(islice(_errors(schedule, dim, seed, start), steps + 1))


def steps_to(
    schedule: Schedule, tol: float, dim: int = 16, seed: int = 0, max_steps: int = 10_000
) -> int | None:
    """The fewest steps after which :func:`mix_error` is at most ``tol``, or None when
    ``max_steps`` steps do not get there."""
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    errors = islice(_errors(schedule, dim, seed, 0), max_steps + 1)
    return next((t for t, e in enumerate(errors) if e <= tol), None)


def exactness_problems(schedule: Schedule, steps: int, tol: float = EXACT_TOL) -> list[str]:
    """Where the schedule claims ``exact_steps`` but a pass of pure mixing that starts at a
    period boundary within the first ``steps`` steps ends more than ``tol`` from the mean
    (empty when sound, or when the schedule claims no exactness)."""
    exact = schedule.exact_steps
    if exact is None:
        return []
    problems = []
    for first in range(0, max(1, steps - exact + 1), max(1, schedule.period)):
        error = mix_error(schedule, exact, seed=first, start=first)[-1]
        if error > tol:
            problems.append(
                f"steps {first}..{first + exact - 1}: pure mixing ends {error:.2e} "
                f"(relative) from the mean, not exact (> {tol:g})"
            )
    return problems


def _errors(schedule: Schedule, dim: int, seed: int, start: int) -> Iterator[float]:
    """The relative error before step ``start``, then after every step, without end."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if schedule.size == 1:
        yield from repeat(0.0)
        return
    x = np.random.default_rng(seed).standard_normal((schedule.size, dim))
    mean = x.mean(axis=0)
    initial = np.linalg.norm(x - mean)
    yield 1.0
    for t in count(start):
        row = [schedule.peers(r, t) for r in range(schedule.size)]
        src = np.array([p.src for p in row])
        weight = np.array([p.weight for p in row])[:, None]
        x = (1.0 - weight) * x + weight * x[src]
        yield float(np.linalg.norm(x - mean) / initial)


def runnable_topologies(size: int) -> list[str]:
    """Every registered topology that runs at ``size`` as itself (not ``auto``, which picks
    another), in registration order.

        >>> runnable_topologies(6)[:2], "hypercube" in runnable_topologies(8)
        (['dissemination', 'base2'], True)
    """
    out = []
    for name in TOPOLOGIES.names():
        spec = TOPOLOGIES.get(name)
        if spec.resolve(size) is spec and spec.refusal(size) is None:
            out.append(name)
    return out


def mixing_record(
    size: int, tol: float, dim: int = 16, seed: int = 0, rotate: bool = True
) -> dict[str, Any]:
    """The record for ``size`` ranks (schedules and vectors both from ``seed``)."""
    rows = []
    for topo in runnable_topologies(size):
        sched = Schedule(size, topo, seed, rotate=rotate)
        period = sched.period
        idle = sum(p is not None and p.idle for row in sched.table(period) for p in row)
        rows.append(
            {
                "topology": topo,
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
        "auto": resolve_topology("auto", size).name,
        "best_exact": best_exact_topology(size),
        "topologies": rows,
    }

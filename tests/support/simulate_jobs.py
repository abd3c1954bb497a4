"""The jobs the simulator's agreement tests run on both sides: the ``stack`` engine in the
test process, and real ranks (``tests/support/scripts/simulate_agreement.py`` under
``mpiexec``, or threads). Small on purpose: a tiny MLP on a slice of the templates task,
a dozen steps, an evaluation in the middle."""

from __future__ import annotations

from typing import Any

import numpy as np

from gossipgrad.tools.simulate import simulate, tasks

SIZES = (2, 4, 6, 8)
STEPS = 8

#: name -> the job's options: every strategy and timing the agreement covers.
JOBS: dict[str, dict[str, Any]] = {
    "gossip-param": {"strategy": "gossip", "mix": "param"},
    "gossip-grad": {"strategy": "gossip", "mix": "grad", "monitor_every": 4},
    "allreduce": {"strategy": "allreduce"},
    "local": {"strategy": "local", "sync_every": 5},
    "lag-param": {"strategy": "gossip", "mix": "param", "max_lag": 2, "delays": "cycle:0,2,1"},
    "lag-grad": {
        "strategy": "gossip",
        "mix": "grad",
        "max_lag": 2,
        "staleness": 1,
        "delays": "random:7",
    },
}


def task() -> tasks.Task:
    return tasks.templates(samples=2600)


def run(name: str, size: int, engine: str, comm: Any = None, data: Any = None):
    """Job ``name`` at ``size`` ranks on ``engine`` (``comm``: this process's rank of it)."""
    data = data if data is not None else task()
    return simulate(
        lambda: tasks.mlp(data, 16),
        data,
        size,
        engine=engine,
        comm=comm,
        batch=6,
        steps=STEPS,
        eval_every=4,
        lr=0.05,
        partition="sorted",
        shuffle=True,
        seed=3,
        **JOBS[name],
    )


def arrays(sim: Any) -> dict[str, np.ndarray]:
    """What the agreement compares: every rank's loss at every step, every rank's final
    parameters and the final merge."""
    return {
        "losses": sim.losses,
        "ranks": sim.ranks.numpy(),
        "consensus": sim.consensus.numpy(),
    }

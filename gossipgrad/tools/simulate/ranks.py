"""The ``ranks`` engine: the runtime itself, one ``DistributedOptimizer`` per rank.

Every rank builds the job's model and optimizer and wraps them in the strategy's real
optimizer over a communicator: MPI's under a launcher (``mpiexec -n N gossipgrad simulate
--engine ranks ...``), else ``size`` threads of one process on the thread world
(:class:`gossipgrad.comm.local.LocalWorld`). The loop is ``gossipgrad train``'s step with
the job's batches: learning rate, ``zero_grad``, forward, backward, ``step()`` (or
``skip_step()`` where the clock says a rank skipped to catch up), then the shuffle's
boundary. Under bounded lag the frames arrive when the job's delay pattern says
(:class:`~gossipgrad.tools.simulate.gate.Gate`). Rank 0 records; the others send it their
losses every step (one allreduce) and their parameters at evaluations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from gossipgrad.tools.simulate.clock import Timeline
from gossipgrad.tools.simulate.gate import Gate
from gossipgrad.tools.simulate.job import Job
from gossipgrad.tools.simulate.record import Recorder
from gossipgrad.tools.simulate.runtime import (
    DEFAULT_TIMEOUT_S,
    allreduce_,
    build_optimizer,
    consensus_distance,
    run_ranks,
)

RUN_LIMIT_S = 7 * 24 * 3600.0
"""The thread world's limit on a whole run (its waits keep the runtime's deadline)."""


def run_threads(job: Job, timeline: Timeline, recorder_args: dict[str, Any]) -> dict[str, Any]:
    """The job on ``job.size`` thread-ranks of one process; rank 0's result."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # size ranks share this process's cores
    try:
        return run_ranks(
            job.size,
            run_rank,
            job,
            timeline,
            recorder_args,
            timeout=RUN_LIMIT_S,
            comm_timeout=DEFAULT_TIMEOUT_S,
        )[0]
    finally:
        torch.set_num_threads(threads)


def run_rank(
    comm: Any, job: Job, timeline: Timeline, recorder_args: dict[str, Any]
) -> dict[str, Any] | None:
    """One rank's part of the job (collective); rank 0 returns the run's outcome."""
    if comm.size != job.size:
        raise ValueError(
            f"the job is for {job.size} ranks but {comm.size} were launched; "
            f"launch with mpiexec -n {job.size} (or give --size {comm.size})"
        )
    model = job.build_model()
    recorder = (
        Recorder(job, timeline, job.build_model(), **recorder_args) if comm.rank == 0 else None
    )
    wire: Any = comm
    if job.exchange.max_lag:
        wire = Gate(comm, timeline.delay)
    opt = build_optimizer(job.optimizer(model.parameters()), model, wire, job.exchange)
    if isinstance(wire, Gate):  # a drain (a global average, close) delivers every frame
        opt.drain = _opened(opt.drain, wire)
    shards = job.shards()
    skipped = timeline.skipped
    names = [n for n, _ in model.named_parameters()]
    evals = job.eval_steps()  # the same on every rank
    for t in range(job.steps):
        lr = job.lr(t)
        if isinstance(wire, Gate):
            wire.now = t
        skip = skipped is not None and bool(skipped[t, comm.rank])
        loss = _step(opt, model, job, shards.batch(t)[comm.rank], lr, skip)
        shards.on_step(t)
        losses = _gathered(comm, np.array([loss]))[:, 0]
        dist = consensus_distance(model, comm)
        stacked = _stacked(comm, model, names) if t + 1 in evals else None
        if recorder is not None:
            recorder.step(t, losses, lr, dist, _syncs(opt, job, t + 1), stacked)
    if isinstance(wire, Gate):
        wire.now = math.inf  # drain, average and close deliver every frame
    opt.drain()
    ranks = _gathered(comm, _flat(model).numpy())
    opt.synchronize()
    syncs = _syncs(opt, job, job.steps)
    consensus = _flat(model).clone()  # before close: its join may take zero-steps
    opt.close()
    if recorder is None:
        return None
    return {
        "ranks": torch.from_numpy(ranks).float(),
        "consensus": consensus,
        "syncs": syncs,
        "recorder": recorder,
    }


def _step(
    opt: Any, model: torch.nn.Module, job: Job, ids: np.ndarray, lr: float, skip: bool
) -> float:
    """``gossipgrad train``'s step on the samples ``ids`` (a skipped one computes
    nothing); this rank's loss (NaN when skipped)."""
    for group in opt.param_groups:
        group["lr"] = lr
    if skip:
        opt.skip_step()
        return math.nan
    index = torch.from_numpy(ids)
    opt.zero_grad()
    value = job.loss_fn(model(job.task.train_x[index]), job.task.train_y[index])
    value.backward()
    opt.step()
    return float(value.detach())


def _opened(drain: Any, gate: Gate) -> Any:
    def opened() -> None:
        with gate.open():
            drain()

    return opened


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _gathered(comm: Any, mine: np.ndarray) -> np.ndarray:
    """``[size, len(mine)]``: every rank's ``mine`` (an allreduce of zeros but one row:
    adding zeros is exact, so every value arrives bit for bit)."""
    rows = np.zeros((comm.size, len(mine)), dtype=np.float64)
    rows[comm.rank] = mine
    if comm.size > 1:
        allreduce_(comm, rows.reshape(-1), what="simulator records")
    return rows


def _stacked(comm: Any, model: torch.nn.Module, names: list[str]) -> dict[str, torch.Tensor]:
    rows = torch.from_numpy(_gathered(comm, _flat(model).numpy())).float()
    out, off = {}, 0
    for n, p in zip(names, model.parameters(), strict=True):
        out[n] = rows[:, off : off + p.numel()].reshape(comm.size, *p.shape)
        off += p.numel()
    return {n: v for n, v in out.items() if dict(model.named_parameters())[n].requires_grad}


def _syncs(opt: Any, job: Job, done: int) -> int:
    """Global averages so far: the monitor's adaptive ones and every ``sync_every``."""
    monitor = getattr(opt, "monitor", None)
    adaptive = int(getattr(monitor, "syncs", 0)) if monitor is not None else 0
    every = job.exchange.sync_every
    return adaptive + (done // every if every else 0)

"""Many virtual ranks in one process, through the runtime's own code (``gossipgrad
simulate``; the library entry is :func:`simulate`: the runtime never imports a tool, so
there is no ``gossipgrad.simulate``).

    import torch
    from gossipgrad.tools.simulate import simulate, tasks

    task = tasks.templates(samples=20_000)
    run = simulate(lambda: tasks.mlp(task), task, size=256, global_batch=1024,
                   strategy="gossip", mix="param", partition="sorted", epochs=5, lr=0.1)
    run.records[-1]["accuracy"], run.summary["mean_step_s"]

Two engines run the same job and are held equal by the tests: ``stack`` keeps every
rank's parameters stacked (``[size, ...]`` a tensor), runs forward and backward of all
ranks at once and one elementwise torch optimizer over the stack, with the schedule, the
mixing rule and the codec of the runtime (:mod:`.stackrun`); ``ranks`` runs one real
``DistributedOptimizer`` per rank, as threads on the thread world or as processes under
``mpiexec`` (:mod:`.ranks`). A simulated clock (:mod:`.clock`, :mod:`.lagclock`) gives
every rank's step times from a compute profile or distribution and the planner's
network model; under bounded lag it also decides when frames arrive, unless a fixed
``delays`` pattern does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import IO, Any

import numpy as np
import torch

from gossipgrad.tools.simulate.clock import ClockOptions, Timeline, costs, lockstep
from gossipgrad.tools.simulate.data import Task, as_task
from gossipgrad.tools.simulate.job import Job, SimOptions, make_job
from gossipgrad.tools.simulate.lagclock import fixed_delays, lagged
from gossipgrad.tools.simulate.record import Recorder, steps_to
from gossipgrad.tools.simulate.runtime import (
    BucketLayout,
    ExchangeOptions,
    exchange_for,
    pattern_of,
    peer_table,
    schedule_for,
    timing_of,
)

__all__ = [
    "ClockOptions",
    "Simulation",
    "Task",
    "exchange_for",
    "simulate",
    "steps_to",
    "timeline_for",
    "timeline_of",
]


@dataclass
class Simulation:
    """A finished run: ``records`` (one dict a step, as the JSON lines), ``losses``
    (``[steps, size]``, NaN where a rank skipped), ``ranks`` (``[size, P]`` every rank's
    parameters at the end, in ``model.parameters()`` order, after the final drain),
    ``consensus`` (``[P]``, the final merge) and ``summary``."""

    job: dict[str, Any]
    records: list[dict[str, Any]]
    losses: np.ndarray
    ranks: torch.Tensor
    consensus: torch.Tensor
    summary: dict[str, Any]
    timeline: Timeline

    def steps_to(self, target: float, key: str = "accuracy") -> int | None:
        return steps_to(self.records, target, key)


def simulate(
    model: Callable[[], torch.nn.Module],
    data: Any,
    size: int,
    *,
    optimizer: str | Callable[[Any], torch.optim.Optimizer] | None = None,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    clock: ClockOptions | None = None,
    out: IO[str] | str | None = None,
    progress: bool = False,
    comm: Any = None,
    **options: Any,
) -> Simulation | None:
    """Run ``model`` (a factory: called once, seeded) on ``data`` over ``size`` virtual
    ranks and return the :class:`Simulation`.

    ``options``: :class:`~gossipgrad.tools.simulate.job.SimOptions` (steps, epochs, batch or
    global_batch, lr_scale, partition, shuffle, delays, eval_every, engine, seed ...), the
    optimizer's (lr, momentum, optimizer, weight_decay, warmup_epochs, nesterov: those of
    ``gossipgrad train``) and the exchange's (strategy, mix, topology, staleness,
    max_lag, sync_every, sync, wire, rule ...: :class:`gossipgrad.ExchangeOptions`).
    ``optimizer``: ``sgd``, ``adam`` or ``adamw`` (``gossipgrad train``'s), or a factory
    over a list of tensors (elementwise for the stack engine). ``clock``: the hardware
    behind the simulated times (default: 0.1 s of compute, 10 Gbit/s links). ``out``: a
    path or stream for the JSON lines. ``comm``: with ``engine="ranks"``, run this process
    as one rank of ``comm`` (under ``mpiexec``); only rank 0 gets the Simulation, the
    others None.
    """
    if isinstance(optimizer, str):
        options["optimizer"], optimizer = optimizer, None
    sim_names = {f.name for f in fields(SimOptions)}
    sim = SimOptions(size=size, **{k: v for k, v in options.items() if k in sim_names})
    rest = {k: v for k, v in options.items() if k not in sim_names}
    task = as_task(data)
    job = make_job(model, task, sim, rest, optimizer, loss_fn)
    timeline = timeline_of(job, clock or ClockOptions())
    stream, close = _stream(out, comm)
    try:
        ran = _run(job, timeline, {"out": stream, "progress": progress}, comm)
        if ran is None:  # a rank other than 0
            return None
        recorder, final = ran
        summary = recorder.finish(_final(job, final))
    finally:
        if close:
            stream.close()
    return Simulation(
        job.describe(),
        recorder.records,
        recorder.losses,
        final["ranks"],
        final["consensus"],
        summary,
        timeline,
    )


def _run(
    job: Job, timeline: Timeline, args: dict[str, Any], comm: Any
) -> tuple[Recorder, dict[str, Any]] | None:
    """The job on its engine: (rank 0's recorder, the final parameters); None elsewhere."""
    if job.sim.engine == "stack":
        from gossipgrad.tools.simulate.stackrun import StackRun

        recorder = Recorder(job, timeline, job.build_model(), **args)
        return recorder, StackRun(job, timeline).run(recorder)
    if comm is not None:
        from gossipgrad.tools.simulate.ranks import run_rank

        final = run_rank(comm, job, timeline, args)
    else:
        from gossipgrad.tools.simulate.ranks import run_threads

        final = run_threads(job, timeline, args)
    if final is None:
        return None
    return final.pop("recorder"), final


def timeline_of(job: Job, clock: ClockOptions) -> Timeline:
    """The job's clock: every rank's step ends, and under bounded lag the delay pattern
    (the job's fixed one, or the clock's) and the skipped steps."""
    layout = BucketLayout(list(job.build_model().parameters()), job.exchange.bucket_cap_bytes)
    nbytes = [b.nbytes for b in layout.buckets]
    return timeline_for(job.exchange, job.size, job.steps, nbytes, clock, job.sim.delays)


def timeline_for(
    exchange: ExchangeOptions,
    size: int,
    steps: int,
    bucket_bytes: list[int],
    clock: ClockOptions,
    delays: str | None = None,
) -> Timeline:
    """The clock of ``steps`` steps of ``exchange`` at ``size`` ranks for buckets of
    ``bucket_bytes`` (a ``clock.profile`` brings its own), without training anything:
    what the jitter studies time."""
    compute = clock.compute(steps, size)
    schedule = schedule_for(exchange, size)
    price = costs(
        clock,
        exchange.strategy,
        size,
        bucket_bytes,
        exchange.staleness,
        str(exchange.mix),
        exchange.bucket_cap_bytes,
    )
    tables = [peer_table(schedule, t) for t in range(steps)]
    if timing_of(exchange) != "lagged":
        return lockstep(compute, pattern_of(exchange), tables, price, exchange.staleness)
    src = np.stack([s for s, _, _ in tables])
    dst = np.stack([d for _, d, _ in tables])
    line = lagged(compute, src, dst, price.frame, exchange.max_lag, exchange.staleness)
    if delays is not None:
        line.delay = fixed_delays(delays, steps, size, exchange.staleness, exchange.max_lag)
        line.skipped = None
    return line


def _final(job: Job, final: dict[str, Any]) -> dict[str, Any]:
    """The summary's figures of the final merge (the consensus model)."""
    out: dict[str, Any] = {"syncs": final["syncs"]}
    task = job.task
    if task.test_x is None:
        return out
    from gossipgrad.tools.simulate.stack import accuracy

    template = job.build_model()
    params, off = {}, 0
    for n, p in template.named_parameters():
        params[n] = final["consensus"][off : off + p.numel()].view_as(p)
        off += p.numel()
    acc, loss = accuracy(template, params, task.test_x, task.test_y, job.loss_fn)
    out.update(final_accuracy=acc, final_test_loss=loss)
    return out


def _stream(out: IO[str] | str | None, comm: Any) -> tuple[IO[str] | None, bool]:
    if comm is not None and comm.rank != 0:
        return None, False
    if out is None or not isinstance(out, str):
        return out, False
    if out == "-":
        return sys.stdout, False
    return open(out, "w", encoding="utf-8"), True

"""``gossipgrad bench standin``: check the stand-in accelerator before trusting it.

    gossipgrad bench standin --profile resnet50 --dilate 10                 # one rank
    mpiexec -n 8 gossipgrad bench standin --profile resnet50 --dilate 10 --strategies local,gossip

Per strategy, ``--warmup`` untimed then ``--reps`` timed blocks of ``--steps`` steps of the
profiled model on the stand-in device (:mod:`gossipgrad.tools.devices.standin`), built through
the engine factory like any benchmark's. Per strategy the record holds:

- ``step_s`` (median over blocks of the mean step, MAX over ranks; dilated, as measured)
  and ``step_s_undilated`` (/ K); ``ratio_to_profile`` = step_s / (profile step x K at the
  batch run): for ``local`` it should be 1 within 5 % (``checks.local_step_within_5pct``);
- ``ready``: each parameter's post-accumulate-grad hook time from the start of backward,
  undilated, against the profile's ``buckets`` (the gradient-ready times the stand-in
  should reproduce): ``max_abs_error_s`` (median over steps of the worst parameter, worst
  rank), ``median_abs_error_s``, ``max_error_share_of_backward`` and ``order_agreement``
  (:func:`order_agreement`, the worst rank);
- ``cpu_s_per_step``: ``user + sys`` of the whole process (all threads: MPI progress and
  the communication thread too) per step, mean and max over ranks, and ``cpu_share``:
  the ranks on one host together over (cores x step time), 1.0 = every core busy.

``sleep_overshoot_s`` is the median lateness of a 1 ms ``time.sleep`` on rank 0: what the
device clock has to make good (see :mod:`gossipgrad.tools.devices.clock`).
"""

# Over 300 lines on purpose: one benchmark: the model builder bench strategies shares, the
# timed blocks and the record of what they measured.

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.models import build_model, loss_fn
from gossipgrad.runtime import host_share
from gossipgrad.strategies import build_optimizer, options_for
from gossipgrad.tools.bench.common import finite, link_info, max_over_ranks, median, rounded
from gossipgrad.tools.devices import Standin, StandinProfile
from gossipgrad.tools.devices.dilation import Dilation
from gossipgrad.tools.devices.standin import describe

TOLERANCE = 0.05
"""``local`` step time within this share of the profile's compute x K."""


class StandinModels:
    """Builds the profiled model on the stand-in device, once per contender.

    ``bench strategies --device standin:PROFILE`` and this benchmark share it."""

    def __init__(self, profile: str | StandinProfile, dilate: float = 1.0) -> None:
        self.profile = (
            profile if isinstance(profile, StandinProfile) else StandinProfile.load(profile)
        )
        self.dilation = Dilation(dilate)
        self.sample_shape = tuple(self.profile.input_shape)

    def build(self) -> tuple[torch.nn.Module, Standin]:
        """A fresh model patched onto its own device. Its parameters and buffers are zeros:
        a stand-in's values carry no meaning, so the model is built on the meta device and
        given zeroed memory instead of being initialised (VGG-16: 0.2 s instead of 5-10 s
        of CPU per copy)."""
        p = self.profile
        with torch.device("meta"):
            model = build_model(p.arch, self.sample_shape, p.classes, p.hidden)
        model = model.to_empty(device="cpu")
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                t.zero_()
        return model, Standin(model, p, self.dilation.factor)

    def annotate(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` (a benchmark's) with the device it ran on and, per result row with a
        ``step_s``, the undilated step time and samples per second."""
        k = self.dilation.factor
        for row in record.get("results", []):
            if row.get("step_s"):
                row["step_s_undilated"] = rounded(row["step_s"] / k)
            if row.get("samples_per_s"):
                row["samples_per_s_undilated"] = rounded(row["samples_per_s"] * k)
        record["standin"] = self.describe()
        return record

    def describe(self) -> dict[str, Any]:
        return describe(self.profile, self.dilation.factor)


class _Run:
    """One strategy's model, optimizer and the hooks that time its gradients."""

    def __init__(
        self, comm: Communicator, models: StandinModels, strategy: str, batch: int, kw: dict
    ) -> None:
        self.model, self.device = models.build()
        sgd = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        opts = options_for(strategy, **{"sync": "off", "monitor_every": 0, **kw})
        self.opt = build_optimizer(self.device.optimizer(sgd), self.model, comm, opts)
        p = models.profile
        g = torch.Generator().manual_seed(comm.rank)
        self.x = torch.randn(batch, *models.sample_shape, generator=g)
        self.y = torch.randint(0, p.classes, (batch,), generator=g)
        self.index = {id(q): i for i, q in enumerate(self.model.parameters())}
        self.marks: dict[int, float] = {}
        self.hooks = [
            q.register_post_accumulate_grad_hook(self._hook)
            for q in self.model.parameters()
            if q.requires_grad
        ]
        self.expect = {b.index: b.ready_s for b in p.planner.buckets}
        self.order = [b.index for b in p.planner.buckets]
        self.errors: list[tuple[float, float, float]] = []  # per step: max, median, order

    def _hook(self, q: torch.Tensor) -> None:
        self.marks.setdefault(self.index[id(q)], time.perf_counter())

    def step(self, record: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        self.opt.zero_grad()
        self.marks.clear()
        loss = loss_fn(self.opt.module_for_forward(self.x), self.y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        if record:
            self._ready_errors(t1)
        return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "total": t3 - t0}

    def _ready_errors(self, start: float) -> None:
        scale = self.device.scale  # dilation x batch / profile batch
        err = [
            abs((self.marks[i] - start) / scale - t)
            for i, t in self.expect.items()
            if i in self.marks
        ]
        agree = order_agreement(self.order, self.expect, self.marks)
        if err:
            self.errors.append((max(err), statistics.median(err), agree))

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        self.opt.close()
        self.device.remove()


def order_agreement(
    order: list[int], expect: dict[int, float], seen: dict[int, float], tie_s: float = 1e-9
) -> float:
    """Share of the profile's consecutive parameter pairs (in its backward order) whose
    gradients the hooks saw in that order; pairs the profile ties (weight and bias of one
    layer) count as agreeing whichever came first.

        >>> order_agreement([0, 1, 2], {0: 0.1, 1: 0.2, 2: 0.2}, {0: 1.0, 2: 2.0, 1: 3.0})
        1.0
        >>> order_agreement([0, 1], {0: 0.1, 1: 0.2}, {0: 2.0, 1: 1.0})
        0.0
    """
    pairs = [(a, b) for a, b in zip(order, order[1:], strict=False) if a in seen and b in seen]
    if not pairs:
        return 1.0
    ok = sum(expect[b] - expect[a] <= tie_s or seen[b] >= seen[a] for a, b in pairs)
    return ok / len(pairs)


def sleep_overshoot(n: int = 50, seconds: float = 1e-3) -> float:
    """Median lateness of ``time.sleep(seconds)`` on this host, now."""
    late = []
    for _ in range(n):
        t = time.perf_counter()
        time.sleep(seconds)
        late.append(time.perf_counter() - t - seconds)
    return statistics.median(late)


def run_standin(
    comm: Communicator,
    profile: str | StandinProfile,
    dilate: float = 1.0,
    strategies: tuple[str, ...] = ("local",),
    batch: int = 0,
    steps: int = 5,
    reps: int = 3,
    warmup: int = 1,
    mix: str = "param",
    bucket_mb: float = 25.0,
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if not strategies or steps < 1 or reps < 1 or warmup < 0 or batch < 0:
        raise ValueError(
            "need --strategies, --steps >= 1, --reps >= 1, --warmup >= 0, --batch >= 0"
        )
    models = StandinModels(profile, dilate)
    p, k = models.profile, models.dilation.factor
    batch = batch or p.batch_size
    torch.set_num_threads(1)  # the host computes nothing; idle intra-op threads would spin
    overshoot = sleep_overshoot()
    cores, per_host = host_share(comm)
    rows = []
    for name in strategies:
        kw: dict[str, Any] = {"bucket_mb": bucket_mb}
        if name in ("gossip", "local"):
            kw["mix"] = mix
        run = _Run(comm, models, name, batch, kw)
        try:
            rows.append(_measure(comm, run, name, steps, reps, warmup, batch, k, cores, per_host))
        finally:
            run.close()
    local = next((r for r in rows if r["strategy"] == "local"), None)
    record: dict[str, Any] = {
        "bench": "standin",
        "size": comm.size,
        "batch": batch,
        "steps": steps,
        "reps": reps,
        "warmup": warmup,
        "mix": mix,
        "host": {"cores": cores, "ranks_per_host": per_host},
        "sleep_overshoot_s": rounded(overshoot, 4),
        "profile_forward_s": p.planner.forward_s,
        "profile_backward_s": p.planner.backward_s,
        "profile_optimizer_s": p.planner.optimizer_s,
        "results": rows,
        "checks": {
            "local_step_within_5pct": None
            if local is None
            else abs(local["ratio_to_profile"] - 1) <= TOLERANCE,
            "local_ratio_to_profile": None if local is None else local["ratio_to_profile"],
        },
        **link_info(),
    }
    emu = record.get("emu_rate")
    if emu:
        record["stands_for_link"] = models.dilation.stands_for_rate(emu)
    return models.annotate(record)


def _measure(
    comm: Communicator,
    run: _Run,
    name: str,
    steps: int,
    reps: int,
    warmup: int,
    batch: int,
    k: float,
    cores: int,
    per_host: int,
) -> dict[str, Any]:
    times, cpu, phases = [], [], {"forward": [], "backward": [], "optimizer": []}
    for rep in range(warmup + reps):
        timed = rep >= warmup
        run.step(record=False)  # one untimed step per block: the exchange in flight settles
        comm.barrier()
        c0 = os.times()
        sums = dict.fromkeys(("forward", "backward", "optimizer", "total"), 0.0)
        for _ in range(steps):
            for key, v in run.step(record=timed).items():
                sums[key] += v
        c1 = os.times()
        run.opt.drain()
        if timed:
            times.append(sums["total"] / steps)
            cpu.append(max(0.0, c1.user - c0.user + c1.system - c0.system) / steps)  # no -1e-17
            for key in phases:
                phases[key].append(sums[key] / steps)
    step_s = median(max_over_ranks(comm, times))
    cpu_mean = _mean_over_ranks(comm, cpu)
    cpu_max = median(max_over_ranks(comm, cpu))
    expected = run.device.step_s()  # the profile's step x K at this batch
    errs = np.array(run.errors or [(np.nan, np.nan, np.nan)], dtype=np.float64)
    # the worst rank: largest errors, least agreement (NaN: no step recorded, -inf here)
    mine = np.nan_to_num(np.nanmedian(errs, axis=0) * [1, 1, -1], nan=-np.inf)
    worst = np.array(max_over_ranks(comm, mine.tolist())) * [1, 1, -1]
    backward = run.device.profile.planner.backward_s
    return {
        "strategy": name,
        "step_s": rounded(step_s),
        "step_s_undilated": rounded(step_s / k),
        "samples_per_s": rounded(batch * comm.size / step_s),
        "samples_per_s_undilated": rounded(batch * comm.size / step_s * k),
        "profile_step_s_dilated": rounded(expected),
        "ratio_to_profile": finite(step_s / expected),
        "phase_s": {key: rounded(median(max_over_ranks(comm, v)), 4) for key, v in phases.items()},
        "cpu_s_per_step": rounded(cpu_mean, 4),
        "cpu_s_per_step_max": rounded(cpu_max, 4),
        "cpu_share": finite(cpu_mean * per_host / (max(1, cores) * step_s), 3),
        "ready": {
            "params": len(run.expect),
            "max_abs_error_s": finite(worst[0], 4),
            "median_abs_error_s": finite(worst[1], 4),
            "max_error_share_of_backward": finite(worst[0] / backward, 3)
            if worst[0] >= 0 and backward
            else None,
            "order_agreement": finite(worst[2], 3),
        },
    }


def _mean_over_ranks(comm: Communicator, values: list[float]) -> float:
    arr = np.array([median(values)], dtype=np.float64)
    if comm.size > 1:
        allreduce_(comm, arr)
    return float(arr[0] / comm.size)

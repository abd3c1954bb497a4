"""The ``stack`` engine: a job's steps on stacked replicas, in the shell's order.

A step, as :class:`gossipgrad.engine.bucket.shell.BucketOptimizer` takes it on every rank:
forward and backward; with ``mix="grad"`` the gradients are exchanged, then the optimizer
steps; with ``mix="param"`` the optimizer steps, then the parameters are exchanged. Then
every ``sync_every`` steps a global average, else, where the strategy monitors (gossip),
every ``monitor_every`` steps the count-sketch estimate of the consensus distance
(``engine.bucket.monitor``, the runtime's sketch on every rank's parameters) and, with
adaptive averaging, a global average above the threshold. A global average first drains
what is in flight (a staleness-1 exchange is dropped; lagged frames are mixed; gradient
shares still owed get one more optimizer step). A rank that the clock says skipped a step
under bounded lag computes nothing and, with a parameter mix, takes no update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gossipgrad.tools.simulate.clock import Timeline
from gossipgrad.tools.simulate.job import Job
from gossipgrad.tools.simulate.lagmix import StackLagged
from gossipgrad.tools.simulate.mixing import Lockstep, StackMixer, Stale
from gossipgrad.tools.simulate.record import Recorder
from gossipgrad.tools.simulate.runtime import (
    CountSketch,
    Mix,
    estimate_distance,
    make_codec,
    make_rule,
    pattern_of,
    schedule_for,
    sketch_message,
    timing_of,
)
from gossipgrad.tools.simulate.stack import Replicas, bucket_spans, distance


class StackRun:
    """One job on the stack engine (see the module)."""

    def __init__(self, job: Job, timeline: Timeline) -> None:
        self.job, self.timeline = job, timeline
        self.template = job.build_model()
        self.reps = Replicas(self.template, job.size, job.optimizer, job.loss_fn)
        opts = job.exchange
        self.mix = opts.mix
        pattern = pattern_of(opts)
        self.communicates = job.size > 1 and pattern.moves
        self.lagged = timing_of(opts) == "lagged"
        schedule = schedule_for(opts, job.size)
        rule = make_rule(opts.rule)
        if self.lagged:
            if not make_codec(opts.wire).lossless:
                raise ValueError(
                    f"the stack engine runs bounded lag with a lossless wire only, not "
                    f"{opts.wire} (its frames' remainders); use engine='ranks'"
                )
            self.timing: Any = StackLagged(
                schedule, rule, str(self.mix), opts.max_lag, opts.staleness, timeline.delay
            )
        else:
            spans = bucket_spans(self.template, self.reps.names, opts.bucket_cap_bytes)
            mixer = StackMixer(
                pattern, schedule, rule, opts.wire, opts.feedback, self.reps.names, spans
            )
            self.timing = Stale(mixer) if opts.staleness else Lockstep(mixer)
        self.sync_every = opts.sync_every
        every = opts.monitor_every if opts.monitors and job.size > 1 else 0
        self.monitor_every, self.adaptive = every, opts.adaptive
        self.threshold = opts.sync_threshold
        self.sketch = None
        if every:
            self.sketch = CountSketch(list(self.template.parameters()), seed=opts.seed)
        self.syncs = 0
        self.lr = job.lr(0)

    def run(self, recorder: Recorder) -> dict[str, Any]:
        job, reps = self.job, self.reps
        shards = job.shards()
        x_all, y_all = job.task.train_x, job.task.train_y
        skipped = self.timeline.skipped
        for t in range(job.steps):
            self.lr = job.lr(t)
            ids = torch.from_numpy(shards.batch(t))
            hold = None if skipped is None else torch.from_numpy(skipped[t])
            losses = reps.forward_backward(x_all[ids], y_all[ids]).numpy().copy()
            if hold is not None and bool(hold.any()):
                rows = torch.nonzero(hold).flatten()
                for g in reps.grads:
                    g.index_fill_(0, rows, 0.0)
                losses[hold.numpy()] = np.nan
            self._exchange_and_step(t, hold)
            self._advance(t + 1)
            shards.on_step(t)
            stacked = None
            if recorder.wants_params(t + 1):
                stacked = {n: reps.params[n].detach() for n in reps.names}
            recorder.step(t, losses, self.lr, distance(reps.values), self.syncs, stacked)
        return self.finish()

    def _exchange_and_step(self, t: int, hold: torch.Tensor | None) -> None:
        reps = self.reps
        if not self.communicates:
            reps.step(self.lr)
            return
        computed = np.ones(self.job.size, bool) if hold is None else ~hold.numpy()
        if self.mix is Mix.GRAD:
            self._exchange(reps.grads, t, computed)
            reps.step(self.lr)
            return
        if self.lagged:
            self.timing.before_update(reps.grads)
        reps.step(self.lr, hold)
        self._exchange(reps.values, t, computed)

    def _exchange(self, bufs: list[torch.Tensor], t: int, computed: np.ndarray) -> None:
        if self.lagged:
            self.timing.exchange_(bufs, t, computed)
        else:
            self.timing.exchange_(bufs, t)

    def _advance(self, count: int) -> None:
        if self.sync_every and count % self.sync_every == 0:
            self.average(count)
        elif self.monitor_every and count % self.monitor_every == 0:
            if self.adaptive and self.estimate() > self.threshold:
                self.average(count)

    def estimate(self) -> float:
        """The monitor's sketched consensus distance (every rank's sketch, summed)."""
        names = [n for n, _ in self.template.named_parameters()]
        total = None
        for r in range(self.job.size):
            tensors = [
                self.reps.params[n][r].detach() if n in self.reps.params else self.reps.frozen[n]
                for n in names
            ]
            message = sketch_message(self.sketch.sketch(tensors))
            total = message if total is None else total + message
        return estimate_distance(total, self.job.size)

    def drain(self, count: int) -> None:
        """Complete what is in flight (the shell's ``drain``)."""
        if self.lagged:
            bufs = self.reps.grads if self.mix is Mix.GRAD else self.reps.values
            owed = self.timing.drain_(bufs, count)
            if owed.any():
                self.reps.step(self.lr, torch.from_numpy(~owed))
        elif self.communicates:
            self.timing.drain_(None)

    def average(self, count: int) -> None:
        """The shell's ``synchronize``: drain, then the global average."""
        self.drain(count)
        if self.lagged and self.mix is Mix.PARAM:
            self.timing.average_weights_(self.reps.values)
        self.reps.average_()
        self.syncs += 1

    def finish(self) -> dict[str, Any]:
        """Drain (as ``close`` does), keep every rank's parameters, then the final merge."""
        count = self.job.steps
        self.drain(count)
        ranks = self.reps.flat().clone()
        if self.lagged and self.mix is Mix.PARAM:
            self.timing.average_weights_(self.reps.values)
        self.reps.average_()
        return {"ranks": ranks, "consensus": self.reps.flat()[0].clone(), "syncs": self.syncs}

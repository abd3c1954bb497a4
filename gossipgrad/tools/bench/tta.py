"""``gossipgrad bench tta``: time to a target test accuracy, every strategy on one job.

    python scripts/emucluster.py run -n 8 --rate 1gbit -- gossipgrad bench tta \\
        --strategies gossip,allreduce,ddp,horovod,local --markdown tta.md --png tta.png

One launch builds one training job per strategy (same seed, so the same initial weights;
the same shards, data order, background sample shuffle, learning-rate schedule and step
seeds, through the engine's own parts) and trains them side by side: every contender
advances ``eval_every`` steps in turn, in rotating order, then its consensus model is
evaluated. So a load that drifts during the launch falls on every contender alike.
Horovod (a busy background thread, see :mod:`gossipgrad.tools.bench.strategies`) runs after the
others, alone.

Clocks. A contender's training clock runs from a barrier before its first step of a
segment to a barrier after its last one, after the exchange still in flight has been
completed (``settle``: a staleness-1 exchange is then still applied at the next step, as
without it), so it is the slowest rank's time and no exchange leaks into another
contender's segment. Evaluation is outside the clock and reported on its own
(``eval_seconds``).

Evaluation does not change training: the consensus model (the mean over ranks of the
parameters, which ``synchronize`` would produce) is built in a scratch copy, so gossip and
local keep their own parameters and how often one evaluates does not change how many steps
a strategy needs. ``local`` is therefore "train on the own shard, average when asked".
A bounded lag (``--max-lag``) is settled the same way: its frames are delivered within the
segment and mixed by the steps that follow, as frames that arrived early. The barriers still
bring the ranks together in time at each segment's end, so how far a fast rank runs ahead
acts only within the ``eval_every`` steps; ps with a lag is brought to the step (every
rank pulls the newest parameters), so its staleness too acts only within them.
With the parameter mix under a lag, ``synchronize`` computes push-sum's mean (each rank's
model weighted by its push-sum weight, frames in flight counted); the evaluation's plain
mean differs from it by about the ranks' consensus distance (small once they mix).

The learning-rate schedule is the engine's (warm-up, then cosine to zero) over ``steps``
steps at every size and for every strategy, so steps to the target compare across sizes
(what the planner's steps-to-target model fits: :mod:`gossipgrad.tools.plan.steps`).
"""

# Over 300 lines on purpose: one benchmark's side-by-side race (contenders, clock, evaluation,
# record) reads as one story.

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.data.sources import open_source
from gossipgrad.engine.consensus import average_parameters_, model_tensors
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.evaluation import evaluate
from gossipgrad.engine.run.loop import lr_at, step_seed
from gossipgrad.engine.run.trainer import make_shuffle
from gossipgrad.engine.step import train_step
from gossipgrad.inject.straggler import Straggler
from gossipgrad.models import build_model, loss_fn
from gossipgrad.strategies import build_optimizer, options_for
from gossipgrad.tools.bench.common import (
    CountingCommunicator,
    link_info,
    max_over_ranks,
    rounded,
    split_settings,
    split_variant,
    wire_tx_bytes,
)
from gossipgrad.tools.bench.strategies import ALLREDUCE_FAMILY, run_order, strategy_kwargs
from gossipgrad.tools.bench.tta_report import ratios

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TtaOptions:
    """What ``bench tta`` runs besides the job itself; validated here, naming the flags.

    Args:
        strategies: contenders, each named once (any name the engine factory knows, with
            an optional ``@block``/``@poll`` variant: :func:`bench.common.split_variant`,
            and settings of its own: ``ps:max-lag=2``, :func:`bench.common.split_settings`).
        target: the test accuracy to reach (a fraction).
        steps: the step budget, also the length of the learning-rate schedule.
        eval_every: steps between evaluations (the resolution of ``steps_to_target``).
        stop_at_target: stop a contender once it reaches the target (else it trains the
            whole budget and ``final_accuracy`` is the budget's).
        time_limit_s: stop a contender whose training clock passed this (0: no limit).
    """

    strategies: tuple[str, ...] = ("gossip", "allreduce", "ddp", "local")
    target: float = 0.9
    steps: int = 200
    eval_every: int = 2
    stop_at_target: bool = False
    time_limit_s: float = 0.0

    def __post_init__(self) -> None:
        names = list(self.strategies)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"--strategies {','.join(names)!r}: name each strategy once")
        for n in names:
            base, own = split_settings(n)  # ValueError naming --strategies
            strategy_kwargs(split_variant(base)[0], "param", 25.0, True, own=own)
        if not 0 < self.target <= 1:
            raise ValueError(f"--target must be an accuracy in (0, 1], got {self.target}")
        if self.steps < 1 or self.eval_every < 1:
            raise ValueError(
                f"--steps and --eval-every must be >= 1, got {self.steps} and {self.eval_every}"
            )
        if not self.time_limit_s >= 0:
            raise ValueError(f"--time-limit must be >= 0 seconds, got {self.time_limit_s}")


_INIT_LOCK = threading.Lock()
"""Seeding and building a model is one step even when ranks are threads of one process."""


class Contender:
    """One strategy's training job: model, optimizer, data, shuffle, clocks and curve."""

    def __init__(self, comm: Communicator, cfg: TrainConfig, name: str, budget: int) -> None:
        self.name, self.cfg, self.comm, self.budget = name, cfg, comm, budget
        base, own = split_settings(name)  # e.g. ps:max-lag=2
        self.strategy, block = split_variant(base)  # e.g. gossip@block: see bench.common
        self.source = open_source(cfg.data, rank=comm.rank, size=comm.size, seed=cfg.seed)
        with _INIT_LOCK:  # ranks as threads (tests) share torch's generator
            torch.manual_seed(cfg.seed)  # the same initial weights for every contender
            self.model = self._build()
            self.scratch = self._build()  # where the consensus model is evaluated
        sgd = torch.optim.SGD(
            self.model.parameters(),
            lr=cfg.optim.lr,
            momentum=cfg.optim.momentum,
            weight_decay=cfg.optim.weight_decay,
        )
        ex = cfg.exchange
        kw = strategy_kwargs(self.strategy, ex.mix.value, ex.bucket_mb, ex.overlap, own=own)
        self.counter = CountingCommunicator(comm, block)
        opts = options_for(self.strategy, ex, **kw)
        self.opt = build_optimizer(sgd, self.model, self.counter, opts)
        self.shuffle = None
        try:
            self.shuffle = make_shuffle(cfg, self.source, comm)
        except BaseException:
            self.opt.close()
            raise
        self.straggler = Straggler(comm.rank)
        self.batches = self._batches()
        self.step = 0
        self.segments: list[float] = []  # training seconds per segment (this rank)
        self.evals: list[tuple[int, float]] = []  # (step, accuracy) after each segment
        self.eval_s = 0.0
        self.posted = 0.0
        self.wire: float | None = 0.0 if wire_tx_bytes() is not None else None
        self.stopped = ""

    def _build(self) -> torch.nn.Module:
        return build_model(
            self.cfg.arch, self.source.in_shape, self.source.classes, self.cfg.hidden
        )

    def _batches(self) -> Any:
        epoch = 0
        while True:
            yield from self.source.train_batches(epoch)
            epoch += 1

    def train_step(self) -> None:
        """One step, as the engine's ``Run.train_step`` takes it."""
        cfg, step = self.cfg, self.step
        x, y = next(self.batches)
        torch.manual_seed(step_seed(cfg.seed, self.comm.rank, step))
        for g in self.opt.param_groups:
            g["lr"] = lr_at(cfg.optim, cfg.optim.lr, step, self.budget, self.source.steps_per_epoch)
        train_step(self.opt, x, y, loss_fn, compute=self.straggler.compute)
        if self.shuffle is not None:
            self.shuffle.on_step(step)
        self.step += 1

    def advance(self, steps: int) -> None:
        """``steps`` steps on the training clock, between barriers (see the module doc)."""
        self.comm.barrier()
        posted0, wire0 = self.counter.sent + self.counter.reduced, wire_tx_bytes()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.train_step()
        self.opt.settle()  # charged to this segment; a staleness-1 exchange still applies
        self.comm.barrier()
        self.segments.append(time.perf_counter() - t0)
        wire1 = wire_tx_bytes()
        self.posted += self.counter.sent + self.counter.reduced - posted0
        if self.wire is not None and wire0 is not None and wire1 is not None:
            self.wire += wire1 - wire0

    def evaluate(self) -> float:
        """Test accuracy of the consensus model (identical on every rank); off the clock."""
        t0 = time.perf_counter()
        model = self.model
        if self.strategy not in ALLREDUCE_FAMILY:  # identical parameters there: no average
            model = self.scratch
            with torch.no_grad():
                for s, t in zip(model_tensors(model), model_tensors(self.model), strict=True):
                    s.copy_(t)
            average_parameters_(model, self.comm)
        acc = evaluate(model, self.source, self.comm)["top1"]
        self.evals.append((self.step, acc))
        self.eval_s += time.perf_counter() - t0
        return acc

    def finished(self, opts: TtaOptions) -> bool:
        """Whether to stop (the same answer on every rank: accuracy is allreduced, and the
        clock is the MAX over ranks)."""
        if self.step >= self.budget:
            self.stopped = "budget"
        elif opts.stop_at_target and self.evals[-1][1] >= opts.target:
            self.stopped = "target"
        elif opts.time_limit_s:
            clock = np.array([sum(self.segments)], dtype=np.float64)
            if self.comm.size > 1:
                allreduce_(self.comm, clock, ReduceOp.MAX)
            if clock[0] > opts.time_limit_s:
                self.stopped = "time-limit"
        return bool(self.stopped)

    def close(self) -> None:
        try:
            if self.shuffle is not None:
                self.shuffle.stop()
        finally:
            self.opt.close()


def run_tta(comm: Communicator, cfg: TrainConfig, opts: TtaOptions) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    rows: dict[str, dict[str, Any]] = {}
    model_bytes = 0
    for names in run_order(list(opts.strategies)):
        contenders: list[Contender] = []
        try:
            for n in names:  # one by one: those built are closed if a later one fails
                cfg_n = cfg.replace(strategy=split_variant(split_settings(n)[0])[0])
                contenders.append(Contender(comm, cfg_n, n, opts.steps))
            race(contenders, opts)
            for c in contenders:
                rows[c.name] = summarize(comm, c, cfg, opts)
                model_bytes = c.opt.layout.nbytes
        finally:
            for c in contenders:
                c.close()
    record: dict[str, Any] = {
        "bench": "tta",
        "size": comm.size,
        "arch": cfg.arch,
        "hidden": cfg.hidden,
        "dataset": cfg.data.dataset,
        "batch": cfg.data.batch_size,
        "lr": cfg.optim.lr,
        "momentum": cfg.optim.momentum,
        "mix": cfg.exchange.mix.value,
        "seed": cfg.seed,
        "bucket_mb": cfg.exchange.bucket_mb,
        "target": opts.target,
        "steps": opts.steps,
        "eval_every": opts.eval_every,
        "stop_at_target": opts.stop_at_target,
        "time_limit_s": opts.time_limit_s,
        "model_bytes": model_bytes,
        "results": {n: rows[n] for n in opts.strategies},
        **link_info(),
    }
    record.update(ratios(record))
    return record


def race(contenders: list[Contender], opts: TtaOptions) -> None:
    """Evaluate every contender at step 0, then advance them ``eval_every`` steps each in
    rotating order, evaluating after each segment, until every one has finished."""
    for c in contenders:
        c.evaluate()
    active, turn = list(contenders), 0
    while active:
        k = turn % len(active)
        for c in active[k:] + active[:k]:
            c.advance(min(opts.eval_every, c.budget - c.step))
            c.evaluate()
        active = [c for c in active if not c.finished(opts)]
        turn += 1
    if contenders and contenders[0].comm.rank == 0:
        log.info("tta: %s done", ", ".join(f"{c.name} ({c.stopped})" for c in contenders))


def summarize(
    comm: Communicator, c: Contender, cfg: TrainConfig, opts: TtaOptions
) -> dict[str, Any]:
    """One strategy's row; times are MAX over ranks, bytes rank 0's."""
    clock = np.cumsum([0.0] + max_over_ranks(comm, c.segments))
    eval_s = max_over_ranks(comm, [c.eval_s])[0]
    curve = [
        [rounded(float(t), 5), step, rounded(acc, 5)]
        for t, (step, acc) in zip(clock, c.evals, strict=True)
    ]
    hit = next((p for p in curve if p[2] >= opts.target), None)
    steps = max(1, c.step)
    samples_per_step = cfg.data.batch_size * comm.size
    return {
        "strategy": c.name,
        "seconds_to_target": hit[0] if hit else None,
        "steps_to_target": hit[1] if hit else None,
        "samples_to_target": hit[1] * samples_per_step if hit else None,
        "final_accuracy": curve[-1][2],
        "best_accuracy": max(p[2] for p in curve),
        "steps": c.step,
        "train_seconds": rounded(float(clock[-1]), 5),
        "step_s": rounded(float(clock[-1]) / steps, 5),
        "eval_seconds": rounded(eval_s, 5),
        "evaluations": len(curve),
        "stopped": c.stopped,
        "posted_bytes_per_step": round(c.posted / steps, 1),
        "theory_bytes_per_step": round(float(c.opt.bytes_sent_per_step()), 1),
        "wire_bytes_per_step": round(c.wire / steps, 1) if c.wire is not None else None,
        "curve": curve,
    }

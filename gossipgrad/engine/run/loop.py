"""One training run's loop: steps, logging, evaluation, checkpoints, resume, summary.

Built by :func:`gossipgrad.engine.run.trainer.train`, which owns set-up and tear-down.
"""

# Over 300 lines on purpose: one loop and the per-run state every part of it touches (resume,
# evaluation, checkpoints, failures, summary).

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, failure_of
from gossipgrad.data.sources import DataSource
from gossipgrad.engine import agreement
from gossipgrad.engine.bucket.monitor import describe_monitor, monitor_log_fields
from gossipgrad.engine.consensus import verify_identical
from gossipgrad.engine.offload import ActivationOffload, offloading
from gossipgrad.engine.protocol import DistributedOptimizerProtocol as DistributedOptimizer
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.engine.run import guards
from gossipgrad.engine.run import snapshot as snap
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.evaluation import evaluate
from gossipgrad.engine.run.membership import Membership
from gossipgrad.engine.run.merge import Merges
from gossipgrad.engine.run.metrics import MetricsWriter, Progress, StepSplit, Throughput
from gossipgrad.engine.run.signals import PeriodicAgreement, StopSignals, signal_name
from gossipgrad.engine.run.summary import run_summary
from gossipgrad.engine.run.tasks import Classification, task_of
from gossipgrad.engine.step import train_step
from gossipgrad.inject.faults import KillSwitch
from gossipgrad.inject.straggler import Straggler
from gossipgrad.models import loss_fn
from gossipgrad.options import Offload, OptimOptions
from gossipgrad.shuffle import ShuffleWorker

log = logging.getLogger(__name__)


def lr_at(
    optim: OptimOptions, base_lr: float, step: int, total: int, steps_per_epoch: int
) -> float:
    """Linear warm-up over ``warmup_epochs``, then cosine decay to zero at ``total``."""
    warm = int(optim.warmup_epochs * steps_per_epoch)
    if step < warm:
        return base_lr * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


FOUND = (
    "the step of the checkpoint each rank found to resume from (-1: none; --run-dir must be "
    "on a file system every rank sees)"
)


def step_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed for ``rank``'s step ``step`` (dropout etc.): resume needs no RNG state."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About what one checkpoint of ``model`` takes: its state and one momentum buffer per
    parameter (SGD), plus a little for the rest."""
    state = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    momentum = sum(p.numel() * p.element_size() for p in model.parameters())
    return state + momentum + 2**16


NO_ACCURACY = Classification().unmeasured()
"""What a classifier's evaluation on a device that measures nothing reports (a stand-in's
outputs are zeros); any task's: ``unmeasured()`` of its task."""


class Run:
    """One training run's moving parts and the steps between them."""

    def __init__(
        self,
        cfg: TrainConfig,
        comm: Communicator,
        model: torch.nn.Module,
        opt: DistributedOptimizer,
        source: DataSource,
        device: torch.device,
        base_lr: float,
        states: dict,
        rank_states: dict,
        shuffle: ShuffleWorker | None = None,
        membership: Membership | None = None,
    ) -> None:
        self.cfg, self.comm, self.model, self.opt, self.source = cfg, comm, model, opt, source
        self.device, self.base_lr = device, base_lr
        self.task = task_of(source)  # what the loop, the evaluation and the summary measure
        self.states, self.rank_states = states, rank_states
        self.shuffle = shuffle
        self.spe = source.steps_per_epoch
        self.total = cfg.optim.epochs * self.spe
        if cfg.optim.max_steps:
            self.total = min(self.total, cfg.optim.max_steps)
        self.saver = ckpt.Checkpointer(cfg.run.run_dir, comm) if cfg.run.run_dir else None
        self.launch_size = comm.size
        self.metrics = MetricsWriter(cfg.run.metrics_out, comm.rank)
        self.speed = Throughput(cfg.data.batch_size * comm.size)
        self.last: dict[str, Any] = {}
        self.comm_s = 0.0
        self.split = StepSplit()  # compute / exposed wire / host seconds of the steps
        self.eval_s = 0.0  # evaluations (global averages: waits for the slowest rank too)
        self.straggler = Straggler(comm.rank)
        self.skipped_steps = self.samples_skipped = self.samples_scheduled = 0  # --max-lag
        self.agreement: PeriodicAgreement | None = None
        self.faults = KillSwitch(comm.rank)
        self.membership = membership  # None: a dead rank ends the job (--on-failure abort)
        self.step = self.closed = -1  # steps completed, last epoch evaluated + checkpointed
        self.start = 0  # the step this run started (resumed) from
        self.offload = (
            ActivationOffload(model, device) if Offload.ACTIVATIONS in cfg.run.offload else None
        )
        self.progress: Progress | None = None
        self.factors_written = False
        self.model_bytes = sum(
            p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
        )
        self.device_handle: Any = None  # a plugin device's handle (set by the trainer)
        self.measures = True  # losses and accuracy mean something (not on a stand-in)
        self.resumed_from: str | None = None
        self.merges = Merges(cfg.run.merge_at, library=cfg.exchange.spec.library)
        self.unmerged: dict[str, Any] = {}  # the final evaluation of the ranks' own models
        if self.saver is not None and not cfg.run.evaluate:
            self.saver.check_room(checkpoint_bytes(model))

    def compat(self) -> dict[str, Any]:
        """What a checkpoint must match: the model; when training also the data order,
        the schedule and the strategy."""
        cfg = self.cfg
        model = {"arch": cfg.arch, "hidden": cfg.hidden, "classes": self.source.classes}
        model.update((k, v) for k, v in vars(cfg.model).items() if v)  # gpt's set shape
        if cfg.run.evaluate:
            return model
        return {
            **model,
            "in_shape": list(self.source.in_shape),
            "data": self.source.name,
            "size": self.comm.size,
            "batch_size": cfg.data.batch_size,
            "seed": cfg.seed,
            "steps_per_epoch": self.spe,
            "strategy": cfg.exchange.strategy,
            "mix": cfg.exchange.mix.value,
            "topology": self.opt.exchange_topology,
            "timing": cfg.exchange.timing,
            "staleness": cfg.exchange.staleness,
        }

    def run(self, stop: StopSignals) -> dict[str, Any]:
        try:
            step = self.resume()
            self.metrics.write(
                {
                    "event": "start",
                    "step": step,
                    "resumed_from": self.resumed_from,
                    "size": self.comm.size,
                    "time": time.time(),
                }
            )
            if self.comm.rank == 0:
                log.info(
                    "size %d, strategy %s, topology %s, mix %s, data %s, steps %d to %d "
                    "(%d per epoch), %.2f MB model in %d buckets, device %s",
                    self.comm.size,
                    self.cfg.exchange.strategy,
                    self.opt.schedule.topology,
                    self.cfg.exchange.mix,
                    self.source.name,
                    step,
                    self.total,
                    self.spe,
                    self.model_bytes / 1e6,
                    self.opt.bucket_count,
                    self.device,
                )
            if self.cfg.run.evaluate:
                self.evaluate(step)
                return self.finish(step, step, None)
            self.progress = Progress(self.total, self.comm.rank, self.cfg.run.progress, step)
            return self.loop(step, stop)
        finally:
            if self.progress is not None:
                self.progress.close()
            self.metrics.close()

    def loop(self, start: int, stop: StopSignals) -> dict[str, Any]:
        # --max-lag: no per-step barrier where the strategy says so; every rank still stops
        # at the same step (ps keeps the per-step agreement: its slack is unchanged by it)
        ex = self.cfg.exchange
        self.agreement = PeriodicAgreement(stop, ex.spec.agreement_period(ex))
        if stop.agreed(start):  # signalled during start-up: nothing new to save
            self.progress.write(
                f"{signal_name(stop.stopped)} during start-up: stopping at step {start}"
            )
            return self.finish(start, start, signal_name(stop.stopped))
        step, self.step, self.closed = start, start, start // self.spe - 1
        self.start = start
        self.opt.plan_steps(self.total)  # a dense window is a fraction of the run
        if self.membership is not None:
            self.membership.start(self)
        return self.train_from(step, stop)

    def train_from(self, step: int, stop: StopSignals) -> dict[str, Any]:
        """Train from ``step`` to the end, surviving deaths where membership can."""
        while True:
            try:
                return self.epochs(self.start, step, stop)
            except Exception as exc:
                if self.membership is None:
                    raise
                step = self.membership.recover(self, stop, exc)  # re-raises all but a death

    def run_joined(self, stop: StopSignals, comm: Communicator) -> dict[str, Any]:
        """A replacement (``--on-failure respawn``), built on a mirror communicator: join
        the survivors on ``comm`` (the one it was started with), then train with them."""
        assert self.membership is not None
        try:
            ex = self.cfg.exchange
            self.agreement = PeriodicAgreement(stop, ex.spec.agreement_period(ex))
            self.membership.start(self)
            try:
                step = self.membership.join(self, stop, comm)
            except Exception as exc:  # noqa: BLE001 - a replacement never aborts the job
                why = "a rank died before it joined" if failure_of(exc) else "it could not join"
                log.warning(
                    "launch rank %d's replacement: %s (%s: %s); it ends, and the survivors "
                    "start another or go on without it",
                    comm.rank,
                    why,
                    type(exc).__name__,
                    exc,
                )
                comm.die()  # type: ignore[attr-defined]  # as a crash: ULFM tolerates it
                raise
            self.faults = KillSwitch(comm.rank, after=step)
            self.progress = Progress(self.total, comm.rank, self.cfg.run.progress, step)
            self.opt.plan_steps(self.total)  # the survivors' dense window, at the same steps
            return self.train_from(step, stop)
        finally:
            if self.progress is not None:
                self.progress.close()
            self.metrics.close()

    # -- membership changes (engine/run/membership.py asks; see Member) -------------------
    def marks(self) -> tuple[int, int, int]:
        saved = self.saver.last_step if self.saver is not None else -1
        return self.step, self.closed, saved

    def quiesce(self) -> None:
        self.opt.abandon()
        if self.shuffle is not None:
            self.shuffle.stop(cancel=True)

    def rejoin(self, comm: Communicator, step: int, closed: int, saved: int) -> None:
        """Everything that depends on rank and size, on the survivors' ``comm``: the
        optimizer's schedule and exchange, the data split, the shuffle worker, metrics,
        progress bar and INFO logging on the new rank 0."""
        self.comm = comm
        self.opt.rejoin_(comm, step)
        regroup = getattr(self.source, "regroup", None)
        if regroup is not None:
            regroup(comm.rank, comm.size, step // self.spe + 1)
        self.shuffle = self.membership.shuffle_for(comm)
        self.rank_states.pop("shuffle", None)
        if self.shuffle is not None:
            self.rank_states["shuffle"] = self.shuffle
        self.speed.images_per_step = self.cfg.data.batch_size * comm.size
        if comm.rank == 0 and not self.metrics.active:
            self.metrics = MetricsWriter(self.cfg.run.metrics_out, 0, append=True)
        if comm.rank == 0 and self.progress is not None and self.progress.rank != 0:
            self.progress = Progress(self.total, 0, self.cfg.run.progress, step)
        root = logging.getLogger("gossipgrad")
        if comm.rank == 0 and root.getEffectiveLevel() > logging.INFO:
            root.setLevel(logging.INFO)  # rank 0 logs the summaries now
        if self.saver is not None:
            self.saver.comm, self.saver.last_step = comm, saved
        self.step, self.closed = step, closed

    def consensus_(self) -> None:
        snap.consensus_(self.opt, self.comm)

    def first_epoch(self, step: int) -> int:
        """The epoch to go on with after ``step`` completed steps: the last batch's epoch
        while it is not closed (evaluated, checkpointed), else the next; past the end when
        all is done. Resuming after a failure may land on either side of an epoch's end."""
        current = (step - 1) // self.spe if step > 0 else 0
        if step >= self.total and self.closed >= current:
            return self.cfg.optim.epochs
        return current if step > 0 and self.closed < current else step // self.spe

    def epochs(self, start: int, step: int, stop: StopSignals) -> dict[str, Any]:
        cfg, progress = self.cfg, self.progress
        window = {"loss": 0.0, "correct": 0.0, "n": 0, "samples": 0, "t": time.perf_counter()}
        for epoch in range(self.first_epoch(step), cfg.optim.epochs):
            begin = max(0, step - epoch * self.spe)
            batches = self.source.train_batches(epoch, begin) if begin < self.spe else ()
            for x, y in batches:
                if step >= self.total:
                    break
                self.train_step(x, y, step, window)
                step = self.step = step + 1
                self.speed.tick()
                if step % cfg.run.print_freq == 0 or step == self.total:
                    self.log_window(window, step, epoch)
                self.progress.update(1)
                if self.agreement.agreed(step):
                    break
                if cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0:
                    self.checkpoint(step)
            if stop.stopped:
                guards.raise_if_diverged(stop.stopped)  # a non-finite loss: nothing saved
                name = signal_name(stop.stopped)
                progress.write(f"{name}: stopping every rank at step {step}")
                self.checkpoint(step, reason=name)
                return self.finish(start, step, name)
            last_epoch = step >= self.total or epoch == cfg.optim.epochs - 1
            if (epoch + 1) % cfg.run.eval_every == 0 or last_epoch:
                self.evaluate(step, final=last_epoch)
            self.checkpoint(step)
            self.closed = epoch
            if step >= self.total:
                break
        if not self.last:
            self.evaluate(step, final=True)
        return self.finish(start, step, None)

    def train_step(self, x: torch.Tensor, y: torch.Tensor, step: int, window: dict) -> None:
        self.faults.at("step", step, self.comm)
        torch.manual_seed(step_seed(self.cfg.seed, self.comm.rank, step))
        for g in self.opt.param_groups:
            g["lr"] = lr_at(self.cfg.optim, self.base_lr, step, self.total, self.spe)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        done = train_step(self.opt, x, y, loss_fn, compute=self._compute)
        self.samples_scheduled += len(y)
        if done.skipped:  # --max-lag: a peer is ahead; caught up without computing
            self.skipped_steps += 1
            self.samples_skipped += len(y)
        elif done.loss is not None:
            value = float(done.loss.detach())
            guards.note_loss(self.agreement.signals, value, step)
            window["loss"] += value * y.numel()  # the loss is a mean over targets
            window["correct"] += self.task.hits(done.output, y)
            window["n"] += y.numel()
            window["samples"] += len(y)
        self.comm_s += done.seconds["optimizer"]
        self.split.add(done.seconds)
        self.record_factors(step)
        if self.shuffle is not None:
            self.shuffle.on_step(step)
            self.faults.at("shuffle", step, self.comm)

    @contextlib.contextmanager
    def _compute(self) -> Iterator[None]:
        """Around forward and backward: an injected straggler, activation offload."""
        with self.straggler.compute(), offloading(self.offload):
            yield

    def record_factors(self, step: int) -> None:
        """Write the sufficient-factor decision table once, after the step that made it."""
        table = self.opt.factor_table
        if table is not None and not self.factors_written:
            self.metrics.write({"event": "sufficient_factors", "step": step, "layers": table})
            self.factors_written = True

    def log_window(self, window: dict, step: int, epoch: int) -> None:
        now = time.perf_counter()
        samples_per_s = window["samples"] * self.comm.size / max(1e-9, now - window["t"])
        scores = self.task.train_fields(window["loss"], window["correct"], window["n"])
        if not self.measures:  # a simulated device's losses carry no meaning
            scores = {**dict.fromkeys(scores), "simulated": True}
        rec = {
            "event": "log",
            "step": step,
            "epoch": epoch,
            **scores,
            "samples_per_s": samples_per_s,
            **self.task.rate_fields(samples_per_s, self.comm.size),
            "lr": self.opt.param_groups[0]["lr"],
            "comm_seconds": self.comm_s,
            **monitor_log_fields(self.opt),
        }
        window.update(loss=0.0, correct=0.0, n=0, samples=0, t=now)
        self.metrics.write(rec)
        self.progress.update(
            0,
            loss="-" if rec["loss"] is None else f"{rec['loss']:.3f}",
            **self.task.postfix(rec),
        )

    def evaluate(self, step: int, final: bool = False) -> None:
        """Score the model (the run's last evaluation when ``final``): the ranks' global
        average where ``--merge-at`` merges here, else each rank's own model on its share;
        the final merge of ``--merge-at end`` scores both (``*_unmerged``: before it)."""
        t0 = time.perf_counter()
        merges = self.merges.at_eval(final) and not self.cfg.run.evaluate
        with self.speed.paused():
            distance = self.opt.consensus_distance()
            if merges and self.merges.own_first(final) and self.measures:
                own = self.score()
                self.unmerged = {
                    f"{k}_unmerged": v for k, v in own.items() if k.startswith("test_")
                }
            if merges:
                self.merges.merge_(self.opt, self.comm, with_state=False)
            self.faults.at("eval", step, self.comm)
            self.last = {
                "event": "eval",
                "step": step,
                "epoch": step / self.spe,
                "consensus_distance": distance,
                "merged": merges or self.cfg.run.evaluate,
                **self.score(),
                **(self.unmerged if final else {}),
            }
        self.eval_s += time.perf_counter() - t0
        self.metrics.write(self.last)
        line = (
            f"step {step}: simulated device, not evaluated (its outputs carry no meaning)"
            if not self.measures
            else f"step {step} (epoch {step / self.spe:.2f}): {self.task.describe(self.last)}, "
            f"consensus_distance {distance:.3g}"
        )
        if self.progress is not None:
            self.progress.write(line)
        elif self.comm.rank == 0:
            log.info(line)

    def score(self) -> dict[str, Any]:
        """This task's evaluation fields over all ranks (collective)."""
        if not self.measures:
            return self.task.unmeasured()
        return evaluate(self.model, self.source, self.comm, self.device, self.task)

    def checkpoint(self, step: int, reason: str = "") -> None:
        if self.saver is None:
            if reason:
                log.warning("%s at step %d: no --run-dir, so nothing is saved", reason, step)
            return
        if self.saver.last_step == step:
            return
        with self.speed.paused():
            self.merges.merge_(self.opt, self.comm, with_state=True)  # --merge-at checkpoint
            guards.check_model_(self.model, self.opt.optimizer, self.comm, step, self.saver.run_dir)
            meta = {
                "compat": self.compat(),
                "config": self.cfg.to_dict(),
                "lr_schedule": {
                    "kind": "warmup-cosine",
                    "base_lr": self.base_lr,
                    "warmup_epochs": self.cfg.optim.warmup_epochs,
                    "total_steps": self.total,
                },
                "last_eval": {k: v for k, v in self.last.items() if k != "event"},
            }
            state = (
                snap.snapshot(self.model, self.opt, step, self.spe, ckpt.cpu(meta), self.states)
                if self.comm.rank == 0
                else {}
            )
            if self.faults.armed("checkpoint", step):
                self.saver.before_rename = lambda tmp: self.faults.tear(tmp, step, self.comm)
            path = self.saver.save(step, state, self.rank_states)
        if self.comm.rank == 0:
            log.info(
                "checkpoint %s: %.1f MB in %.2f s%s",
                path,
                self.saver.last_bytes / 1e6,
                self.saver.last_seconds,
                f" ({reason})" if reason else "",
            )

    def resume(self) -> int:
        cfg = self.cfg
        path, state = self.find_checkpoint()
        step = -1
        if path is not None:
            step = snap.restore_(
                path, state, self.model, self.opt, self.comm, self.states, self.rank_states
            )
            ends = state.get("lr_schedule", {}).get("total_steps")
            if ends != self.total and not cfg.run.evaluate and self.comm.rank == 0:
                log.warning(
                    "the learning-rate schedule now ends at step %d (the checkpoint's ended at %s)",
                    self.total,
                    ends,
                )
            if self.saver is not None:
                self.saver.last_step = step
        if path is None:
            if cfg.run.resume and self.comm.rank == 0:
                log.info(
                    "--resume %s: no checkpoint in %s, starting fresh",
                    cfg.run.resume,
                    cfg.run.run_dir,
                )
            if cfg.run.evaluate and self.comm.rank == 0:
                log.warning("--evaluate without a checkpoint: evaluating an untrained model")
            return 0
        verify_identical(self.model, self.comm)
        if self.comm.rank == 0:
            log.info(
                "resumed from %s at step %d (epoch %d, batch %d)",
                path,
                step,
                step // self.spe,
                step % self.spe,
            )
        return step

    def find_checkpoint(self) -> tuple[str | None, dict[str, Any] | None]:
        """The checkpoint to resume from and its contents (None, None: start afresh), the
        same on every rank: a file that cannot be read, is not finite or does not fit this
        run is refused on every rank at once, naming the ranks and why."""
        path = state = problem = None
        try:
            path = ckpt.locate(self.cfg.run.resume, self.cfg.run.run_dir)
            if path is not None:
                state = ckpt.read(path)
                guards.check_checkpoint(state, path)
                ckpt.check_compatible(state, self.compat(), path)
                ckpt.check_rank_part(state, path, self.comm.rank)
        except ValueError as exc:
            problem = str(exc)
        found = int(state.get("step", -1)) if state is not None else -1
        agreement.check_settings(self.comm, [(FOUND, found)], problem)
        self.resumed_from = path
        return path, state

    def finish(self, start: int, step: int, stopped: str | None) -> dict[str, Any]:
        if self.agreement is not None:
            self.agreement.close()
        summary = run_summary(self, start, step, stopped)
        ips = summary["samples_per_s"]
        if self.device_handle is not None:
            summary.update(self.device_handle.summary_fields(summary))
        self.metrics.write(summary)
        if self.comm.rank == 0 and summary["monitor_calls"]:
            log.info("consensus: %s", describe_monitor(summary))
        if self.comm.rank == 0 and self.split.steps:
            log.info("step: %s", self.split.describe())
        if self.comm.rank == 0 and ips:
            rate = ips * self.task.per_sample
            log.info(
                "throughput: %.1f %s/s (%.1f per rank) over %d timed steps",
                rate,
                self.task.unit,
                rate / self.comm.size,
                self.speed.steps,
            )
        return summary

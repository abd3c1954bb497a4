"""The training engine: forward, backward, exchange, mix, optimizer, eval — one loop.

The engine receives a communicator and never imports mpi4py. It is what ``gossipgrad
train`` runs and what the library API (``DistributedOptimizer``) plugs into.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp, allreduce_
from gossipgrad.comm.schedule import Schedule
from gossipgrad.data.loader import ShardLoader, strided_indices
from gossipgrad.data.partition import partition
from gossipgrad.data.tensors import TensorData, load_tensor_data
from gossipgrad.engine.config import TrainConfig
from gossipgrad.engine.consensus import agree
from gossipgrad.engine.distributed import DistributedOptimizer
from gossipgrad.engine.factory import make_distributed
from gossipgrad.engine.metrics import MetricsWriter, Progress
from gossipgrad.models import build_model, logits, loss_fn
from gossipgrad.shuffle import ShardStore, ShuffleWorker

log = logging.getLogger(__name__)


def check_agreement(cfg: TrainConfig, comm: Communicator, schedule: Schedule) -> None:
    """Fail fast unless every rank has the same configuration and schedule."""
    if not agree(comm, cfg.fingerprint()):
        raise ValueError(f"rank {comm.rank}: the training configuration differs between ranks "
                         "(different flags, environment or config file per rank?)")
    if not agree(comm, schedule.fingerprint()):
        raise ValueError(f"rank {comm.rank}: ranks disagree about the partner schedule")


def lr_at(cfg: TrainConfig, base_lr: float, step: int, total: int, steps_per_epoch: int) -> float:
    """Linear warm-up over ``warmup_epochs``, then cosine decay to zero at ``total``."""
    warm = int(cfg.warmup_epochs * steps_per_epoch)
    if step < warm:
        return base_lr * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: TensorData, comm: Communicator,
             batch: int = 512) -> dict[str, float]:
    """Accuracy and loss on the test set, each rank scoring a strided share."""
    model.eval()
    idx = torch.from_numpy(strided_indices(len(data.test_y), comm.rank, comm.size))
    totals = np.zeros(3, dtype=np.float64)  # correct, loss sum, count
    for i in range(0, len(idx), batch):
        x, y = data.test_x[idx[i:i + batch]], data.test_y[idx[i:i + batch]]
        out = logits(model(x))
        totals += [float((out.argmax(1) == y).sum()),
                   float(torch.nn.functional.cross_entropy(out, y, reduction="sum")), len(y)]
    allreduce_(comm, totals, ReduceOp.SUM)
    model.train()
    return {"test_accuracy": totals[0] / totals[2], "test_loss": totals[1] / totals[2]}


def train(cfg: TrainConfig, comm: Communicator) -> dict[str, Any]:
    """Run the whole job; returns the summary record (identical on every rank)."""
    cfg.validate(comm.size)
    torch.manual_seed(cfg.seed)
    data = load_tensor_data(cfg.dataset)
    model = build_model(cfg.arch, data.in_shape, data.classes, cfg.hidden)
    base_lr = cfg.lr * (comm.size if cfg.scale_lr else 1)
    opt = make_distributed(
        cfg.strategy, torch.optim.SGD(model.parameters(), lr=base_lr, momentum=cfg.momentum,
                                      weight_decay=cfg.weight_decay),
        model, comm, topology=cfg.topology, seed=cfg.seed,
        mix=cfg.mix, staleness=cfg.staleness, sync_every=cfg.sync_every,
        bucket_mb=cfg.bucket_mb, overlap=cfg.overlap)
    check_agreement(cfg, comm, opt.schedule)
    ids = partition(data.train_y.numpy(), comm.size, cfg.partition, cfg.seed)[comm.rank]
    store = ShardStore.of_tensors(ids, data.train_y[ids], data.train_x[ids])
    loader = ShardLoader(store, cfg.batch_size, cfg.seed, comm.rank)
    shuffle = make_shuffle(cfg, store, comm)
    steps_per_epoch = len(loader)
    total = cfg.epochs * steps_per_epoch
    if cfg.max_steps:
        total = min(total, cfg.max_steps)
    if comm.rank == 0:
        log.info("size %d, strategy %s, topology %s, mix %s, %d steps (%d per epoch), "
                 "%.2f MB model in %d buckets", comm.size, cfg.strategy,
                 opt.schedule.topology.value, cfg.mix, total, steps_per_epoch,
                 opt.layout.nbytes / 1e6, len(opt.layout.buckets))
    metrics = MetricsWriter(cfg.metrics_out, comm.rank)
    progress = Progress(total, comm.rank, cfg.progress)
    start = time.perf_counter()
    comm_s = 0.0
    step = 0
    last: dict[str, float] = {}
    window = {"loss": 0.0, "correct": 0.0, "n": 0, "t": time.perf_counter()}
    try:
        for epoch in range(cfg.epochs):
            loader.set_epoch(epoch)
            for x, y in loader:
                if step >= total:
                    break
                for g in opt.param_groups:
                    g["lr"] = lr_at(cfg, base_lr, step, total, steps_per_epoch)
                opt.zero_grad()
                out = opt.module_for_forward(x)  # DDP's wrapper under --strategy ddp
                loss = loss_fn(out, y)
                loss.backward()
                t0 = time.perf_counter()
                opt.step()
                comm_s += time.perf_counter() - t0
                if shuffle is not None:
                    shuffle.on_step(step)
                step += 1
                window["loss"] += float(loss.detach()) * len(y)
                window["correct"] += float((logits(out).argmax(1) == y).sum())
                window["n"] += len(y)
                if step % cfg.print_freq == 0 or step == total:
                    rec = _log_record(window, step, epoch, comm.size, start, comm_s)
                    metrics.write(rec)
                    progress.update(0, loss=f"{rec['loss']:.3f}", acc=f"{rec['train_accuracy']:.3f}",
                                    sps=f"{rec['samples_per_s']:.0f}",
                                    comm=f"{100 * comm_s / max(1e-9, rec['wall_seconds']):.0f}%")
                progress.update(1)
            if (epoch + 1) % cfg.eval_every == 0 or step >= total or epoch == cfg.epochs - 1:
                last = _eval_record(model, opt, data, comm, step, epoch)
                metrics.write(last)
                progress.write(f"epoch {epoch + 1}: test_accuracy {last['test_accuracy']:.4f} "
                               f"consensus_distance {last['consensus_distance']:.3g}")
            if step >= total:
                break
        wall = time.perf_counter() - start
        summary = {"event": "summary", "test_accuracy": last.get("test_accuracy"),
                   "test_loss": last.get("test_loss"), "steps": step, "size": comm.size,
                   "strategy": cfg.strategy, "topology": opt.schedule.topology.value,
                   "mix": cfg.mix, "staleness": cfg.staleness, "arch": cfg.arch,
                   "dataset": cfg.dataset, "batch_size": cfg.batch_size,
                   "bytes_sent_per_step": opt.bytes_sent_per_step(),
                   "model_bytes": opt.layout.nbytes, "wall_seconds": wall,
                   "comm_seconds": comm_s, "samples_per_s": step * cfg.batch_size * comm.size / wall,
                   "consensus_distance": last.get("consensus_distance")}
        metrics.write(summary)
        return summary
    finally:
        if shuffle is not None:
            shuffle.stop()
        progress.close()
        metrics.close()
        opt.close()


def make_shuffle(cfg: TrainConfig, store: ShardStore, comm: Communicator) -> ShuffleWorker | None:
    """The background sample shuffle, or None when it is off or there is one rank."""
    if not cfg.shuffle or comm.size == 1:
        return None
    return ShuffleWorker(store, comm, samples=min(cfg.shuffle_samples, len(store)),
                         every=cfg.shuffle_every, seed=cfg.seed, topology=cfg.topology)


def _log_record(window: dict, step: int, epoch: int, size: int, start: float,
                comm_s: float) -> dict[str, Any]:
    now = time.perf_counter()
    rec = {"event": "log", "step": step, "epoch": epoch,
           "loss": window["loss"] / max(1, window["n"]),
           "train_accuracy": window["correct"] / max(1, window["n"]),
           "samples_per_s": window["n"] * size / max(1e-9, now - window["t"]),
           "wall_seconds": now - start, "comm_seconds": comm_s}
    window.update(loss=0.0, correct=0.0, n=0, t=now)
    return rec


def _eval_record(model: torch.nn.Module, opt: DistributedOptimizer, data: TensorData,
                 comm: Communicator, step: int, epoch: int) -> dict[str, Any]:
    distance = opt.consensus_distance()
    opt.synchronize()
    return {"event": "eval", "step": step, "epoch": epoch, "consensus_distance": distance,
            **evaluate(model, data, comm)}

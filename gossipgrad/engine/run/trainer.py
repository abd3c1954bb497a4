"""The training engine's entry point: build the run's parts, run it, tear it down.

    mpiexec -n 2 gossipgrad train -a resnet50 --data DIR --run-dir runs/r50 --resume auto

The engine receives a communicator and never imports mpi4py. It is what ``gossipgrad
train`` runs and what the library API (``DistributedOptimizer``) plugs into; the steps
themselves are in :mod:`gossipgrad.engine.run.loop`.

Determinism (what makes ``--resume`` exact): step t's batch is a function of
(seed, rank, epoch, batch) (``gossipgrad.data.sources``), its learning rate of t
(:func:`gossipgrad.engine.run.loop.lr_at`), and torch's RNG (dropout) is reseeded from
(seed, rank, t) before the step. Checkpoints globally average the model and optimizer state
on every rank before saving, so an uninterrupted run and one resumed from its checkpoint
continue from identical values. A SIGTERM/SIGUSR1 on any rank stops every rank at the same
step, with a checkpoint there.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.mirror import MirrorCommunicator
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.data.sources import DataSource, open_source
from gossipgrad.engine.consensus import agree
from gossipgrad.engine.offload import HostOffloadOptimizer
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.loop import Run
from gossipgrad.engine.run.membership import Membership
from gossipgrad.engine.run.preflight import READ_SHARE, prepare
from gossipgrad.engine.run.pretrained import load_pretrained_
from gossipgrad.engine.run.signals import StopSignals
from gossipgrad.models import build_model
from gossipgrad.options import Offload, OnFailure, Optimizer, OptimOptions
from gossipgrad.shuffle import ShuffleWorker

log = logging.getLogger(__name__)


def check_agreement(cfg: TrainConfig, comm: Communicator, schedule: Schedule) -> None:
    """Fail fast unless every rank has the same configuration and schedule."""
    if not agree(comm, cfg.fingerprint()):
        raise ValueError(
            f"rank {comm.rank}: the training configuration differs between ranks "
            "(different flags, environment or config file per rank?)"
        )
    if not agree(comm, schedule.fingerprint()):
        raise ValueError(f"rank {comm.rank}: ranks disagree about the partner schedule")


def train(
    cfg: TrainConfig,
    comm: Communicator,
    device: torch.device | str = "cpu",
    stager: Stager | None = None,
    states: dict[str, ckpt.Stateful] | None = None,
    rank_states: dict[str, ckpt.Stateful] | None = None,
) -> dict[str, Any]:
    """Run the whole job; returns the summary record (identical on every rank).

    ``states`` (identical on every rank) and ``rank_states`` (per rank, e.g. the background
    shuffle as ``{"shuffle": worker}``) are saved in every checkpoint and restored on resume.
    """
    device = torch.device(device)
    torch.manual_seed(cfg.seed)
    if getattr(comm, "welcome", None) is not None:  # a replacement (--on-failure respawn)
        return _replace(cfg, comm, device, stager, states or {}, rank_states or {})
    stop = StopSignals(comm)  # first: SIGUSR1's default action would end the rank
    try:
        source, lock = prepare(cfg, comm, pin_memory=device.type == "cuda")  # every rank agrees
        try:
            return _build_and_run(
                cfg, comm, device, stager, stop, states or {}, rank_states or {}, source
            )
        finally:
            if lock is not None:
                lock.release()
    finally:
        stop.close()


def _replace(
    cfg: TrainConfig,
    comm: Communicator,
    device: torch.device,
    stager: Stager | None,
    states: dict,
    rank_states: dict,
) -> dict[str, Any]:
    """A replacement: build every part as at launch, on a mirror of ``comm`` (the survivors
    are training and call no start-up collective), then join them (``Run.run_joined``)."""
    mirror = MirrorCommunicator(comm.rank, comm.size, comm.timeout)
    stop = StopSignals(mirror)
    try:
        source = open_source(
            cfg.data,
            rank=comm.rank,
            size=comm.size,
            seed=cfg.seed,
            pin_memory=device.type == "cuda",
            read_timeout=READ_SHARE * cfg.run.comm_timeout,
        )
        return _build_and_run(
            cfg, mirror, device, stager, stop, states, rank_states, source, joining=comm
        )
    finally:
        stop.close()


def _build_and_run(
    cfg: TrainConfig,
    comm: Communicator,
    device: torch.device,
    stager: Stager | None,
    stop: StopSignals,
    states: dict,
    rank_states: dict,
    source: DataSource,
    joining: Communicator | None = None,
) -> dict[str, Any]:
    """Build the run's parts on ``comm`` and run it; ``joining``: the communicator a
    replacement joins the survivors on (``comm`` is then a mirror of it)."""
    shape = (cfg.hidden, cfg.model.layers, cfg.model.heads)
    model = build_model(cfg.arch, source.in_shape, source.classes, *shape)
    if cfg.pretrained and comm.rank == 0 and joining is None:  # rank 0's are broadcast
        load_pretrained_(model, cfg.arch)
    model = model.to(device)
    spec = cfg.run.device_spec  # a plugin's device (--device NAME:ARG), else None
    device_handle = None
    if spec is not None:
        device_handle = spec.attach(cfg.run.device_arg, cfg, model, source.in_shape)
    base_lr = cfg.optim.lr * (comm.size if cfg.optim.scale_lr else 1)
    sgd = local_optimizer(cfg.optim, model.parameters(), base_lr)
    if device_handle is not None:
        sgd = device_handle.optimizer(sgd)  # e.g. the stand-in's: waits, updates nothing
    if Offload.OPTIMIZER in cfg.run.offload:
        sgd = HostOffloadOptimizer(sgd)
    opt = cfg.exchange.spec.build(sgd, model, comm, cfg.exchange, stager=stager)
    rank_states = {**rank_states, **opt.rank_states}  # ps: each rank's shard
    run = shuffle = None
    try:
        check_agreement(cfg, comm, opt.schedule)
        shuffle = make_shuffle(cfg, source, comm)
        if shuffle is not None:
            rank_states = {**rank_states, "shuffle": shuffle}
        membership = None
        if cfg.run.on_failure is not OnFailure.ABORT and comm.size > 1:
            membership = Membership(
                comm,
                lambda c: make_shuffle(cfg, source, c),
                respawn=cfg.run.on_failure is OnFailure.RESPAWN,
            )
        run = Run(
            cfg, comm, model, opt, source, device, base_lr, states, rank_states, shuffle, membership
        )
        run.device_handle, run.measures = device_handle, spec is None or spec.measures
        result = run.run(stop) if joining is None else run.run_joined(stop, joining)
        if run.shuffle is not None:  # the survivors' worker after a failure
            run.shuffle.stop()
        return result
    finally:
        shuffle = run.shuffle if run is not None else shuffle
        if shuffle is not None:
            shuffle.stop(cancel=True)  # no-op after a clean stop; abandons a failed run's round
        opt.close()


def local_optimizer(optim: OptimOptions, params: Any, lr: float) -> torch.optim.Optimizer:
    """The torch optimizer of ``--optimizer`` over ``params`` at ``lr``: SGD with
    ``--momentum`` (``--nesterov``), Adam or AdamW (torch's betas and eps); ``--weight-decay``
    is L2 for SGD and Adam, decoupled for AdamW."""
    if optim.optimizer is Optimizer.ADAM:
        return torch.optim.Adam(params, lr=lr, weight_decay=optim.weight_decay)
    if optim.optimizer is Optimizer.ADAMW:
        return torch.optim.AdamW(params, lr=lr, weight_decay=optim.weight_decay)
    return torch.optim.SGD(
        params,
        lr=lr,
        momentum=optim.momentum,
        weight_decay=optim.weight_decay,
        nesterov=optim.nesterov,
    )


def make_shuffle(cfg: TrainConfig, source: DataSource, comm: Communicator) -> ShuffleWorker | None:
    """The background sample shuffle over the source's shard store, or None when it is off,
    there is one rank, or the source keeps no store (ImageFolder, synthetic images)."""
    store = getattr(source, "store", None)
    if not cfg.shuffle.shuffle or comm.size == 1 or store is None:
        return None
    return ShuffleWorker(
        store,
        comm,
        samples=min(cfg.shuffle.shuffle_samples, len(store)),
        every=cfg.shuffle.shuffle_every,
        seed=cfg.seed,
        topology=cfg.exchange.rank_topology,
    )

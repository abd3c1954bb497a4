"""A simulated job: what every engine runs, built and checked once from the user's options.

The exchange is the runtime's own :class:`~gossipgrad.options.ExchangeOptions` (its
refusals included), the optimizer and learning-rate rule those of ``gossipgrad train``
(:class:`~gossipgrad.options.OptimOptions`: SGD, Adam or AdamW, linear warm-up then cosine
decay to zero at the last step), unless a factory is given. The batch is per rank
(``batch``) or global (``global_batch``, cut evenly over the ranks), and the learning rate
scales with the global batch by ``lr_scale``: ``none``, ``linear`` (lr x G / lr_batch) or
``sqrt``; ``lr_batch`` is the global batch the given ``lr`` is meant for (default: one
rank's batch, so ``linear`` is ``gossipgrad train --scale-lr``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from gossipgrad.tools.simulate.data import Shards, Task
from gossipgrad.tools.simulate.runtime import (
    TIMINGS,
    ExchangeOptions,
    OptimOptions,
    adaptive,
    exchange_for,
    local_optimizer,
    lr_at,
    updates_elementwise,
)

ENGINES = ("stack", "ranks")
_SEEDING = threading.Lock()  # thread-ranks build their models one at a time (one torch RNG)
LR_SCALES = ("none", "linear", "sqrt")


@dataclass(frozen=True)
class SimOptions:
    """The simulator's own options (the exchange's and the optimizer's are the runtime's).

    Args:
        size: ranks (>= 1).
        steps: steps to run (0: ``epochs`` epochs of each rank's shard).
        epochs: epochs when ``steps`` is 0 (fractions allowed).
        batch: samples per rank and step (0: ``global_batch / size``).
        global_batch: samples per step over all ranks (a multiple of ``size``).
        lr_scale, lr_batch: the learning-rate scaling rule (module docstring).
        partition: ``iid``, ``sorted`` or ``dirichlet:ALPHA``.
        shuffle, shuffle_every, shuffle_samples: the background shuffle's rounds.
        delays: a fixed delay pattern under ``max_lag`` (``const:K``, ``cycle:...``,
            ``random:SEED``); None: the clock decides when frames arrive.
        eval_every: steps between evaluations (0: once an epoch, and at the end).
        rank_eval: ranks whose own accuracy is measured at each evaluation (evenly spread).
        engine: ``stack`` (replicas stacked and vectorised) or ``ranks`` (one real
            ``DistributedOptimizer`` per rank, as threads or under a launcher).
        label: the run's name in its records (default: the strategy's; the planner groups
            runs by it).
        seed: model initialisation, partition, data order, schedule rotation, shuffle.
    """

    size: int
    steps: int = 0
    epochs: float = 1.0
    batch: int = 0
    global_batch: int = 0
    lr_scale: str = "none"
    lr_batch: int = 0
    partition: str = "iid"
    shuffle: bool = False
    shuffle_every: int = 2
    shuffle_samples: int = 8
    delays: str | None = None
    eval_every: int = 0
    rank_eval: int = 32
    engine: str = "stack"
    label: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("size", "shuffle_every", "shuffle_samples", "rank_eval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("steps", "batch", "global_batch", "lr_batch", "eval_every", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"epochs must be a number > 0, got {self.epochs}")
        if bool(self.batch) == bool(self.global_batch):
            raise ValueError("give one of batch (per rank) and global_batch (over all ranks)")
        if self.global_batch and self.global_batch % self.size:
            raise ValueError(
                f"a global batch of {self.global_batch} does not split evenly over "
                f"{self.size} ranks; pick a multiple of {self.size} or give batch per rank"
            )
        if self.lr_scale not in LR_SCALES:
            raise ValueError(
                f"lr_scale must be one of {', '.join(LR_SCALES)}, got {self.lr_scale!r}"
            )
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")

    @property
    def rank_batch(self) -> int:
        return self.batch or self.global_batch // self.size


OptimizerFactory = Callable[[Any], torch.optim.Optimizer]


@dataclass
class Job:
    """Everything a run needs; both engines read the same object."""

    sim: SimOptions
    model: Callable[[], torch.nn.Module]
    task: Task
    exchange: ExchangeOptions
    optim: OptimOptions
    factory: OptimizerFactory | None
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    steps: int
    steps_per_epoch: int
    base_lr: float

    @property
    def size(self) -> int:
        return self.sim.size

    def build_model(self) -> torch.nn.Module:
        """The model every rank starts from (seeded: the same on every rank and engine)."""
        with _SEEDING:
            torch.manual_seed(self.sim.seed)
            return self.model()

    def optimizer(self, params: Any) -> torch.optim.Optimizer:
        """The local optimizer over ``params`` at the base learning rate."""
        if self.factory is not None:
            opt = self.factory(params)
            for group in opt.param_groups:
                group["lr"] = self.base_lr
            return opt
        return local_optimizer(self.optim, params, self.base_lr)

    def lr(self, step: int) -> float:
        return lr_at(self.optim, self.base_lr, step, self.steps, self.steps_per_epoch)

    def shards(self) -> Shards:
        s = self.sim
        return Shards(
            self.task.train_y.numpy(),
            s.size,
            s.rank_batch,
            s.seed,
            s.partition,
            s.shuffle,
            s.shuffle_every,
            s.shuffle_samples,
            self.exchange.rank_topology,
        )

    def eval_steps(self) -> set[int]:
        """Steps (counted from 1) after which the models are evaluated."""
        every = self.sim.eval_every or self.steps_per_epoch
        return set(range(every, self.steps + 1, every)) | {self.steps}

    def describe(self) -> dict[str, Any]:
        """The job as a JSON object (the first line of a run's records)."""
        out = {f.name: getattr(self.sim, f.name) for f in fields(self.sim)}
        ex = self.exchange
        out.update(
            strategy=ex.strategy,
            mix=str(ex.mix),
            topology=str(ex.topology),
            staleness=ex.staleness,
            max_lag=ex.max_lag,
            sync_every=ex.sync_every,
            adaptive_sync=ex.adaptive,
            wire=ex.wire,
            rule=ex.rule,
            optimizer=str(self.optim.optimizer) if self.factory is None else "factory",
            lr=self.base_lr,
            rank_batch=self.sim.rank_batch,
            global_batch=self.sim.rank_batch * self.sim.size,
            steps=self.steps,
            steps_per_epoch=self.steps_per_epoch,
            train_samples=len(self.task.train_y),
        )
        return out


def make_job(
    model: Callable[[], torch.nn.Module],
    task: Task,
    sim: SimOptions,
    options: dict[str, Any],
    optimizer: OptimizerFactory | None,
    loss_fn: Callable[..., torch.Tensor] | None,
) -> Job:
    """Sort ``options`` into the optimizer's and the exchange's fields and build the job;
    a name that is neither is refused, as a wrong keyword would be."""
    optim_names = {f.name for f in fields(OptimOptions)} - {"epochs", "max_steps", "scale_lr"}
    optim = {k: v for k, v in options.items() if k in optim_names}
    rest = {k: v for k, v in options.items() if k not in optim_names}
    optim_opts = OptimOptions(**optim)
    if optimizer is not None and set(optim) - {"lr", "warmup_epochs"}:
        raise ValueError(
            f"{sorted(set(optim) - {'lr', 'warmup_epochs'})} set the built-in optimizer; "
            "with an optimizer factory configure it there (lr and warmup_epochs still apply)"
        )
    probe = _probe(optimizer, optim_opts)
    exchange_names = {f.name for f in fields(ExchangeOptions)}
    unknown = set(rest) - exchange_names
    if unknown:
        raise ValueError(f"simulate() got unknown options {sorted(unknown)}")
    strategy = rest.pop("strategy", "gossip")
    rest.setdefault("seed", sim.seed)
    exchange = exchange_for(strategy, adaptive(probe), **rest)
    if str(exchange.timing).partition(":")[0] not in TIMINGS:
        raise ValueError(
            f"the simulator runs the timings {', '.join(TIMINGS)}, not {exchange.timing!r}: "
            "run that one with gossipgrad train or bench"
        )
    if sim.delays is not None and not exchange.max_lag:
        raise ValueError("a delay pattern (delays) needs max_lag >= 1 (bounded lag)")
    if sim.engine == "stack" and not updates_elementwise(probe):
        raise ValueError(
            f"the stack engine runs one optimizer over every rank's parameters, which is the "
            f"same as one per rank only for elementwise optimizers (SGD, Adam, AdamW ...), "
            f"not {type(probe).__name__}; use engine='ranks'"
        )
    shards_len = len(task.train_y) // sim.size
    if shards_len < sim.rank_batch:
        raise ValueError(
            f"{len(task.train_y)} training samples give each of {sim.size} ranks {shards_len}, "
            f"fewer than a batch of {sim.rank_batch}; use a larger task or a smaller batch"
        )
    spe = shards_len // sim.rank_batch
    steps = sim.steps or max(1, round(sim.epochs * spe))
    return Job(
        sim,
        model,
        task,
        exchange,
        optim_opts,
        optimizer,
        loss_fn or torch.nn.functional.cross_entropy,
        steps,
        spe,
        scaled_lr(optim_opts.lr, sim),
    )


def scaled_lr(lr: float, sim: SimOptions) -> float:
    """``lr`` scaled from ``lr_batch`` to the job's global batch by ``lr_scale``.

    >>> scaled_lr(0.1, SimOptions(size=4, batch=8, lr_scale="linear"))
    0.4
    """
    g = sim.rank_batch * sim.size
    ref = sim.lr_batch or sim.rank_batch
    if sim.lr_scale == "linear":
        return lr * g / ref
    if sim.lr_scale == "sqrt":
        return lr * math.sqrt(g / ref)
    return lr


def _probe(factory: OptimizerFactory | None, optim: OptimOptions) -> torch.optim.Optimizer:
    """An optimizer of the job's kind over a dummy parameter (to ask what kind it is)."""
    param = [torch.nn.Parameter(torch.zeros(1))]
    return factory(param) if factory is not None else local_optimizer(optim, param, optim.lr)

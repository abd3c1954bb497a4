"""The frozen option objects that every layer takes (the choices: gossipgrad.choices). PURE.

A setting is parsed and validated here, once, where its option object is built, with a
message that names the flag; below that it is typed. ``TrainConfig``
(:mod:`gossipgrad.engine.config`) composes these objects; ``DistributedOptimizer``, the
library adapters, ``plan/`` and ``bench/`` take the same ones.

    >>> opts = ExchangeOptions(strategy="allreduce", bucket_mb=4)
    >>> opts.strategy is Strategy.ALLREDUCE, opts.mix is Mix.PARAM
    (True, True)
    >>> ExchangeOptions(staleness=2)
    Traceback (most recent call last):
    ...
    ValueError: --staleness must be 0 or 1, got 2
"""

# Over 300 lines on purpose: every option object with its validation and the messages that name
# the flags.

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from gossipgrad.choices import (  # noqa: F401 - re-exported: the usual import path
    FACTOR_STRATEGIES,
    Device,
    Mix,
    Offload,
    OnFailure,
    ShuffleMode,
    Strategy,
    SufficientFactors,
    Sync,
    Topology,
    at_least,
    bucket_cap_bytes,
    choice,
    parse_device,
    parse_offload,
)

DEFAULT_BUCKET_MB = 25.0
"""Largest bucket in MiB (``--bucket-mb``): about what DDP and Horovod fuse by default."""

DEFAULT_SYNC_THRESHOLD = 1e-3
"""Consensus distance above which ``--sync adaptive`` averages globally (``--sync-threshold``;
chosen on digits, validated on templates: docs/benchmarks.md)."""

DEFAULT_MONITOR_EVERY = 10
"""Steps between two consensus-distance estimates of gossip (``--monitor-every``)."""

DEFAULT_TIMEOUT_S = 120.0
"""Seconds any wait may take before the job ends (``--comm-timeout``)."""


class _Options:
    """Frozen dataclass helpers: coerce a field in ``__post_init__``; build from a mapping
    that may hold other options too."""

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @classmethod
    def pick(cls, flags: dict[str, Any]) -> dict[str, Any]:
        """The entries of ``flags`` that are this class's fields."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return {k: v for k, v in flags.items() if k in names}


@dataclass(frozen=True)
class ExchangeOptions(_Options):
    """How a step's exchange runs: strategy, schedule, what is mixed, buckets, overlap.

    Args:
        strategy: see :class:`Strategy`.
        topology: the gossip schedule; resolved per size by ``comm.schedule``.
        mix: what gossip averages (allreduce averages gradients whatever ``mix`` says for
            ``grad`` and parameters for ``param``).
        staleness: 0 (the exchange completes this step) or 1 (at the next step).
        sync_every: a global average every N steps (0: only before evaluation/checkpoint).
        bucket_mb: the largest bucket in MiB (> 0).
        overlap: run bucket exchanges on the communication thread, behind compute.
        max_lag: how many steps a message may be behind the step that mixes it (0:
            lockstep); a rank waits only for a peer more than ``max_lag`` steps behind
            (``engine.lagged``). Refused with the collective strategies. With
            ``staleness`` 1 as well, a message is mixed no earlier than the step after it
            was sent and no later than ``max_lag`` steps after.
            With ``strategy="ps"``: the stale-synchronous slack, a rank may compute step t
            on parameters of server clock >= t - max_lag.
        sync: see :class:`Sync`; :attr:`adaptive` says what ``auto`` resolves to.
        sync_threshold: the consensus distance above which ``sync="adaptive"`` averages.
        monitor_every: gossip estimates the consensus distance every N steps (one small
            allreduce; 0: never, which ``sync="adaptive"`` does not allow).
        seed: the shared seed of the schedule's per-cycle rotation.
        rotate: re-permute the schedule's numbering every cycle.
        sufficient_factors: send Linear layers' weight gradients as their factors
            (:class:`SufficientFactors`); only with ``mix="grad"``, staleness 0 and a
            strategy of :data:`FACTOR_STRATEGIES` (``on`` elsewhere is an error).
    """

    strategy: Strategy = Strategy.GOSSIP
    topology: Topology = Topology.AUTO
    mix: Mix = Mix.PARAM
    staleness: int = 0
    sync_every: int = 0
    bucket_mb: float = DEFAULT_BUCKET_MB
    overlap: bool = True
    max_lag: int = 0
    sync: Sync = Sync.AUTO
    sync_threshold: float = DEFAULT_SYNC_THRESHOLD
    monitor_every: int = DEFAULT_MONITOR_EVERY
    seed: int = 0
    rotate: bool = True
    sufficient_factors: SufficientFactors = SufficientFactors.AUTO

    def __post_init__(self) -> None:
        self._set("strategy", choice(Strategy, self.strategy, "--strategy"))
        self._set("topology", choice(Topology, self.topology, "--topology"))
        self._set("mix", choice(Mix, self.mix, "--mix"))
        self._set(
            "sufficient_factors",
            choice(SufficientFactors, self.sufficient_factors, "--sufficient-factors"),
        )
        if self.staleness not in (0, 1):
            raise ValueError(f"--staleness must be 0 or 1, got {self.staleness}")
        if self.staleness and self.strategy.library:
            raise ValueError(
                f"--staleness 1 is not available with --strategy {self.strategy}: "
                "it waits for every step's allreduce (use --strategy allreduce "
                "for a stale allreduce)"
            )
        at_least(self.sync_every, 0, "--sync-every")
        at_least(self.max_lag, 0, "--max-lag")
        self.sufficient_factors.check(self.strategy, self.mix, self.staleness, self.max_lag)
        if self.max_lag and self.strategy.collective:
            raise ValueError(
                f"--max-lag {self.max_lag} is not available with --strategy "
                f"{self.strategy}: its allreduce waits for every rank at every "
                "step; use --strategy gossip, or --max-lag 0"
            )
        bucket_cap_bytes(self.bucket_mb)
        if self.strategy is Strategy.PS:
            self._check_ps()
        self._check_sync()

    def _check_ps(self) -> None:
        """ps pushes gradients to their owner and pulls parameters back every step; its
        slack is ``--max-lag``. Options that only mean something to gossip are refused."""
        if self.staleness:
            raise ValueError(
                "--staleness 1 is not available with --strategy ps: its slack is "
                "--max-lag S (compute on parameters up to S steps old)"
            )
        if self.mix is not Mix.PARAM:
            raise ValueError(
                f"--mix {self.mix} does not apply to --strategy ps: it pushes "
                "gradients to their owner and pulls parameters back; drop --mix"
            )
        if self.sync_every:
            raise ValueError(
                "--sync-every does not apply to --strategy ps: every rank computes "
                "on the server's parameters, there is nothing to average; drop it"
            )

    def _check_sync(self) -> None:
        self._set("sync", choice(Sync, self.sync, "--sync"))
        at_least(self.sync_threshold, 0, "--sync-threshold", strict=True)
        at_least(self.monitor_every, 0, "--monitor-every")
        if self.sync is Sync.ADAPTIVE and self.strategy is not Strategy.GOSSIP:
            why = (
                "never communicates"
                if self.strategy is Strategy.LOCAL
                else "keeps every rank identical"
            )
            raise ValueError(
                f"--sync adaptive applies to --strategy gossip only (--strategy "
                f"{self.strategy} {why}); drop --sync or pass --sync off"
            )
        if self.sync is Sync.ADAPTIVE and self.max_lag:
            raise ValueError(
                "--sync adaptive needs --max-lag 0: its estimate is a collective "
                "every --monitor-every steps, the barrier a lagged run avoids; "
                "pass --sync off"
            )
        if self.adaptive and not self.monitor_every:
            default = " (the default with --mix grad)" if self.sync is Sync.AUTO else ""
            raise ValueError(
                f"--sync adaptive{default} needs --monitor-every >= 1 to see the "
                "consensus distance; pass --sync off to do without both"
            )

    @property
    def adaptive(self) -> bool:
        """Whether adaptive averaging is on: ``sync="adaptive"``, or ``"auto"`` with gossip
        and ``mix="grad"`` (parameter mixing contracts consensus by itself).

            >>> ExchangeOptions(mix="grad").adaptive, ExchangeOptions(mix="param").adaptive
            (True, False)
        """
        if self.sync is Sync.AUTO:
            return self.strategy is Strategy.GOSSIP and self.mix is Mix.GRAD and not self.max_lag
        return self.sync is Sync.ADAPTIVE

    @property
    def monitors(self) -> bool:
        """Whether gossip's consensus distance is estimated every ``monitor_every`` steps
        (not with ``max_lag``: the estimate is a collective)."""
        return self.strategy is Strategy.GOSSIP and self.monitor_every > 0 and not self.max_lag

    @property
    def bucket_cap_bytes(self) -> int:
        """``bucket_mb`` in bytes."""
        return bucket_cap_bytes(self.bucket_mb)


def exchange_options(options: ExchangeOptions | None, overrides: dict[str, Any]) -> ExchangeOptions:
    """``options`` (default: the defaults) with ``overrides`` applied, validated again.

    >>> exchange_options(None, {"mix": "grad"}).mix
    <Mix.GRAD: 'grad'>
    """
    base = options if options is not None else ExchangeOptions()
    return dataclasses.replace(base, **overrides) if overrides else base


@dataclass(frozen=True)
class DataOptions(_Options):
    """What each rank reads: built-in tensors, an ImageFolder, or generated images.

    ``data`` (an ImageFolder root) overrides ``dataset``; ``synthetic`` overrides both.
    """

    dataset: str = "digits"
    data: str | None = None
    synthetic: bool = False
    image_size: int = 224
    num_classes: int = 0
    batch_size: int = 32
    partition: str = "iid"
    workers: int = 2
    skip_corrupt: bool = False

    DATASETS = ("digits", "templates", "synthetic")

    def __post_init__(self) -> None:
        if self.data is None and self.dataset not in self.DATASETS:
            raise ValueError(
                f"unknown dataset {self.dataset!r} (--dataset); choose one of: "
                f"{', '.join(self.DATASETS)}, or pass --data DIR for an "
                "ImageFolder"
            )
        at_least(self.batch_size, 0, "--batch-size", strict=True)
        at_least(self.image_size, 16, "--image-size")
        at_least(self.num_classes, 0, "--num-classes")
        at_least(self.workers, 0, "--workers")
        parse_partition(self.partition)


@dataclass(frozen=True)
class ShuffleOptions(_Options):
    """The background sample shuffle (docs/shuffle.md): a round every ``shuffle_every``
    steps swaps ``shuffle_samples`` samples with a rotating partner."""

    shuffle: bool = True
    shuffle_every: int = 2
    shuffle_samples: int = 8

    def __post_init__(self) -> None:
        at_least(self.shuffle_every, 0, "--shuffle-every", strict=True)
        at_least(self.shuffle_samples, 0, "--shuffle-samples", strict=True)


def parse_partition(kind: str) -> tuple[str, float | None]:
    """``--partition``: ``"iid"`` -> ("iid", None); ``"dirichlet:0.5"`` -> ("dirichlet", 0.5).

    >>> parse_partition("dirichlet:0.1")
    ('dirichlet', 0.1)
    """
    name, _, arg = kind.strip().partition(":")
    if name in ("iid", "sorted") and not arg:
        return name, None
    if name == "dirichlet":
        try:
            alpha = float(arg)
        except ValueError:
            alpha = float("nan")
        if not (alpha > 0 and alpha != float("inf")):
            raise ValueError(
                f"--partition {kind!r}: dirichlet needs a positive concentration, "
                "e.g. dirichlet:0.5"
            )
        return name, alpha
    raise ValueError(
        f"--partition {kind!r} is not known; choose iid, sorted or dirichlet:ALPHA "
        "(e.g. dirichlet:0.5)"
    )


@dataclass(frozen=True)
class OptimOptions(_Options):
    """The local optimizer (SGD with momentum) and its learning-rate schedule: linear
    warm-up over ``warmup_epochs``, then cosine decay to zero at the last step."""

    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = 20
    max_steps: int = 0
    warmup_epochs: float = 0.0
    scale_lr: bool = False

    def __post_init__(self) -> None:
        at_least(self.lr, 0, "--lr", strict=True)
        at_least(self.epochs, 0, "--epochs", strict=True)
        for name in ("momentum", "weight_decay", "max_steps", "warmup_epochs"):
            at_least(getattr(self, name), 0, "--" + name.replace("_", "-"))


@dataclass(frozen=True)
class RunOptions(_Options):
    """Everything around the steps: deadlines, evaluation, logging, checkpoints, device, and
    what is offloaded to host memory (``offload``: names of :class:`Offload`, see
    :func:`parse_offload`)."""

    comm_timeout: float = DEFAULT_TIMEOUT_S
    eval_every: int = 1
    print_freq: int = 10
    metrics_out: str | None = None
    progress: bool = True
    run_dir: str | None = None
    checkpoint_every: int = 0
    resume: str | None = None
    evaluate: bool = False
    device: Device = Device.AUTO
    on_failure: OnFailure = OnFailure.ABORT
    offload: tuple[str, ...] = ()
    standin_profile: str | None = None  # --device standin:PROFILE (gossipgrad.devices)
    dilate: float = 1.0  # stand-in compute x this (run behind links this much slower)

    def __post_init__(self) -> None:
        device, profile = parse_device(self.device, self.standin_profile)
        self._set("device", device)
        self._set("standin_profile", profile)
        at_least(self.dilate, 0, "--dilate", strict=True)
        self._set("on_failure", choice(OnFailure, self.on_failure, "--on-failure"))
        self._set("offload", parse_offload(self.offload))
        at_least(self.comm_timeout, 0, "--comm-timeout", strict=True)
        at_least(self.eval_every, 0, "--eval-every", strict=True)
        at_least(self.print_freq, 0, "--print-freq", strict=True)
        at_least(self.checkpoint_every, 0, "--checkpoint-every")
        if self.checkpoint_every and not self.run_dir:
            raise ValueError("--checkpoint-every needs --run-dir (where checkpoints go)")
        if self.resume == "auto" and not self.run_dir:
            raise ValueError("--resume auto needs --run-dir (where to look for checkpoints)")

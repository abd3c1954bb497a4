"""The frozen option objects that every layer takes (the choices: gossipgrad.choices). PURE.

A setting is parsed and validated here, once, where its option object is built, with a
message that names the flag; below that it is typed. ``TrainConfig``
(:mod:`gossipgrad.engine.run.config`) composes these objects; ``DistributedOptimizer``, the
library adapters, ``tools/plan/`` and ``tools/bench/`` take the same ones.

    >>> opts = ExchangeOptions(strategy="allreduce", bucket_mb=4)
    >>> opts.strategy == Strategy.ALLREDUCE, opts.mix is Mix.GRAD
    (True, True)
    >>> ExchangeOptions(staleness=2)
    Traceback (most recent call last):
    ...
    ValueError: staleness must be 0 or 1, got 2
    >>> ExchangeOptions(strategy="ps", staleness=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: staleness=1 does not apply to strategy='ps' (its slack is max_lag S ...); drop it
"""

# Over 300 lines on purpose: every option object with its validation and the messages that name
# the flags.

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from gossipgrad.choices import (  # noqa: F401 - re-exported: the usual import path
    Device,
    ErrorFeedback,
    Mix,
    Offload,
    OnFailure,
    Optimizer,
    ShuffleMode,
    Strategy,
    SufficientFactors,
    Sync,
    Topology,
    at_least,
    bucket_cap_bytes,
    choice,
    parse_offload,
    respell,
    spell,
    spell_either,
)
from gossipgrad.registry import CODECS, DEVICES, RULES, STRATEGIES
from gossipgrad.specs import COMMON_FIELDS, NEUTRAL, DeviceSpec, StrategySpec

DEFAULT_BUCKET_MB = 25.0
"""Largest bucket in MiB (``--bucket-mb``): about what DDP and Horovod fuse by default."""

DEFAULT_SYNC_THRESHOLD = 1e-3
"""Consensus distance above which ``--sync adaptive`` averages globally (``--sync-threshold``;
chosen on digits, validated on templates: docs/benchmarks.md)."""

DEFAULT_MONITOR_EVERY = 10
"""Steps between two consensus-distance estimates of gossip (``--monitor-every``)."""

DEFAULT_WIRE = "fp32"
"""The wire codec (``--wire``): buckets travel as the parameters are (no cast)."""

DEFAULT_RULE = "average"
"""The mixing rule (``--rule``): ``(1 - w) x + w x_peer`` with the schedule's weight w."""

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
    """How a step's exchange runs: strategy, schedule, what is mixed, buckets, overlap, lag,
    wire codec and mixing rule.

    Which fields mean something depends on the strategy: its spec
    (:data:`gossipgrad.registry.STRATEGIES`, one module each in ``gossipgrad/strategies/``)
    lists the ones it reads, and a field it does not read, set away from its default, is
    refused with one line. The strategy's own combination rules (``spec.check``) run here
    too, so these objects are valid for their strategy once built.

    Args:
        strategy: a registered strategy name (gossip, allreduce, allreduce-param, local,
            ps, horovod, ddp, or one a plugin registered).
        topology: the gossip schedule; resolved per size by ``comm.schedule``.
        mix: what gossip averages with the peer (gradients or parameters); None: the
            strategy's own (gossip: ``param``; allreduce averages gradients,
            allreduce-param parameters, and neither can be told otherwise).
        staleness: 0 (the exchange completes this step) or 1 (at the next step, applied as
            a correction that keeps the mean exact; deterministic, unlike ``max_lag``).
        sync_every: a global average every N steps (0: only before evaluation/checkpoint).
        bucket_mb: the largest bucket in MiB (> 0).
        overlap: run bucket exchanges on the communication thread, behind compute.
        max_lag: how many steps a message may be behind the step that mixes it (0:
            lockstep); a rank waits only for a peer more than ``max_lag`` steps behind
            (``engine.timing.lagged``). With ``strategy="ps"``: the stale-synchronous slack.
        sync: see :class:`Sync`; :attr:`adaptive` says what ``auto`` resolves to.
        sync_threshold: the consensus distance above which ``sync="adaptive"`` averages.
        monitor_every: gossip estimates the consensus distance every N steps (one small
            allreduce; 0: never, which ``sync="adaptive"`` does not allow).
        seed: the shared seed of the schedule's per-cycle rotation.
        rotate: re-permute the schedule's numbering every cycle.
        sufficient_factors: send Linear layers' weight gradients as their factors
            (:class:`SufficientFactors`); ``on`` where the strategy cannot is an error.
        wire: the wire codec of every bucket this rank sends (:data:`registry.CODECS`).
        error_feedback: whether a lossy codec adds each cast's remainder to the next send
            (:class:`ErrorFeedback`; ``auto``: on for fp8 only); see :attr:`feedback`.
        rule: the mixing rule (:data:`registry.RULES`), ``NAME`` or ``NAME:ARG``.
        backward_passes_per_step: backward passes (gradient accumulation) before each
            step; a gradient bucket is sent after the last (Horovod's argument).
    """

    strategy: str = Strategy.GOSSIP.value
    topology: Topology = Topology.AUTO
    mix: Mix | None = None
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
    wire: str = DEFAULT_WIRE
    error_feedback: ErrorFeedback = ErrorFeedback.AUTO
    rule: str = DEFAULT_RULE
    backward_passes_per_step: int = 1

    def __post_init__(self) -> None:
        spec = STRATEGIES.get(self.strategy)
        self._set("strategy", spec.name)
        self._set("topology", choice(Topology, self.topology, "--topology"))
        self._set("sync", choice(Sync, self.sync, "--sync"))
        self._set(
            "sufficient_factors",
            choice(SufficientFactors, self.sufficient_factors, "--sufficient-factors"),
        )
        if self.staleness not in (0, 1):
            raise ValueError(f"{spell('--staleness')} must be 0 or 1, got {self.staleness}")
        for name in ("sync_every", "max_lag", "monitor_every"):
            at_least(getattr(self, name), 0, "--" + name.replace("_", "-"))
        at_least(self.sync_threshold, 0, "--sync-threshold", strict=True)
        at_least(self.backward_passes_per_step, 1, "--backward-passes-per-step")
        bucket_cap_bytes(self.bucket_mb)
        self._set("error_feedback", choice(ErrorFeedback, self.error_feedback, "--error-feedback"))
        codec = CODECS.get(self.wire)()
        if self.error_feedback is ErrorFeedback.ON and codec.lossless:
            raise ValueError(
                f"{spell('--error-feedback', 'on')} needs a lossy wire codec, not "
                f"{spell('--wire', self.wire)} (its casts lose nothing to feed back)"
            )
        RULES.get(self.rule.partition(":")[0])(self.rule.partition(":")[2] or None)
        self._resolve_mix(spec)
        self._refuse_unused(spec)
        if self.sufficient_factors is SufficientFactors.ON:
            why = spec.factor_obstacle(self)
            if why is not None:
                raise ValueError(
                    f"{spell('--sufficient-factors', 'on')} {why}; pass "
                    f"{spell_either('--sufficient-factors', 'auto', 'off')}"
                )
        spec.check(self)

    def _resolve_mix(self, spec: StrategySpec) -> None:
        """``mix=None``: the strategy's own. A strategy that fixes what it averages refuses
        the other."""
        fixed = spec.fixed_mix
        mix = None if self.mix is None else choice(Mix, self.mix, "--mix")
        if fixed is not None and mix not in (None, fixed):
            raise ValueError(
                f"{spell('--mix', mix)} does not apply to {spell('--strategy', spec.name)}: "
                f"{respell(spec.mix_reason)}"
            )
        self._set("mix", mix or fixed or Mix.PARAM)

    def _refuse_unused(self, spec: StrategySpec) -> None:
        """A field the strategy does not read, set away from its default: one line."""
        for f in fields(self):
            if f.name in COMMON_FIELDS or f.name in spec.uses or f.name == "mix":
                continue
            value = getattr(self, f.name)
            if value != f.default and value != NEUTRAL.get(f.name, f.default):
                flag = "--" + f.name.replace("_", "-")
                why = respell(spec.refusals.get(f.name, f"{spec.name} does not read it"))
                raise ValueError(
                    f"{spell(flag, getattr(self, f.name))} does not apply to "
                    f"{spell('--strategy', spec.name)} ({why}); drop it"
                )

    @property
    def rank_topology(self) -> Topology:
        """The topology of the schedule over ranks: ``topology``, except for a strategy
        that schedules nodes instead (gossip-node: its transport takes ``topology``)."""
        return Topology.AUTO if self.spec.pattern == "node" else self.topology

    @property
    def spec(self) -> StrategySpec:
        """The strategy's spec (:class:`gossipgrad.specs.StrategySpec`)."""
        return STRATEGIES.get(self.strategy)

    @property
    def feedback(self) -> bool | None:
        """Error feedback on (True), off (False) or the codec's default (None: ``auto``);
        what :func:`gossipgrad.comm.codecs.make_codec` takes."""
        if self.error_feedback is ErrorFeedback.AUTO:
            return None
        return self.error_feedback is ErrorFeedback.ON

    @property
    def adaptive(self) -> bool:
        """Whether adaptive averaging is on: ``sync="adaptive"``, or ``"auto"`` where the
        strategy says so (gossip with ``mix="grad"``: parameter mixing contracts consensus
        by itself).

        >>> ExchangeOptions(mix="grad").adaptive, ExchangeOptions(mix="param").adaptive
        (True, False)
        """
        if self.sync is Sync.AUTO:
            return self.spec.auto_adaptive(self)
        return self.sync is Sync.ADAPTIVE

    @property
    def monitors(self) -> bool:
        """Whether the consensus distance is estimated every ``monitor_every`` steps."""
        return self.spec.monitors(self)

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
    if not overrides:
        return base
    return dataclasses.replace(base, **mix_follows_strategy(base, overrides))


def wire_refusal(strategy: str, wire: str) -> str | None:
    """Why ``strategy`` does not run with ``--wire wire`` (the first line of the error
    ``train`` would give), or None when it does: one check for the planner and the bench.

        >>> wire_refusal("gossip", "bf16") is None, wire_refusal("horovod", "fp8") is None
        (True, False)
    """
    try:
        ExchangeOptions(strategy=strategy, wire=wire)
    except ValueError as exc:
        return str(exc).splitlines()[0]
    return None


def default_mix(strategy: str, adaptive: bool) -> Mix | None:
    """What a caller who names no mix gets, given whether the local optimizer is adaptive
    (Adam and its kin): gossip mixes gradients for those and parameters otherwise; None
    is the strategy's own. Measured: lab/records/optimizers.md, one seed (parameter mixing
    trailed gradient-averaging allreduce with Adam, gradient mixing did not; with SGD it
    is the other way round).

    >>> default_mix("gossip", True), default_mix("gossip", False), default_mix("ps", True)
    (<Mix.GRAD: 'grad'>, None, None)
    """
    if "mix" not in STRATEGIES.get(strategy).uses:
        return None
    return Mix.GRAD if adaptive else None


def mix_follows_strategy(base: ExchangeOptions, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides``, plus ``mix=None`` where they change the strategy and ``base.mix`` was
    only its old strategy's own (so the new strategy picks its own)."""
    if "strategy" not in overrides or "mix" in overrides:
        return overrides
    own = base.spec.fixed_mix or Mix.PARAM
    return {**overrides, "mix": None} if base.mix is own else overrides


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
                f"unknown dataset {self.dataset!r} ({spell('--dataset')}); choose one of: "
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


def parse_device(value: Any, arg: str | None = None) -> tuple[str, str | None]:
    """``--device``: ``(name, argument)``: ``auto``, ``cpu`` or ``cuda`` (no argument), or a
    registered device's ``NAME[:ARG]`` (:data:`gossipgrad.registry.DEVICES`; its spec checks
    the argument). ``arg`` is the argument given apart (a config round trip:
    ``device="standin", device_arg="resnet50"``); it must agree with ``value``'s.

        >>> parse_device("cpu"), parse_device(Device.AUTO)
        (('cpu', None), ('auto', None))
    """
    text = str(getattr(value, "value", value))
    head, sep, tail = text.partition(":")
    if head in {d.value for d in Device}:
        if sep or arg:
            raise ValueError(f"{spell('--device', text)} takes no argument; drop it")
        return head, None
    if head not in DEVICES:
        builtin = ", ".join(d.value for d in Device)
        plugins = ", ".join(f"{n}:ARG" for n in DEVICES.names())
        raise ValueError(
            f"unknown device {head!r} ({spell('--device')}); choose one of: {builtin}"
            + (f", {plugins}" if plugins else "")
        )
    named = tail if sep else arg
    if sep and arg and arg != tail:
        raise ValueError(f"{spell('--device', text)} and device_arg={arg!r} disagree; give one")
    DEVICES.get(head).check(named)
    return head, named


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
                f"{spell('--partition', kind)}: dirichlet needs a positive concentration, "
                "e.g. dirichlet:0.5"
            )
        return name, alpha
    raise ValueError(
        f"{spell('--partition', kind)} is not known; choose iid, sorted or dirichlet:ALPHA "
        "(e.g. dirichlet:0.5)"
    )


@dataclass(frozen=True)
class OptimOptions(_Options):
    """The local optimizer (SGD with momentum, optionally Nesterov's; Adam; AdamW) and its
    learning-rate schedule: linear warm-up over ``warmup_epochs``, then cosine decay to
    zero at the last step."""

    lr: float = 0.1
    momentum: float = 0.9
    optimizer: Optimizer = Optimizer.SGD
    nesterov: bool = False
    weight_decay: float = 0.0
    epochs: int = 20
    max_steps: int = 0
    warmup_epochs: float = 0.0
    scale_lr: bool = False

    def __post_init__(self) -> None:
        self._set("optimizer", choice(Optimizer, self.optimizer, "--optimizer"))
        at_least(self.lr, 0, "--lr", strict=True)
        at_least(self.epochs, 0, "--epochs", strict=True)
        if self.nesterov and (self.optimizer is not Optimizer.SGD or not self.momentum):
            raise ValueError(
                f"{spell('--nesterov', True)} needs {spell('--optimizer', 'sgd')} with "
                f"{spell('--momentum')} > 0"
            )
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
    device: str = Device.AUTO.value
    on_failure: OnFailure = OnFailure.ABORT
    offload: tuple[str, ...] = ()
    device_arg: str | None = None  # the ARG of --device NAME:ARG (a plugin's device)
    dilate: float = 1.0  # a simulated device's compute x this (links stood for this slower)

    def __post_init__(self) -> None:
        device, arg = parse_device(self.device, self.device_arg)
        self._set("device", device)
        self._set("device_arg", arg)
        at_least(self.dilate, 0, "--dilate", strict=True)
        if self.dilate != 1.0 and self.device_spec is None:
            raise ValueError(
                f"{spell('--dilate', self.dilate)} slows a simulated device's compute only: it "
                f"needs {spell('--device', 'standin:PROFILE')} (or drop it)"
            )
        self._set("on_failure", choice(OnFailure, self.on_failure, "--on-failure"))
        self._set("offload", parse_offload(self.offload))
        at_least(self.comm_timeout, 0, "--comm-timeout", strict=True)
        at_least(self.eval_every, 0, "--eval-every", strict=True)
        at_least(self.print_freq, 0, "--print-freq", strict=True)
        at_least(self.checkpoint_every, 0, "--checkpoint-every")
        if self.checkpoint_every and not self.run_dir:
            raise ValueError(
                f"{spell('--checkpoint-every')} needs {spell('--run-dir')} (where checkpoints go)"
            )
        if self.resume == "auto" and not self.run_dir:
            raise ValueError(
                f"{spell('--resume', 'auto')} needs {spell('--run-dir')} (where to look for "
                "checkpoints)"
            )

    @property
    def device_spec(self) -> DeviceSpec | None:
        """The registered device ``device`` names (None: auto, cpu or cuda)."""
        return None if self.device in {d.value for d in Device} else DEVICES.get(self.device)

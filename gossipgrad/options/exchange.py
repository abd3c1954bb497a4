"""How a step's exchange runs: :class:`ExchangeOptions`, the table's largest group. PURE.

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
ValueError: staleness=1 does not apply to strategy='ps' (its slack is slack S ...); drop it
"""

# Over 300 lines on purpose: the exchange's options with their help, validation and the
# messages that name the flags, and the default rule of the mix.

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from gossipgrad.choices import (
    ErrorFeedback,
    Mix,
    Strategy,
    SufficientFactors,
    Sync,
    Topology,
    at_least,
    bucket_cap_bytes,
    choice,
    respell,
    spell,
    spell_either,
)
from gossipgrad.options.table import OptionGroup, opt
from gossipgrad.registry import CODECS, RULES, STRATEGIES, TIMINGS, TOPOLOGIES
from gossipgrad.specs import COMMON_FIELDS, NEUTRAL, StrategySpec

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

DEFAULT_OUTER_LR = 0.7
"""``--rule outer``'s learning rate on the pseudo-gradient (``--outer-lr``): DiLoCo's (Douillard
et al. 2023, outer Nesterov at 0.7 with momentum 0.9)."""

DEFAULT_OUTER_MOMENTUM = 0.9
"""``--rule outer``'s momentum (``--outer-momentum``): DiLoCo's."""


@dataclass(frozen=True)
class ExchangeOptions(OptionGroup):
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
        timing: when a step's exchange is mixed in, ``NAME[:ARG]`` of
            :data:`gossipgrad.registry.TIMINGS`: ``lockstep`` (within the step),
            ``stale`` (at the next step, as a correction that keeps the mean exact;
            deterministic), ``lag:S`` (frames up to S steps behind, mixed as they arrive).
        staleness: the older spelling of ``timing="stale"`` (1) or lockstep (0).
        sync_every: a global average every N steps (0: only before evaluation/checkpoint).
        bucket_mb: the largest bucket in MiB (> 0).
        overlap: run bucket exchanges on the communication thread, behind compute.
        max_lag: the older spelling of ``timing="lag:S"`` (with ``strategy="ps"``, of
            ``slack``).
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
        slack: ps's stale-synchronous slack: a rank computes on parameters up to this many
            steps old (0: every step waits for the newest).
        outer_lr, outer_momentum: ``rule="outer"``'s step on the pseudo-gradient.
        dense_after: with local steps (``timing="local:H"``), exchange at every step from
            this fraction of the run on (1: never).
        dense_before: the same, until this fraction of the run (0: never).
    """

    strategy: str = opt(
        Strategy.GOSSIP.value,
        lambda: (
            "; ".join(f"{n}: {s.summary}" for n, s in STRATEGIES.items())
            + " (a plugin adds one: GOSSIPGRAD_PLUGINS=module)."
        ),
        choices=STRATEGIES.names,
    )
    topology: str = opt(
        Topology.AUTO.value,
        lambda: "; ".join(f"{n}: {s.summary}" for n, s in TOPOLOGIES.items()) + ".",
        choices=TOPOLOGIES.names,
    )
    mix: Mix | None = opt(
        None,
        "What gossip averages with its peer: grad (before the step) or param (after it); "
        "allreduce always averages gradients, allreduce-param parameters.",
        show_default="gossip: param under sgd, grad under adam and adamw",
    )
    timing: str = opt(
        "early",
        lambda: (
            "When a step's exchange is mixed in: "
            + "; ".join(
                f"{n}{':' + s.argument if s.argument else ''}: {s.summary}"
                for n, s in TIMINGS.items()
            )
            + "."
        ),
        metavar="NAME[:ARG]",
    )
    staleness: int = opt(0, "Older spelling: --staleness 1 is --timing stale.")
    sync_every: int = opt(0, "A global average every N steps (0: only before evaluation).")
    bucket_mb: float = opt(DEFAULT_BUCKET_MB, "Largest bucket (MiB).")
    overlap: bool = opt(True, "Exchange on the communication thread, behind compute.")
    max_lag: int = opt(0, "Older spelling: --max-lag S is --timing lag:S (ps: --slack S).")
    sync: Sync = opt(
        Sync.AUTO,
        "adaptive: also a global average when gossip's consensus distance exceeds "
        "--sync-threshold; auto: adaptive with --mix grad, off with --mix param.",
    )
    sync_threshold: float = opt(
        DEFAULT_SYNC_THRESHOLD,
        "Consensus distance (mean ||x_i - mean||^2 / ||mean||^2) that triggers it.",
    )
    monitor_every: int = opt(
        DEFAULT_MONITOR_EVERY, "Estimate gossip's consensus distance every N steps (0 = never)."
    )
    seed: int = opt(0, "The one seed: schedule rotation, data order and partition, shuffle.")
    rotate: bool = opt(True, "Re-permute the schedule's numbering every cycle.")
    sufficient_factors: SufficientFactors = opt(
        SufficientFactors.AUTO,
        "Send Linear layers' gradients as their factors (inputs, output gradients): auto "
        "when fewer bytes; needs --mix grad and gossip or allreduce.",
    )
    wire: str = opt(
        DEFAULT_WIRE,
        "Wire codec of every bucket sent: fp32 (as the parameters are), bf16 or fp16 (half "
        "the bytes), fp8 (a quarter; e4m3 with a scale per 512 values).",
        choices=CODECS.names,
    )
    error_feedback: ErrorFeedback = opt(
        ErrorFeedback.AUTO,
        "Add each cast's remainder to the next send of the same bucket (auto: on for fp8).",
    )
    rule: str = opt(
        DEFAULT_RULE,
        lambda: (
            f"Mixing rule NAME[:ARG] ({', '.join(RULES.names())}; average:W fixes the "
            "peer's weight W, default the schedule's; outer[:nesterov|sgd] takes an outer "
            "step on the change since the last exchange of --timing local:H)."
        ),
    )
    backward_passes_per_step: int = opt(
        1, "Backward passes (gradient accumulation) before each step.", cli=False
    )
    slack: int = opt(0, "ps: compute on parameters up to N steps old (stale-synchronous).")
    outer_lr: float = opt(
        DEFAULT_OUTER_LR,
        "--rule outer: the outer step's learning rate on the pseudo-gradient (the model at "
        "the last exchange minus the mixed model).",
    )
    outer_momentum: float = opt(
        DEFAULT_OUTER_MOMENTUM, "--rule outer: the outer step's momentum (0 = none)."
    )
    dense_after: float = opt(
        1.0, "--timing local:H: exchange every step from this fraction of the run on (1 = never)."
    )
    dense_before: float = opt(
        0.0, "--timing local:H: exchange every step until this fraction of the run (0 = never)."
    )
    extras: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        spec = STRATEGIES.get(self.strategy)
        self._set("strategy", spec.name)
        self._set("topology", TOPOLOGIES.get(self.topology).name)
        self._set("sync", choice(Sync, self.sync, "--sync"))
        self._set(
            "sufficient_factors",
            choice(SufficientFactors, self.sufficient_factors, "--sufficient-factors"),
        )
        if self.staleness not in (0, 1):
            raise ValueError(f"{spell('--staleness')} must be 0 or 1, got {self.staleness}")
        for name in ("sync_every", "max_lag", "monitor_every", "slack"):
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
        rule = RULES.get(self.rule.partition(":")[0])(self.rule.partition(":")[2] or None)
        self._resolve_timing(spec)
        self._check_local(rule)
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

    def _resolve_timing(self, spec: StrategySpec) -> None:
        """``timing`` parsed and checked by its spec; ``staleness`` and ``max_lag`` are its
        older spellings (``--staleness 1`` is ``--timing stale``, ``--max-lag S`` is
        ``--timing lag:S``; ps's ``--max-lag`` is its ``--slack``): given alone they set
        the timing, given with it they must agree, and afterwards they hold the values
        the timing stands for."""
        if spec.lag_is_slack and self.max_lag:
            if self.slack not in (0, self.max_lag):
                raise ValueError(
                    f"{spell('--max-lag', self.max_lag)} and {spell('--slack', self.slack)}: "
                    f"the first is the older spelling of the second; give one"
                )
            self._set("slack", self.max_lag)
            self._set("max_lag", 0)
        name, _, arg = str(self.timing).partition(":")
        timing = TIMINGS.get(name)
        args = timing.parse(arg or None)
        legacy = {"staleness": self.staleness, "max_lag": self.max_lag}
        given = " ".join(spell("--" + k.replace("_", "-"), v) for k, v in legacy.items() if v)
        if given:
            refusal = timing.legacy_refusal(timing.parse(arg or None), given)
            if refusal is not None:
                raise ValueError(refusal)
            implied = _timing_of(legacy)
            if name in ("early", "lockstep") and not arg:
                timing, args = implied
            elif (timing, args) != implied:
                raise ValueError(
                    f"{spell('--timing', timing.spelled(args))} and {given}: the second is an "
                    f"older spelling of {spell('--timing', implied[0].spelled(implied[1]))}; "
                    "give one"
                )
        self._set("timing", timing.spelled(args))
        for key in legacy:
            self._set(key, timing.aliases(args).get(key, 0))
        try:
            timing.check(args, self)
        except ValueError as exc:  # name the option the reader set
            if not given:
                raise
            raise ValueError(str(exc).replace(spell("--timing", self.timing), given)) from None

    def _check_local(self, rule: Any) -> None:
        """The outer rule's and the dense window's options: ranges, and refused (one line)
        where nothing reads them."""
        at_least(self.outer_lr, 0, "--outer-lr", strict=True)
        at_least(self.outer_momentum, 0, "--outer-momentum")
        if self.outer_momentum >= 1:
            raise ValueError(f"{spell('--outer-momentum')} must be < 1, got {self.outer_momentum}")
        for name in ("dense_after", "dense_before"):
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            at_least(value, 0, flag)
            if value > 1:
                raise ValueError(f"{spell(flag)} must be <= 1, got {value}")
        if self.dense_before > self.dense_after:
            raise ValueError(
                f"{spell('--dense-before', self.dense_before)} is after "
                f"{spell('--dense-after', self.dense_after)}: the two windows would overlap; "
                "give one, or the early window's end before the late one's start"
            )
        local = self.timing_spec.local_steps
        timing = spell("--timing", self.timing)
        dense = {"--dense-after": (self.dense_after, 1.0)}
        dense["--dense-before"] = (self.dense_before, 0.0)
        for flag, (value, off) in dense.items():
            if value != off and not local:
                raise ValueError(
                    f"{spell(flag, value)} needs {spell('--timing', 'local:H')} (with {timing} "
                    "every step already exchanges); drop it"
                )
        outer = bool(getattr(rule, "outer", False))
        if outer and not local:
            raise ValueError(
                f"{spell('--rule', self.rule)} steps on the change since the last exchange, "
                f"which needs {spell('--timing', 'local:H')} (local:1 exchanges every step), "
                f"not {timing}"
            )
        tuned = {"--outer-lr": (self.outer_lr, DEFAULT_OUTER_LR)}
        tuned["--outer-momentum"] = (self.outer_momentum, DEFAULT_OUTER_MOMENTUM)
        for flag, (value, default) in tuned.items():
            if value != default and not outer:
                raise ValueError(
                    f"{spell(flag, value)} is the outer rule's: pass "
                    f"{spell('--rule', 'outer')} (with {spell('--timing', 'local:H')}) or drop it"
                )

    @property
    def timing_spec(self) -> Any:
        """The timing's spec (:class:`gossipgrad.specs.TimingSpec`)."""
        return TIMINGS.get(self.timing.partition(":")[0])

    @property
    def timing_args(self) -> tuple[int, ...]:
        """The timing's parsed argument (``lag:2`` -> ``(2,)``)."""
        return self.timing_spec.parse(self.timing.partition(":")[2] or None)

    def _resolve_mix(self, spec: StrategySpec) -> None:
        """``mix=None``: the default rule. A strategy that fixes what it averages takes its
        own (and refuses the other); one that mixes what suits the local optimizer leaves
        it open until an optimizer binds it (:meth:`bind`)."""
        fixed = spec.fixed_mix
        mix = None if self.mix is None else choice(Mix, self.mix, "--mix")
        if self.timing_spec.local_steps:  # an outer step moves parameters, whatever the mix
            if mix is Mix.GRAD:
                raise ValueError(
                    f"{spell('--mix', 'grad')} does not apply with "
                    f"{spell('--timing', self.timing)}: its exchange moves the parameters (their "
                    f"change since the last exchange is the pseudo-gradient); drop {spell('--mix')}"
                )
            self._set("mix", Mix.PARAM)
            return
        if fixed is not None and mix not in (None, fixed):
            raise ValueError(
                f"{spell('--mix', mix)} does not apply to {spell('--strategy', spec.name)}: "
                f"{respell(spec.mix_reason)}"
            )
        follows = "mix" in spec.uses and fixed is None
        self._set("mix", mix or fixed or (None if follows else Mix.PARAM))

    def bind(self, adaptive: bool) -> ExchangeOptions:
        """These options for a local optimizer that is ``adaptive`` (Adam and its kin) or
        not: the one default rule of ``mix``, whatever the entry point (the command line,
        ``DistributedOptimizer``, Horovod's face). A mix left open becomes ``grad`` under
        an adaptive optimizer and ``param`` otherwise (measured: parameter mixing trailed
        gradient-averaging allreduce with Adam, gradient mixing did not; with SGD the other
        way round). Every distributed optimizer binds the options it is given.

            >>> ExchangeOptions().bind(adaptive=True).mix, ExchangeOptions().bind(False).mix
            (<Mix.GRAD: 'grad'>, <Mix.PARAM: 'param'>)
            >>> ExchangeOptions(mix="param").bind(adaptive=True).mix
            <Mix.PARAM: 'param'>
        """
        if self.mix is not None:
            return self
        return dataclasses.replace(self, mix=Mix.GRAD if adaptive else Mix.PARAM)

    @property
    def extra(self) -> dict[str, Any]:
        """Plugins' options (:func:`gossipgrad.options.table.register`) by name."""
        return dict(self.extras)

    def _refuse_unused(self, spec: StrategySpec) -> None:
        """A field the strategy does not read, set away from its default: one line."""
        timing_uses = self.timing_spec.uses
        for f in fields(self):
            if f.name in COMMON_FIELDS or f.name in spec.uses or f.name in ("mix", "extras"):
                continue
            if f.name in timing_uses and "timing" in spec.uses:
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
    def rank_topology(self) -> str:
        """The topology of the schedule over ranks: ``topology``, except for a strategy
        that schedules nodes instead (gossip-node: its transport takes ``topology``)."""
        return Topology.AUTO.value if self.spec.exchange_shape.own_schedule else self.topology

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


def _timing_of(legacy: dict[str, int]) -> tuple[Any, tuple[int, ...]]:
    """The timing and argument that ``staleness`` and ``max_lag`` spell."""
    lag, stale = legacy["max_lag"], legacy["staleness"]
    if lag:
        return TIMINGS.get("lag"), (lag, 1) if stale else (lag,)
    return TIMINGS.get("stale" if stale else "lockstep"), ()


def exchange_options(options: ExchangeOptions | None, overrides: dict[str, Any]) -> ExchangeOptions:
    """``options`` with ``overrides`` applied, validated again; without ``options``, the
    defaults under the ``GOSSIPGRAD_*`` variables that are set (a keyword > its variable >
    the default, as for the command line).

    >>> exchange_options(None, {"mix": "grad"}).mix
    <Mix.GRAD: 'grad'>
    """
    if options is None:
        from gossipgrad.options import from_environment

        return ExchangeOptions(**{**from_environment(ExchangeOptions), **overrides})
    if not overrides:
        return options
    return dataclasses.replace(options, **mix_follows_strategy(options, overrides))


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


def mix_follows_strategy(base: ExchangeOptions, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides``, plus ``mix=None`` where they change the strategy and ``base.mix`` was
    only its old strategy's own (so the new strategy's rule applies)."""
    if "strategy" not in overrides or "mix" in overrides:
        return overrides
    own = base.spec.fixed_mix or Mix.PARAM
    return {**overrides, "mix": None} if base.mix in (None, own) else overrides

"""What a strategy says about itself (``STRATEGIES.register(name, spec)``). PURE."""

from __future__ import annotations

from typing import Any, ClassVar

from gossipgrad.choices import spell
from gossipgrad.registry import SHAPES


class StrategySpec:
    """What one strategy is: the options it reads, what it sends, what it supports, and how
    it builds its optimizer. One subclass per module in ``gossipgrad/strategies/``.

    Class attributes (override in a subclass):
        name: the ``--strategy`` value.
        summary: one line for ``--help`` and the docs.
        uses: the :class:`~gossipgrad.options.ExchangeOptions` fields it reads besides the
            common ones (:data:`COMMON_FIELDS`); any other field set away from its default
            is refused with one line (never silently ignored).
        shape: the registered exchange shape its buckets move in (``peer``, ``ring``,
            ``server``, ``node``, ``none``, or a plugin's: :data:`gossipgrad.registry.SHAPES`).
        collective: every rank joins every step's exchange, so no rank can run ahead.
        identical: the ranks' parameters stay bit-identical every step (``synchronize``
            checks instead of averaging).
        factor_pattern: how it sends sufficient factors (``"peer"``, ``"allgather"``), or
            None when it sends none.
        shrink: it can follow a membership change (``--on-failure continue``).
        wraps_optimizer_class: it replaces the optimizer's class (Horovod does), so
            ``--offload optimizer`` cannot wrap it.
        library: the exchange runs inside another library (Horovod, DDP), not through
            gossipgrad's communicator.
        lag_is_slack: ``max_lag`` is this strategy's ``slack`` (ps: the older spelling).
        own_collective: its allreduce is its library's own ring (torch.distributed's gloo
            or NCCL), not the job's MPI: the planner prices it as a plain ring on the
            measured link, without the MPI allreduce's calibration factors.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    uses: ClassVar[frozenset[str]] = frozenset()
    shape: ClassVar[str] = "none"
    collective: ClassVar[bool] = False
    identical: ClassVar[bool] = False
    factor_pattern: ClassVar[str | None] = None
    shrink: ClassVar[bool] = False
    wraps_optimizer_class: ClassVar[bool] = False
    library: ClassVar[bool] = False
    own_collective: ClassVar[bool] = False
    lag_is_slack: ClassVar[bool] = False
    fixed_mix: ClassVar[Any] = None
    mix_reason: ClassVar[str] = ""
    refusals: ClassVar[dict[str, str]] = {}

    def check(self, opts: Any) -> None:
        """Combination rules of this strategy's own (ValueError, one line naming the
        options; :func:`gossipgrad.choices.spell` spells them). Called after the generic
        checks of :class:`~gossipgrad.options.ExchangeOptions`."""

    def factor_obstacle(self, opts: Any, size: int | None = None) -> str | None:
        """Why ``opts`` send no sufficient factors (None: they can). The rules, once:
        a strategy that sends factors at all, gradients mixed (parameters have no factors),
        staleness 0 (a stale exchange is applied as a correction of the buckets), max-lag 0
        (a lagged frame carries whole buckets), and more than one rank."""
        if self.factor_pattern is None:
            return (
                f"needs a strategy that sends factors ({spell('--strategy', self.name)} sends none)"
            )
        if opts.mix != "grad":  # a Mix (a StrEnum) compares equal to its value
            return (
                f"needs {spell('--mix', 'grad')} ({spell('--mix', 'param')} averages "
                "parameters, which have no factors)"
            )
        if opts.staleness:
            return (
                f"needs {spell('--staleness', 0)} (a stale exchange is applied as a "
                "correction of the buckets)"
            )
        if opts.max_lag:
            return f"needs {spell('--max-lag', 0)} (a lagged frame carries whole buckets)"
        if opts.backward_passes_per_step > 1:
            return (
                f"needs {spell('--backward-passes-per-step', 1)} (the rows of every pass "
                "would have to be agreed at the first step)"
            )
        if size == 1:
            return "needs more than one rank (one rank exchanges nothing)"
        return None

    def fusion_window_s(self) -> float | None:
        """Seconds within which a library fuses whatever gradients became ready into one
        message (Horovod's cycle), up to the bucket cap; None: fixed-size buckets, each
        sent once it is full (gossipgrad's own, DDP's). The planner buckets by it."""
        return None

    def auto_adaptive(self, opts: Any) -> bool:
        """What ``sync="auto"`` means: adaptive averaging on or off (off: the ranks stay
        together without it)."""
        return False

    def monitors(self, opts: Any) -> bool:
        """Whether the consensus distance is estimated every ``monitor_every`` steps."""
        return False

    def cannot_shrink(self, opts: Any) -> str | None:
        """Why these options cannot follow a membership change (None: they can)."""
        return None if self.shrink else f"strategy {self.name} cannot shrink its communicator"

    @property
    def exchange_shape(self) -> Any:
        """The :class:`~gossipgrad.specs.ShapeSpec` that :attr:`shape` names."""
        return SHAPES.get(self.shape)

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        """Bytes one rank sends per step to exchange ``nbytes`` of buckets (its shape's
        count)."""
        return 0.0 if size == 1 else float(self.exchange_shape.bytes_per_step(nbytes, size))

    def agreement_period(self, opts: Any) -> int:
        """Steps between two stop agreements (1: every step): the timing's."""
        return int(opts.timing_spec.agreement_period(opts.timing_args))

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        """The distributed optimizer for ``opts`` (collective: every rank calls it)."""
        raise NotImplementedError(f"strategy {self.name!r} does not say how to build itself")


COMMON_FIELDS = frozenset({"strategy", "topology", "seed", "rotate"})
"""ExchangeOptions fields every strategy accepts: the schedule's (the background shuffle and
the start-up agreement use it whatever the strategy) and the seed."""

NEUTRAL = {
    "sufficient_factors": "off",
    "error_feedback": "off",
    "sync": "off",
    "sync_every": 0,
    "max_lag": 0,
    "staleness": 0,
    "timing": "lockstep",
    "slack": 0,
    "monitor_every": 0,
}
"""Values that switch a feature off: accepted by every strategy, also one without the
feature (a launch may pass ``--sufficient-factors off`` to every contender)."""

"""Every choice once: the enums of the command-line choices, and the checks every option
object uses (``choice``, ``at_least``). PURE: stdlib only. :mod:`gossipgrad.options`
re-exports all of it, so ``from gossipgrad.options import Strategy`` is the usual import.
"""

from __future__ import annotations

import enum
import math
from typing import Any, TypeVar

E = TypeVar("E", bound=enum.Enum)


class Strategy(enum.StrEnum):
    """How ranks combine their work (``--strategy``)."""

    GOSSIP = "gossip"  # one peer per step along the schedule
    ALLREDUCE = "allreduce"  # gossipgrad's own bucketed allreduce
    LOCAL = "local"  # no communication: the lower bound on step time
    HOROVOD = "horovod"  # horovod.torch's DistributedOptimizer
    DDP = "ddp"  # torch DistributedDataParallel
    PS = "ps"  # a sharded parameter server colocated with the workers (engine/ps.py)

    @property
    def library(self) -> bool:
        """True where a library (Horovod, DDP) runs the exchange: allreduce every step."""
        return self in (Strategy.HOROVOD, Strategy.DDP)

    @property
    def collective(self) -> bool:
        """True where every rank joins every step's exchange (an allreduce), so no rank can
        run ahead of another: ``--max-lag`` cannot apply."""
        return self in (Strategy.ALLREDUCE, Strategy.HOROVOD, Strategy.DDP)

    def bytes_sent(self, nbytes: float, size: int) -> float:
        """Bytes one rank sends per step to exchange ``nbytes`` of model.

        Gossip sends the bucket once to its one peer; the allreduce family is counted as a
        ring allreduce, 2 (size - 1) / size x nbytes (MPI or a library may pick another
        algorithm: recursive doubling sends log2(size) x). ps pushes each bucket's gradient
        to its owner and the owner sends the parameters back to the size - 1 others: the
        same 2 (size - 1) / size x nbytes, as a mean over ranks (a rank that owns more than
        1/size of the model sends more than that, one that owns less sends less).

            >>> Strategy.ALLREDUCE.bytes_sent(100, 4), Strategy.GOSSIP.bytes_sent(100, 4)
            (150.0, 100.0)
            >>> Strategy.PS.bytes_sent(100, 4)
            150.0
        """
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if size == 1 or self is Strategy.LOCAL:
            return 0.0
        if self is Strategy.GOSSIP:
            return float(nbytes)
        return 2.0 * (size - 1) / size * nbytes


class Mix(enum.StrEnum):
    """What gossip averages with the peer (``--mix``)."""

    GRAD = "grad"  # gradients, before the optimizer step (the paper's description)
    PARAM = "param"  # parameters, after the optimizer step (contracts consensus)


class SufficientFactors(enum.StrEnum):
    """Whether a Linear layer's weight gradient travels as its sufficient factors, the
    batch inputs and output gradients (``--sufficient-factors``; docs/architecture.md)."""

    AUTO = "auto"  # per layer, whichever form sends fewer bytes (plan.factors)
    ON = "on"  # factors for every eligible Linear layer
    OFF = "off"  # never: every gradient travels in the buckets

    def check(self, strategy: Strategy, mix: Mix, staleness: int, max_lag: int = 0) -> None:
        """ValueError unless ``on`` can take effect with these options; ``auto`` and
        ``off`` are always accepted (``auto`` sends no factors where none can go).

            >>> SufficientFactors.ON.check(Strategy.GOSSIP, Mix.PARAM, 0)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: --sufficient-factors on needs --mix grad ...
        """
        if self is not SufficientFactors.ON:
            return
        if strategy not in FACTOR_STRATEGIES:
            names = " or ".join(s.value for s in FACTOR_STRATEGIES)
            raise ValueError(
                f"--sufficient-factors on needs --strategy {names} (got "
                f"{strategy.value}); pass --sufficient-factors auto or off"
            )
        if mix is not Mix.GRAD and strategy is not Strategy.PS:  # ps: gradients always
            raise ValueError(
                "--sufficient-factors on needs --mix grad (--mix param averages "
                "parameters, which have no factors); pass --mix grad, or "
                "--sufficient-factors auto or off"
            )
        if staleness:
            raise ValueError(
                "--sufficient-factors on needs --staleness 0 (a stale exchange "
                "is applied as a correction of the gradient buckets); pass "
                "--staleness 0, or --sufficient-factors auto or off"
            )
        if max_lag:
            raise ValueError(
                "--sufficient-factors on needs --max-lag 0 (a lagged frame "
                "carries whole buckets); pass --max-lag 0, or "
                "--sufficient-factors auto or off"
            )


class Sync(enum.StrEnum):
    """When gossip takes a global average besides ``--sync-every`` (``--sync``)."""

    AUTO = "auto"  # adaptive for gossip with --mix grad, off otherwise
    OFF = "off"  # only --sync-every and before evaluation/checkpoints
    ADAPTIVE = "adaptive"  # also when the monitored consensus distance > --sync-threshold


class Topology(enum.StrEnum):
    """The partner schedule (``--topology``)."""

    AUTO = "auto"  # hypercube for power-of-two sizes, else dissemination
    HYPERCUBE = "hypercube"
    DISSEMINATION = "dissemination"


class ShuffleMode(enum.StrEnum):
    """Where shuffle rounds run (``ShuffleWorker(mode=...)``)."""

    AUTO = "auto"  # thread when the transport allows it, else inline
    THREAD = "thread"  # rounds on a background thread (needs MPI_THREAD_MULTIPLE)
    INLINE = "inline"  # rounds run synchronously inside on_step


class OnFailure(enum.StrEnum):
    """What the survivors do when a rank dies (``--on-failure``)."""

    ABORT = "abort"  # end the job on every rank with a non-zero code
    CONTINUE = "continue"  # revoke, shrink, agree, continue (needs an MPI with ULFM)


class Offload(enum.StrEnum):
    """What moves from device memory to (pinned) host memory (``--offload``)."""

    ACTIVATIONS = "activations"  # tensors saved for backward, copied back for it
    OPTIMIZER = "optimizer"  # optimizer state, and the update that reads it


def parse_offload(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``--offload``: ``"optimizer,activations"`` -> ``('activations', 'optimizer')``.

    Accepts a comma-separated string (``""`` or ``"none"``: nothing) or a sequence of names;
    returns them sorted and once each, as plain strings (they go into checkpoints).

        >>> parse_offload("optimizer,activations"), parse_offload("none")
        (('activations', 'optimizer'), ())
    """
    items = value.split(",") if isinstance(value, str) else list(value or ())
    names = {str(i).strip() for i in items} - {"", "none"}
    return tuple(sorted(choice(Offload, n, "--offload").value for n in names))


class Device(enum.StrEnum):
    """Where the model runs (``--device``)."""

    AUTO = "auto"  # cuda:<node-local rank> when CUDA is available, else cpu
    CPU = "cpu"
    CUDA = "cuda"


FACTOR_STRATEGIES: tuple[Strategy, ...] = (Strategy.GOSSIP, Strategy.ALLREDUCE, Strategy.PS)
"""Strategies that can exchange sufficient factors (gossip: with the peer; allreduce and ps:
an all-gather, Poseidon's sufficient-factor broadcast, the layer then updated on every rank).
Library strategies (horovod, ddp) run their own allreduce; local sends nothing."""


def choice(enum_type: type[E], value: Any, flag: str) -> E:
    """``enum_type(value)``, or ValueError naming ``flag`` and listing the choices.

    >>> choice(Mix, "grad", "--mix") is Mix.GRAD
    True
    """
    try:
        return enum_type(value)
    except ValueError:
        values = ", ".join(str(e.value) for e in enum_type)
        where = f" ({flag})" if flag.startswith("--") else ""
        raise ValueError(
            f"unknown {flag.lstrip('-')} {value!r}{where}; choose one of: {values}"
        ) from None


def at_least(value: float, low: float, flag: str, strict: bool = False) -> None:
    """ValueError naming ``flag`` unless ``value`` is a finite number ``>= low`` (``> low``
    when ``strict``). NaN and infinity are refused by name (``nan < 0`` is False, so a
    comparison alone would let NaN through).

        >>> at_least(float("nan"), 0, "--lr", strict=True)
        Traceback (most recent call last):
        ...
        ValueError: --lr must be a finite number, got nan
    """
    finite(value, flag)
    if value < low or (strict and value == low):
        raise ValueError(f"{flag} must be {'>' if strict else '>='} {low:g}, got {value}")


def finite(value: float, flag: str) -> None:
    """ValueError naming ``flag`` unless ``value`` is a finite number (not NaN, not +-inf)."""
    try:
        ok = math.isfinite(value)
    except TypeError:  # not a number at all
        ok = False
    if not ok:
        raise ValueError(f"{flag} must be a finite number, got {value!r}")


def bucket_cap_bytes(bucket_mb: float) -> int:
    """``--bucket-mb`` (MiB, > 0) in bytes.

    >>> bucket_cap_bytes(0.25)
    262144
    """
    at_least(bucket_mb, 0, "--bucket-mb", strict=True)
    return int(bucket_mb * 2**20)

"""Every choice once: the enums of the command-line choices, and the checks every option
object uses (``choice``, ``at_least``). PURE: stdlib only. :mod:`gossipgrad.options`
re-exports all of it, so ``from gossipgrad.options import Strategy`` is the usual import.
"""

from __future__ import annotations

import contextlib
import enum
import math
import re
from collections.abc import Iterator
from typing import Any, TypeVar

E = TypeVar("E", bound=enum.Enum)


class Strategy(enum.StrEnum):
    """The built-in ``--strategy`` names. A strategy is a spec object found by name in
    :data:`gossipgrad.registry.STRATEGIES` (one module each in ``gossipgrad/strategies/``,
    where a new one is added); this enum only lists the built-in names."""

    GOSSIP = "gossip"  # one peer per step along the schedule
    ALLREDUCE = "allreduce"  # gossipgrad's own bucketed allreduce of gradients
    ALLREDUCE_PARAM = "allreduce-param"  # the same, averaging parameters after each step
    LOCAL = "local"  # no communication: the lower bound on step time
    HOROVOD = "horovod"  # horovod.torch's DistributedOptimizer
    DDP = "ddp"  # torch DistributedDataParallel
    PS = "ps"  # a sharded parameter server colocated with the workers


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


class Sync(enum.StrEnum):
    """When gossip takes a global average besides ``--sync-every`` (``--sync``)."""

    AUTO = "auto"  # adaptive for gossip with --mix grad, off otherwise
    OFF = "off"  # only --sync-every and before evaluation/checkpoints
    ADAPTIVE = "adaptive"  # also when the monitored consensus distance > --sync-threshold


class Topology(enum.StrEnum):
    """The partner schedule (``--topology``)."""

    AUTO = "auto"  # hypercube for power-of-two sizes, else base2 (both exact in finite time)
    HYPERCUBE = "hypercube"  # power-of-two sizes: the exact mean after log2(size) steps
    DISSEMINATION = "dissemination"  # any size; contracts, exact only for powers of two
    BASE2 = "base2"  # any size: the exact mean after one pass (comm/base2.py), some ranks idle


class ErrorFeedback(enum.StrEnum):
    """Whether a lossy wire codec adds the remainder of each cast to the next send of the
    same buffer (``--error-feedback``; gossipgrad/comm/codecs/lossy.py)."""

    AUTO = "auto"  # the codec's own default: on for fp8, off for bf16 and fp16
    ON = "on"
    OFF = "off"


class ShuffleMode(enum.StrEnum):
    """Where shuffle rounds run (``ShuffleWorker(mode=...)``)."""

    AUTO = "auto"  # thread when the transport allows it, else inline
    THREAD = "thread"  # rounds on a background thread (needs MPI_THREAD_MULTIPLE)
    INLINE = "inline"  # rounds run synchronously inside on_step


class OnFailure(enum.StrEnum):
    """What the survivors do when a rank dies (``--on-failure``)."""

    ABORT = "abort"  # end the job on every rank with a non-zero code
    CONTINUE = "continue"  # revoke, shrink, agree, continue (needs an MPI with ULFM)
    RESPAWN = "respawn"  # as continue, then replacements take the dead ranks' places


class Optimizer(enum.StrEnum):
    """The local torch optimizer of ``gossipgrad train`` (``--optimizer``)."""

    SGD = "sgd"  # torch.optim.SGD with --momentum (and --nesterov)
    ADAM = "adam"  # torch.optim.Adam (betas 0.9, 0.999)
    ADAMW = "adamw"  # torch.optim.AdamW (decoupled --weight-decay)


class Offload(enum.StrEnum):
    """What moves from device memory to (pinned) host memory (``--offload``)."""

    ACTIVATIONS = "activations"  # tensors saved for backward, copied back for it
    OPTIMIZER = "optimizer"  # optimizer state, and the update that reads it


def choice_set(
    enum_type: type[E], value: str | tuple[str, ...] | list[str] | None, flag: str
) -> tuple[str, ...]:
    """A set of choices of ``enum_type`` given as ``flag``: a comma-separated string (``""``
    or ``"none"``: nothing) or a sequence of names; returned sorted and once each, as plain
    strings (they go into checkpoints).

        >>> choice_set(Offload, "optimizer,activations", "--offload")
        ('activations', 'optimizer')
        >>> choice_set(Offload, "none", "--offload")
        ()
    """
    items = value.split(",") if isinstance(value, str) else list(value or ())
    names = {str(i).strip() for i in items} - {"", "none"}
    return tuple(sorted(str(choice(enum_type, n, flag).value) for n in names))


class MergeAt(enum.StrEnum):
    """When the ranks' models are replaced by their global average (``--merge-at``)."""

    END = "end"  # once, before the last evaluation
    EVAL = "eval"  # before every evaluation
    CHECKPOINT = "checkpoint"  # before every checkpoint (what --resume restarts from)


class Device(enum.StrEnum):
    """The built-in ``--device`` values; a plugin's device is ``NAME[:ARG]``
    (:data:`gossipgrad.registry.DEVICES`)."""

    AUTO = "auto"  # cuda:<node-local rank> when CUDA is available, else cpu
    CPU = "cpu"
    CUDA = "cuda"


_SPELLING = {"cli": False}


def use_cli_names(on: bool = True) -> None:
    """Spell options as command-line flags in messages (the CLI calls this at start-up);
    the default spells them as the library's keyword arguments."""
    _SPELLING["cli"] = on


def cli_spelling() -> bool:
    """Whether messages spell options as command-line flags now (:func:`use_cli_names`)."""
    return _SPELLING["cli"]


@contextlib.contextmanager
def cli_names() -> Iterator[None]:
    """Spell options as flags inside the block (the CLI's commands, their tests)."""
    before = _SPELLING["cli"]
    use_cli_names(True)
    try:
        yield
    finally:
        use_cli_names(before)


def spell(flag: str, value: Any = ...) -> str:
    """``flag`` (and ``value``) as the reader wrote it: ``--max-lag 2`` on the command line,
    ``max_lag=2`` from the library (:func:`use_cli_names`). Text that is not a flag is
    returned as it is.

    >>> spell("--max-lag", 2), spell("--mix", "grad"), spell("--overlap", False)
    ('max_lag=2', "mix='grad'", 'overlap=False')
    >>> use_cli_names(); spell("--max-lag", 2), spell("--overlap", False); use_cli_names(False)
    ('--max-lag 2', '--no-overlap')
    """
    if not flag.startswith("--"):
        return flag
    value = getattr(value, "value", value)
    if _SPELLING["cli"]:
        if isinstance(value, bool):
            return flag if value else "--no-" + flag[2:]
        return flag if value is ... else f"{flag} {value}"
    name = flag[2:].replace("-", "_")  # the library keyword
    return name if value is ... else f"{name}={value!r}"


def timeout_hint() -> str:
    """How to give every wait longer, for the reader: the flag on the command line, the
    argument of ``gossipgrad.init`` from the library.

    >>> timeout_hint()
    'raise gossipgrad.init(timeout=SECONDS) if the network is slow'
    """
    if _SPELLING["cli"]:
        return "raise --comm-timeout if the network is slow"
    return "raise gossipgrad.init(timeout=SECONDS) if the network is slow"


def peer_hint(peer: int) -> str:
    """What a wait for ``peer`` asks: whether it is alive; from the library also whether it
    ran out of data (its loop ended and it is neither stepping nor in ``join()``).

    >>> peer_hint(2)
    'is rank 2 alive, or out of data (call opt.join() after the training loop)?'
    """
    if _SPELLING["cli"]:
        return f"is rank {peer} alive?"
    return f"is rank {peer} alive, or out of data (call opt.join() after the training loop)?"


def spell_either(flag: str, *values: Any) -> str:
    """``flag`` with one of ``values``: ``--sufficient-factors auto or off`` on the command
    line, ``sufficient_factors='auto' or 'off'`` from the library.

    >>> spell_either("--sync", "off", "auto")
    "sync='off' or 'auto'"
    """
    first = spell(flag, values[0])
    rest = [str(v) if _SPELLING["cli"] else repr(getattr(v, "value", v)) for v in values[1:]]
    return " or ".join([first, *rest])


def respell(text: str) -> str:
    """Every ``--flag`` in ``text`` spelled as :func:`spell` does (for static reasons).

    >>> respell("its slack is --max-lag S")
    'its slack is max_lag S'
    """
    return re.sub(r"--[a-z][a-z0-9-]*", lambda m: spell(m.group(0)), text)


def choice(enum_type: type[E], value: Any, flag: str) -> E:
    """``enum_type(value)``, or ValueError naming ``flag`` and listing the choices.

    >>> choice(Mix, "grad", "--mix") is Mix.GRAD
    True
    """
    try:
        return enum_type(value)
    except ValueError:
        values = ", ".join(str(e.value) for e in enum_type)
        where = f" ({spell(flag)})" if flag.startswith("--") else ""
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
        ValueError: lr must be a finite number, got nan
    """
    finite(value, flag)
    if value < low or (strict and value == low):
        raise ValueError(f"{spell(flag)} must be {'>' if strict else '>='} {low:g}, got {value}")


def finite(value: float, flag: str) -> None:
    """ValueError naming ``flag`` unless ``value`` is a finite number (not NaN, not +-inf)."""
    try:
        ok = math.isfinite(value)
    except TypeError:  # not a number at all
        ok = False
    if not ok:
        raise ValueError(f"{spell(flag)} must be a finite number, got {value!r}")


MIN_BUCKET_BYTES = 256
"""The smallest bucket cap (``--bucket-mb`` 1/4096): every bucket, or every part of a
parameter a parameter server splits, is a message a step; at one byte each a model took
seconds a step."""


def bucket_cap_bytes(bucket_mb: float) -> int:
    """``--bucket-mb`` (MiB, at least :data:`MIN_BUCKET_BYTES`) in bytes.

    >>> bucket_cap_bytes(0.25)
    262144
    >>> bucket_cap_bytes(1e-6)
    Traceback (most recent call last):
    ...
    ValueError: bucket_mb must be >= 0.000244 (256 bytes: ...), got 1e-06
    """
    at_least(bucket_mb, 0, "--bucket-mb", strict=True)
    if bucket_mb * 2**20 < MIN_BUCKET_BYTES:
        raise ValueError(
            f"{spell('--bucket-mb')} must be >= {MIN_BUCKET_BYTES / 2**20:.3g} "
            f"({MIN_BUCKET_BYTES} bytes: each bucket is a message a step), got {bucket_mb:g}"
        )
    return int(bucket_mb * 2**20)


# What gossipgrad.options re-exports: the enums and functions defined here.
__all__ = sorted(
    n for n, v in dict(vars()).items() if n[0] != "_" and callable(v) and v.__module__ == __name__
)

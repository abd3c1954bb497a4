"""How much of its host one rank has: whether its communication thread can run beside compute.

Overlap hides communication only when the communication thread (which polls the transport
and mixes finished buckets) runs on a core of its own. Where every rank has fewer than two
cores, that thread takes the GIL and the core from backward instead: nothing is hidden and
handing work to the thread costs extra (wake-up, lock hand-off, polling). The model then
predicts an overlapped step as the blocking one plus ``overlap_s`` per step and
``handoff_s`` per bucket, and a
staleness-1 step as that plus ``stale_s_per_byte`` per gradient byte (staleness 1 copies
every bucket twice and applies a correction each step, and its exchange runs through the
next step's compute on the same core); see ``step_time``. Pure: no MPI, no torch.

    >>> h = HostShare(cores=2, ranks_per_host=2, handoff_s=1e-3)
    >>> h.cores_per_rank, h.spare_core
    (1.0, False)
    >>> round(fit_handoff(blocking_s=0.020, overlapped_s=0.026, n_buckets=3), 6)
    0.002
    >>> round(fit_overlap(blocking_s=0.020, overlapped_s=0.026), 6)
    0.006
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Cores a rank needs before its communication thread can hide communication: one for
#: compute (the training thread, one torch thread per rank) and one for the thread.
SPARE_CORE_THRESHOLD = 2.0


@dataclass(frozen=True)
class HostShare:
    """One host as the ranks on it see it.

    Args:
        cores: cores a rank may run on (``len(os.sched_getaffinity(0))``), >= 1.
        ranks_per_host: ranks launched on that host, >= 1.
        handoff_s: extra seconds per bucket of an overlapped exchange when there is no spare
            core; measured by comparing a blocking and an overlapped run (``fit_handoff``),
            never by the runs being predicted. >= 0; 0 = unknown/not measured.
        stale_s_per_byte: extra seconds per gradient byte of a staleness-1 step over an
            overlapped staleness-0 one when there is no spare core (``fit_stale``). May be
            negative: on a link whose transfer needs no CPU (a shaped or real NIC), staleness
            1 hides part of the exchange behind the next step's compute even without a
            spare core; the model never lets it hide more than the whole exchange.
        overlap_s: extra seconds per overlapped step, whatever its bucket count, when there
            is no spare core (``fit_overlap``). >= 0. ``lab plan-validate`` calibrates this
            form, not ``handoff_s``: on its 2-core host an overlapped step cost the same
            with 1 bucket as with 4.

    ``cores_per_rank = cores / ranks_per_host`` assumes ranks share the affinity set (the
    launcher does not bind each rank to its own cores); with binding, pass ``cores`` as the
    whole host's count.
    """

    cores: int
    ranks_per_host: int
    handoff_s: float = 0.0
    stale_s_per_byte: float = 0.0
    overlap_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cores", "ranks_per_host"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("handoff_s", "stale_s_per_byte", "overlap_s"):
            v = getattr(self, name)
            signed = name == "stale_s_per_byte"
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not (math.isfinite(v) and (signed or v >= 0))
            ):
                raise ValueError(
                    f"{name} must be a finite number{'' if signed else ' >= 0'}, got {v!r}"
                )

    @property
    def cores_per_rank(self) -> float:
        return self.cores / self.ranks_per_host

    @property
    def spare_core(self) -> bool:
        """True when the communication thread has a core beside the training thread."""
        return self.cores_per_rank >= SPARE_CORE_THRESHOLD

    def to_json(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "ranks_per_host": self.ranks_per_host,
            "handoff_s": self.handoff_s,
            "stale_s_per_byte": self.stale_s_per_byte,
            "overlap_s": self.overlap_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "host") -> HostShare:
        """Parse ``{"cores": 2, "ranks_per_host": 2, "handoff_s": 0.0, "stale_s_per_byte":
        0.0, "overlap_s": 0.0}`` (the last three optional, default 0); a bad value raises
        ``ValueError`` naming ``where``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"field {where!r} must be a JSON object, got {type(data).__name__}")  # noqa: TRY004
        for key in ("cores", "ranks_per_host"):
            if key not in data:
                raise ValueError(f"field '{where}.{key}' is missing")
        try:
            return cls(
                data["cores"],
                data["ranks_per_host"],
                data.get("handoff_s", 0.0),
                data.get("stale_s_per_byte", 0.0),
                data.get("overlap_s", 0.0),
            )
        except ValueError as e:
            raise ValueError(f"field {where!r}: {e}") from None


def fit_overlap(blocking_s: float, overlapped_s: float) -> float:
    """Per-step cost of overlap from a blocking and an overlapped step time of the same
    model, strategy and buckets on a host without a spare core:
    ``max(0, overlapped - blocking)``."""
    for name, v in (("blocking_s", blocking_s), ("overlapped_s", overlapped_s)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return max(0.0, overlapped_s - blocking_s)


def fit_handoff(blocking_s: float, overlapped_s: float, n_buckets: int) -> float:
    """Per-bucket hand-off cost, the same pair read as a cost per bucket:
    ``fit_overlap(blocking, overlapped) / n_buckets``."""
    if isinstance(n_buckets, bool) or not isinstance(n_buckets, int) or n_buckets < 1:
        raise ValueError(f"n_buckets must be an integer >= 1, got {n_buckets!r}")
    return fit_overlap(blocking_s, overlapped_s) / n_buckets


def fit_stale(
    overlapped_s: float, stale_s: float, grad_bytes: int, hidden_max_s: float = 0.0
) -> float:
    """Per-gradient-byte cost of staleness 1 from an overlapped staleness-0 and a staleness-1
    step time of the same model, strategy and buckets on a host without a spare core:
    ``max(-hidden_max_s, stale - overlapped) / grad_bytes``. ``hidden_max_s`` is how much
    of the step staleness 1 may save (at most the exchange's own time); 0, the default,
    makes it a cost only.

    >>> fit_stale(0.010, 0.012, 4 * 10**6)
    5e-10
    >>> fit_stale(0.012, 0.010, 4 * 10**6, hidden_max_s=0.001)
    -2.5e-10
    """
    if not (math.isfinite(hidden_max_s) and hidden_max_s >= 0):
        raise ValueError(f"hidden_max_s must be a finite number >= 0, got {hidden_max_s!r}")
    if isinstance(grad_bytes, bool) or not isinstance(grad_bytes, int) or grad_bytes < 1:
        raise ValueError(f"grad_bytes must be an integer >= 1, got {grad_bytes!r}")
    for name, v in (("overlapped_s", overlapped_s), ("stale_s", stale_s)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return max(-hidden_max_s, stale_s - overlapped_s) / grad_bytes

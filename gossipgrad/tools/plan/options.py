"""What ``gossipgrad plan`` is asked: :class:`PlanOptions`, one object for the report and the
planner (its fields are the command's options, validated here once). PURE.

    >>> PlanOptions("p.json", "n.json", sizes=(8,)).strategies
    ('gossip', 'allreduce')
    >>> PlanOptions("p.json", "n.json", sizes=(8,), target_accuracy=0.9)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: metrics_path and target_accuracy must be given together ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_BUCKET_MB: tuple[float, ...] = (1, 4, 25, 100)
"""Bucket caps the planner tries (MiB)."""

DEFAULT_STRATEGIES: tuple[str, ...] = ("gossip", "allreduce")
"""Strategies the planner compares unless told otherwise."""

DEFAULT_TIE_TOLERANCE = 0.01
"""Rows within this share of the fastest step are tied (below what step times are measured
to); ties go to fewer bytes, then staleness 0, then less memory, fewer buckets, a smaller cap."""


@dataclass(frozen=True)
class PlanOptions:
    """One plan's inputs.

    Attributes:
        profile_path, network_path: the step profile and the network fit (files).
        sizes, strategies, bucket_mb, staleness: the grid of configurations.
        overlap: buckets are exchanged as backward fills them.
        duplex: 1 on full-duplex links; up to 2 where a send and a receive share the link.
        calibrate_allreduce: the network file's allreduce fit sets the ring's factors.
        device_memory_bytes: the device's memory (None: not checked).
        optimizer_state_factor: optimizer state per parameter byte (SGD with momentum 1,
            Adam 2).
        metrics_path, target_accuracy: measured runs (one file or several) and the accuracy
            to reach: steps to it per strategy and size, and the time to it (together).
        png_path: a figure of the predicted efficiency.
        all_rows: list every configuration, not only the recommended ones.
        tie_tolerance: see :data:`DEFAULT_TIE_TOLERANCE`.
        host_cores, ranks_per_host, handoff_s, stale_s_per_byte, overlap_s: override the
            network file's ``host`` record field by field.
        compute_factor, exchange_factor: the in-step calibration (strategy -> factor).
        mix, sufficient_factors: what gossip mixes; whether Linear layers go as factors.
        fabric: fields of :class:`~gossipgrad.tools.plan.fabric.Fabric` for the cluster
            planned (ranks per node, intra-node link, hierarchical).
        interference: compute seconds added per second of communication beside it.
        step_times: ``bench strategies`` records whose measured step times replace the
            planner's in the time-to-accuracy table.
        wire: the wire codec every bucket goes through.
        ps_split: a parameter server splits a parameter larger than a server's share
            across owners (an elementwise optimizer's; False: on one owner).
        steps_at_size: the time to accuracy takes the steps measured at a planned size
            where the metrics hold runs there, instead of the fit from smaller sizes.
    """

    profile_path: str | Path
    network_path: str | Path
    sizes: Sequence[int] = ()
    strategies: Sequence[str] = DEFAULT_STRATEGIES
    bucket_mb: Sequence[float] = DEFAULT_BUCKET_MB
    staleness: Sequence[int] = (0, 1)
    overlap: bool = True
    duplex: float = 1.0
    calibrate_allreduce: bool = False
    device_memory_bytes: int | None = None
    optimizer_state_factor: float = 1.0
    metrics_path: str | Path | Sequence[str | Path] | None = None
    target_accuracy: float | None = None
    png_path: str | Path | None = None
    all_rows: bool = False
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE
    host_cores: int | None = None
    ranks_per_host: int | None = None
    handoff_s: float | None = None
    stale_s_per_byte: float | None = None
    overlap_s: float | None = None
    compute_factor: float = 1.0
    exchange_factor: Mapping[str, float] | None = None
    mix: str = "grad"
    sufficient_factors: str = "off"
    fabric: Mapping[str, object] | None = None
    interference: float = 0.0
    step_times: Sequence[str | Path] | None = None
    wire: str = "fp32"
    ps_split: bool = True
    steps_at_size: bool = False

    def __post_init__(self) -> None:
        for name in ("sizes", "strategies", "bucket_mb", "staleness"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if (self.metrics_path is None) != (self.target_accuracy is None):
            raise ValueError(
                "metrics_path and target_accuracy must be given together "
                "(--metrics FILE --target-accuracy X)"
            )
        if self.steps_at_size and self.metrics_path is None:
            raise ValueError(
                "--steps-at-size reads steps from --metrics: give --metrics FILE (runs at the "
                "planned size) and --target-accuracy X"
            )

    def replace(self, **changes: Any) -> PlanOptions:
        return dataclasses.replace(self, **changes)


def plan_options(options: PlanOptions | None, fields: dict[str, Any]) -> PlanOptions:
    """``options``, or one built from keyword ``fields`` (a caller's shorthand)."""
    if options is not None and fields:
        return options.replace(**fields)
    return options if options is not None else PlanOptions(**fields)

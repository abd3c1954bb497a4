"""Planner: enumerate strategy x bucket size x staleness x size, predict, recommend.

    >>> from gossipgrad.tools.plan.formats import Bucket, Profile
    >>> from gossipgrad.tools.plan.model import MIB
    >>> p = Profile("m", 32, "gpu", 0.1, 0.2, 0.01, 4 * MIB, (Bucket(0, 4 * MIB, 0.2),))
    >>> rows = plan(p, CommModel(2e-6, 1 / 12e9), sizes=[1, 64])
    >>> best = recommend(rows)[64]
    >>> (best.strategy, best.bucket_mb, best.staleness)
    ('gossip', 1.0, 0)

Throughput only: the planner predicts seconds per step, not time to accuracy. Gossip and
staleness 1 may need more steps to reach the same accuracy; pass measured metrics to
``render_markdown`` to show steps-to-target next to the prediction.
"""

# Over 300 lines on purpose: a plan's enumeration, its recommendation and the table that
# shows both read as one, and they share the row type.

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gossipgrad.choices import bucket_cap_bytes
from gossipgrad.engine.ps.shards import check_parts
from gossipgrad.registry import STRATEGIES
from gossipgrad.tools.plan.convergence import ConvergenceReport, render_convergence
from gossipgrad.tools.plan.factors import factor_transfers
from gossipgrad.tools.plan.formats import Profile
from gossipgrad.tools.plan.host import HostShare
from gossipgrad.tools.plan.memory import estimate_memory
from gossipgrad.tools.plan.model import (
    CommModel,
    bytes_sent,
    efficiency,
    parse_strategy,
    rebucket,
    samples_per_s,
    shape_of,
    split_large,
    step_time,
)
from gossipgrad.tools.plan.options import (  # noqa: F401 - re-exported
    DEFAULT_BUCKET_MB,
    DEFAULT_STRATEGIES,
    DEFAULT_TIE_TOLERANCE,
    PlanOptions,
    plan_options,
)
from gossipgrad.tools.plan.patterns import ps_cap

DISCLAIMER = (
    "These are throughput predictions only. Time to accuracy also depends on convergence: "
    "gossip (and staleness 1) may need more steps to reach the same accuracy than allreduce, "
    "and this model does not predict that from a profile; measured runs at smaller sizes "
    "(--metrics) give a steps-to-target fit and a time-to-accuracy prediction below."
)
_REL_TIE = 1e-9


@dataclass(frozen=True)
class PlanRow:
    """One predicted configuration. ``bucket_mb`` is the cap in MiB (2**20 bytes)."""

    strategy: str
    size: int
    bucket_mb: float
    staleness: int
    step_s: float
    samples_per_s: float
    efficiency: float
    memory_ok: bool | None  # None: device memory unknown, not checked
    n_buckets: int
    comm_s: float
    bytes_per_step: float  # bytes one rank sends per step
    memory_bytes: int


# Over 60 lines on purpose: the enumeration of configurations and its memory and support checks,
# in one loop.
def plan(
    profile: Profile,
    model: CommModel,
    options: PlanOptions | None = None,
    *,
    host: HostShare | None = None,
    wire_feedback: bool = False,
    **fields: Any,
) -> list[PlanRow]:
    """Predict every combination of ``options``' grid (sizes x strategies x bucket caps x
    staleness; or its fields as keywords, the paths left out); rows are ordered by size,
    strategy, bucket, staleness. ``host``: cores and ranks per host (None: every rank has a
    spare core for its communication thread; see ``step_time``). ``options.mix``: what a
    peer strategy mixes; ``options.sufficient_factors`` (off, auto, on): the profile's
    Linear layers (``profile.linear``) go as factors where the runtime would send them
    (staleness 0, gradients mixed; a parameter server only with ``on``); ``ps_split``: a
    parameter server splits a parameter larger than a server's share across owners.
    ``wire_feedback``: the wire codec (``model.wire_ratio``) keeps error-feedback
    residuals, which the memory check counts."""
    o = plan_options(options, {"profile_path": "", "network_path": "", **fields})
    strategies, bucket_mb, staleness = o.strategies, o.bucket_mb, o.staleness
    sizes, overlap, mix = o.sizes, o.overlap, o.mix
    sufficient_factors, ps_split = o.sufficient_factors, o.ps_split
    device_memory_bytes, optimizer_state_factor = o.device_memory_bytes, o.optimizer_state_factor
    strategies = [parse_strategy(s) for s in strategies]
    caps = [_cap_bytes(mb) for mb in bucket_mb]
    stalenesses = list(staleness)
    sizes = sorted(set(sizes))
    if not (strategies and caps and stalenesses and sizes):
        raise ValueError("sizes, strategies, bucket_mb and staleness must each be non-empty")
    rows = []
    for size in sizes:
        for strategy in strategies:
            for mb, cap in caps:
                for s in stalenesses:
                    prof, extra, factor_bytes = _for_config(
                        profile, model, strategy, size, cap, s, mix, sufficient_factors, ps_split
                    )
                    t = step_time(
                        prof,
                        model,
                        strategy,
                        size,
                        staleness=s,
                        overlap=overlap,
                        host=host,
                        mix=mix,
                        extra=extra,
                    )
                    mem = estimate_memory(
                        prof,
                        strategy,
                        size=size,
                        staleness=s,
                        device_memory_bytes=device_memory_bytes,
                        optimizer_state_factor=optimizer_state_factor,
                        wire_ratio=model.wire_ratio,
                        feedback=wire_feedback,
                        ranks_per_node=model.fabric.ranks_per_node,
                    )
                    rows.append(
                        PlanRow(
                            strategy=strategy,
                            size=size,
                            bucket_mb=mb,
                            staleness=s,
                            step_s=t.step_s,
                            samples_per_s=samples_per_s(prof, size, t.step_s),
                            efficiency=efficiency(prof, t.step_s),
                            memory_ok=mem.fits,
                            n_buckets=len(prof.buckets),
                            comm_s=t.comm_s,
                            bytes_per_step=model.wire_ratio
                            * (
                                factor_bytes
                                + sum(bytes_sent(strategy, b.bytes, size) for b in prof.buckets)
                            ),
                            memory_bytes=mem.required_bytes,
                        )
                    )
    return rows


def _for_config(
    profile: Profile,
    model: CommModel,
    strategy: str,
    size: int,
    cap: int,
    staleness: int,
    mix: str,
    factors: str,
    ps_split: bool = True,
) -> tuple[Profile, list[tuple[float, float]], float]:
    """The profile as one configuration exchanges it: Linear layers sent as factors taken
    out (:func:`~gossipgrad.tools.plan.factors.factor_transfers`), the rest merged to the cap
    (a parameter server's at most 1/size of the model each), grouped as the engine groups
    them where the profile has a bucket per parameter and no library does the fusing."""
    extra: list[tuple[float, float]] = []
    sent = 0.0
    spec = STRATEGIES.get(strategy)
    grads = not shape_of(strategy).forward_wait or mix == "grad"
    server = shape_of(strategy).incast
    if factors != "off" and staleness == 0 and grads and (factors == "on" or not server):
        profile, extra, sent = factor_transfers(profile, model, spec.name, size, factors)
    if server:
        cap = ps_cap(profile.grad_bytes, size, cap) or cap
    window = spec.fusion_window_s()
    engine = profile.per_parameter and not spec.library and window is None
    merged = rebucket(profile.buckets, cap, window, registration=engine)
    if server and ps_split:  # a parameter above a server's share is split (elementwise)
        check_parts([b.bytes for b in merged], cap, size, profile.grad_bytes)
        merged = split_large(merged, cap)
    return profile.with_buckets(merged), extra, sent


def _cap_bytes(mb: float) -> tuple[float, int]:
    if (
        isinstance(mb, bool)
        or not isinstance(mb, (int, float))
        or not mb > 0
        or not math.isfinite(mb)
    ):
        raise ValueError(f"bucket_mb values must be finite numbers > 0, got {mb!r}")
    return float(mb), max(1, bucket_cap_bytes(mb))  # the runtime's floor: what it would run


def recommend(
    rows: Sequence[PlanRow], *, tie_tolerance: float = DEFAULT_TIE_TOLERANCE
) -> dict[int, PlanRow]:
    """Best row per size: minimum step time among rows that fit in memory (unknown counts as
    fitting), excluding ``local`` (it trains no shared model). Rows within ``tie_tolerance``
    (relative; default 1 %, below what step times can be measured to) of the fastest are
    tied, and ties go to fewer bytes sent per step, then staleness 0, then less memory,
    then fewer messages (buckets), then the smaller bucket cap. Sizes where nothing fits
    are absent."""
    if not tie_tolerance >= 0:
        raise ValueError(f"tie_tolerance must be >= 0, got {tie_tolerance}")
    by_size: dict[int, list[PlanRow]] = {}
    for r in rows:
        if shape_of(r.strategy).moves and r.memory_ok is not False:
            by_size.setdefault(r.size, []).append(r)
    return {size: _pick(by_size[size], tie_tolerance) for size in sorted(by_size)}


def _pick(cands: Sequence[PlanRow], tie_tolerance: float) -> PlanRow:
    fastest = min(r.step_s for r in cands)
    tied = [r for r in cands if r.step_s <= fastest * (1 + tie_tolerance)]
    return min(
        tied,
        key=lambda r: (r.bytes_per_step, r.staleness, r.memory_bytes, r.n_buckets, r.bucket_mb),
    )


def render_markdown(
    rows: Sequence[PlanRow],
    *,
    title: str | None = None,
    convergence: ConvergenceReport | None = None,
    all_rows: bool = False,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> str:
    """A markdown report: the recommendation per size, then (``all_rows``) every row, the
    throughput-only disclaimer, and measured steps-to-accuracy when ``convergence`` is given."""
    rec = recommend(rows, tie_tolerance=tie_tolerance)
    out = [f"## {title}", ""] if title else []
    out += ["**PREDICTION.** " + DISCLAIMER, ""]
    out += [
        (
            f"Recommended configuration per size (configurations within {tie_tolerance:.0%} of "
            "the fastest count as tied; ties go to fewer bytes sent, then staleness 0):"
        ),
        "",
    ]
    out += _table(list(rec.values()))
    missing = sorted({r.size for r in rows} - set(rec))
    if missing:
        out += ["", f"No configuration fits in device memory at size(s) {missing}."]
    if all_rows:
        out += ["", "All configurations:", ""] + _table(rows)
    out += [""]
    if convergence is not None:
        out += [render_convergence(convergence), ""]
    else:
        out += ["No measured convergence given (metrics JSONL): steps to accuracy unknown.", ""]
    return "\n".join(out)


def _table(rows: Sequence[PlanRow]) -> list[str]:
    head = "| strategy | size | bucket MiB | staleness | step s | samples/s | efficiency | memory |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        mem = {True: "fits", False: "NO", None: "n/a"}[r.memory_ok]
        lines.append(
            f"| {r.strategy} | {r.size} | {r.bucket_mb:g} | {r.staleness} "
            f"| {r.step_s:.4f} | {r.samples_per_s:,.0f} | {r.efficiency:.1%} "
            f"| {mem} |"
        )
    return lines


def best_by(rows: Sequence[PlanRow], key: Mapping[str, object]) -> dict[int, PlanRow]:
    """Fastest row per size among rows that fit and whose fields equal ``key`` (e.g.
    strategy and staleness); exact ties are broken as in ``recommend``."""
    by_size: dict[int, list[PlanRow]] = {}
    for r in rows:
        if all(getattr(r, k) == v for k, v in key.items()) and r.memory_ok is not False:
            by_size.setdefault(r.size, []).append(r)
    return {size: _pick(by_size[size], _REL_TIE) for size in sorted(by_size)}


def plot_png(rows: Sequence[PlanRow], path: str | Path, *, title: str | None = None) -> Path:
    """Efficiency vs size, one line per (strategy, staleness) at its best bucket size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "plot_png needs matplotlib: pip install matplotlib (or use render_markdown for a table)"
        ) from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for strategy, s in sorted({(r.strategy, r.staleness) for r in rows}):
        best = best_by(rows, {"strategy": strategy, "staleness": s})
        ax.plot(
            list(best),
            [100 * r.efficiency for r in best.values()],
            marker="o",
            label=f"{strategy}, staleness {s}",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (ranks)")
    ax.set_ylabel("predicted efficiency (%)")
    ax.set_title(title or "Predicted scaling efficiency (throughput only)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path

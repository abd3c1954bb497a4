"""When gossip cannot help: one line per planned size where allreduce's exchange is only a
small part of its step. PURE.

No exchange makes a step faster than its compute alone, so the most any strategy can gain
over allreduce is ``allreduce's step / compute``; one-peer gossip also sends at most half
the bytes of a bandwidth-optimal allreduce. Where the exchange is a few percent of the
step (ResNet-50 on fast links), allreduce with a cast on the wire (DDP's bf16 compression
hook, ``--wire bf16``) is as fast as anything, and gossip's extra steps to accuracy are
pure cost. The line says so, with the figures.

    >>> from gossipgrad.tools.plan.planner import PlanRow
    >>> row = lambda s, n, t: PlanRow(s, n, 25.0, 0, t, 0.0, 0.0, None, 1, 0.0, 0.0, 0)
    >>> lines = cannot_help([row("allreduce", 128, 0.104), row("gossip", 128, 0.1)], 0.1, 400)
    >>> print(lines[0])  # doctest: +NORMALIZE_WHITESPACE
    At 128 ranks allreduce's exchange is 4% of its step at 400 Gbit/s: no exchange can
    make a step more than 1.04x faster; DDP with the bf16 hook is as fast (gossip cannot help).
"""

from __future__ import annotations

from collections.abc import Sequence

from gossipgrad.tools.plan.planner import PlanRow

CANNOT_HELP = 0.10
"""Allreduce's exposed exchange at or below this share of its step: gossip cannot help."""


def cannot_help(
    rows: Sequence[PlanRow], compute_s: float, link_gbit: float, share: float = CANNOT_HELP
) -> list[str]:
    """The "cannot help" line of every planned size where allreduce's best lockstep step
    (staleness 0, as DDP's) spends at most ``share`` of itself on the exchange;
    ``compute_s``: the step without any exchange
    (forward, backward, optimizer); ``link_gbit``: the links' rate, for the reader."""
    out = []
    for size in sorted({r.size for r in rows}):
        ring = [
            r for r in rows if r.size == size and r.strategy == "allreduce" and r.staleness == 0
        ]
        if not ring or size < 2:
            continue
        best = min(r.step_s for r in ring)
        exposed = max(0.0, best - compute_s) / best
        if exposed > share:
            continue
        out.append(
            f"At {size} ranks allreduce's exchange is {exposed:.0%} of its step at "
            f"{link_gbit:.3g} Gbit/s: no exchange can make a step more than "
            f"{best / compute_s:.2f}x faster; DDP with the bf16 hook is as fast "
            "(gossip cannot help)."
        )
    return out


def link_gbit(beta_s_per_byte: float) -> float:
    """A link's rate in Gbit/s from its seconds per byte."""
    return 8.0 / (beta_s_per_byte * 1e9) if beta_s_per_byte > 0 else float("inf")

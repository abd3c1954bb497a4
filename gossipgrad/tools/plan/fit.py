"""Fitting ``time(n) = alpha + beta * n`` to measured message times: ``gossipgrad netfit``'s
arithmetic, kept here so it is pure (numpy only) and testable without MPI.

The two constants come from the two regimes of a sweep (Hockney's reading of a
ping-pong): ``beta`` from the **bandwidth regime**, the median of the slopes between every
two of the sizes within ``LINEAR_SPAN`` (16x) of the largest (Theil and Sen's line), whose
times the bytes decide; the median keeps one slow size (a rep descheduled or delayed that
the median over reps did not absorb) from tilting the line, where a least-squares line
through those few sizes follows it, most of all at the largest size; ``alpha``
from the **latency regime**, the median over the smaller sizes of what is left of each time
once ``beta n`` is taken off (robust to one descheduled rep). Where that is not positive (the
small messages outran the line), ``alpha`` is the smallest message's time, an upper bound,
if that message is small (at most ``LATENCY_BYTES``: its time is then mostly latency), and
0 if the sweep started too large to see the latency (``--min-kb`` of megabytes). Fitting one line
to every size instead, however weighted, lets the small messages set the bandwidth: behind a
token-bucket shaper (the emulated cluster's ``tc tbf``), or an eager protocol with its own
buffers, they pass faster than the link sustains, and a line through them overstates the
bandwidth (lab/records/netfit.md). The planner prices buckets of megabytes, so the
bandwidth is the constant that matters. With
every size inside the span (a short sweep), ``alpha`` is the median residual of all of them.
``r2`` is the ordinary coefficient of determination of the returned line on the raw points.

    >>> fit = fit_link([4096, 65536, 1 << 20], [2e-6 + 4096e-10, 2e-6 + 65536e-10,
    ...                                          2e-6 + (1 << 20) * 1e-10])
    >>> round(fit.alpha_s * 1e6, 6), round(1e-9 / fit.beta_s_per_byte, 6), round(fit.r2, 6)
    (2.0, 10.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gossipgrad.tools.plan.formats import LinkFit

LINEAR_SPAN = 16  # sizes >= largest / LINEAR_SPAN set beta (5 doubling sizes)
LATENCY_BYTES = 64 * 1024  # a message this small takes mostly latency on a link >= 1 Gbit/s


def fit_link(nbytes: Sequence[float], seconds: Sequence[float]) -> LinkFit:
    """Fit ``seconds = alpha + beta * nbytes``: beta from the largest sizes, alpha from the
    rest (see the module).

    Preconditions: equal lengths, at least two distinct sizes, every time finite and > 0,
    every size >= 0. Raises ``ValueError`` saying which, or when the fitted ``beta`` is not
    positive (the times do not grow with size: measure larger messages).
    """
    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    _check(n, t)
    large = bandwidth_regime(n)
    beta = median_slope(n[large], t[large])
    if not beta > 0:
        raise ValueError(
            f"fitted beta (s/byte) is {beta:.3g}, not > 0: the times do not grow with message "
            "size; measure larger messages (raise the maximum size)"
        )
    rest = ~large if np.any(~large) else large
    alpha = float(np.median(t[rest] - beta * n[rest]))
    if not alpha > 0:  # the small messages outran the line (a shaper's burst)
        alpha = float(np.median(t[n == n.min()])) if n.min() <= LATENCY_BYTES else 0.0
    return LinkFit(alpha, beta, r_squared(n, t, alpha, beta))


def median_slope(nbytes: np.ndarray, seconds: np.ndarray) -> float:
    """The median of the slopes between every two points of distinct size (Theil-Sen).
    With the bandwidth regime's five sizes, one point off the line does not move it:

        >>> n = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
        >>> float(median_slope(n, 2 * n)), float(median_slope(n, 2 * n * [1, 1, 1, 1, 1.25]))
        (2.0, 2.0)
    """
    i, j = np.triu_indices(len(nbytes), k=1)
    apart = nbytes[j] != nbytes[i]
    return float(np.median((seconds[j] - seconds[i])[apart] / (nbytes[j] - nbytes[i])[apart]))


def bandwidth_regime(nbytes: np.ndarray) -> np.ndarray:
    """Mask of the sizes that set ``beta``: those within ``LINEAR_SPAN`` of the largest, or
    the two largest distinct sizes where fewer lie within it.

        >>> bandwidth_regime(np.array([4096.0, 131072.0, 1 << 20, 1 << 21])).tolist()
        [False, True, True, True]
        >>> bandwidth_regime(np.array([1.0, 1000.0, 1e6])).tolist()
        [False, True, True]
    """
    large = nbytes >= nbytes.max() / LINEAR_SPAN
    if len(np.unique(nbytes[large])) < 2:
        second = np.unique(nbytes)[-2]
        large = nbytes >= second
    return large


def r_squared(
    nbytes: Sequence[float], seconds: Sequence[float], alpha: float, beta: float
) -> float:
    """``1 - SS_res / SS_tot`` of the line on the points (1.0 if all times are equal and
    exactly predicted); can be negative for a line worse than the mean."""
    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    res = float(np.sum((t - (alpha + beta * n)) ** 2))
    tot = float(np.sum((t - t.mean()) ** 2))
    if tot == 0.0:
        return 1.0 if res == 0.0 else -math.inf
    return min(1.0, 1.0 - res / tot)


def relative_errors(fit: LinkFit, nbytes: Sequence[float], seconds: Sequence[float]) -> list[float]:
    """``(predicted - measured) / measured`` per point, for judging where a fit fails."""
    return [(fit.seconds(n) - t) / t for n, t in zip(nbytes, seconds, strict=True)]


def _check(n: np.ndarray, t: np.ndarray) -> None:
    if n.ndim != 1 or n.shape != t.shape:
        raise ValueError(
            f"nbytes and seconds must be equal-length lists, got {n.shape} and {t.shape}"
        )
    if len(np.unique(n)) < 2:
        raise ValueError(f"need at least two distinct message sizes to fit, got {n.tolist()}")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"every time must be finite and > 0 seconds, got {t.tolist()}")
    if not np.all(np.isfinite(n)) or np.any(n < 0):
        raise ValueError(f"every message size must be finite and >= 0 bytes, got {n.tolist()}")

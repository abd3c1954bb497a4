"""Fitting ``time(n) = alpha + beta * n`` to measured message times: ``gossipgrad netfit``'s
arithmetic, kept here so it is pure (numpy only) and testable without MPI.

The fit minimises *relative* squared error, ``sum(((alpha + beta n_i) - t_i) / t_i)^2``
(least squares weighted by ``1 / t_i^2``). Message sizes span five decades (4 KiB to
256 MiB); an unweighted fit is decided by the largest messages alone, whose noise (1 % of
10 ms = 100 us) swamps a latency of a few microseconds and often makes ``alpha`` negative.
If the weighted fit still gives ``alpha < 0``, ``alpha`` is set to 0 and ``beta`` refitted
through the origin. ``r2`` is the ordinary coefficient of determination of the returned line
on the raw points.

    >>> fit = fit_link([4096, 65536, 1 << 20], [2e-6 + 4096e-10, 2e-6 + 65536e-10,
    ...                                          2e-6 + (1 << 20) * 1e-10])
    >>> round(fit.alpha_s * 1e6, 6), round(1e-9 / fit.beta_s_per_byte, 6), round(fit.r2, 6)
    (2.0, 10.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gossipgrad.plan.formats import LinkFit


def fit_link(nbytes: Sequence[float], seconds: Sequence[float]) -> LinkFit:
    """Relative least-squares fit of ``seconds = alpha + beta * nbytes`` (see the module).

    Preconditions: equal lengths, at least two distinct sizes, every time finite and > 0,
    every size >= 0. Raises ``ValueError`` saying which, or when the fitted ``beta`` is not
    positive (the times do not grow with size: measure larger messages).
    """
    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    _check(n, t)
    w = 1.0 / t  # row scaling by 1/t == weights 1/t^2 on squared residuals
    design = np.stack([w, n * w], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha = 0.0
        beta = float(np.sum(n / t) / np.sum((n / t) ** 2))
    if not beta > 0:
        raise ValueError(
            f"fitted beta (s/byte) is {beta:.3g}, not > 0: the times do not grow with message "
            "size; measure larger messages (raise the maximum size)"
        )
    return LinkFit(float(alpha), float(beta), r_squared(n, t, float(alpha), float(beta)))


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

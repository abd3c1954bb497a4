"""How good were the predictions? Pure functions over (config, predicted_s, measured_s).

    >>> obs = [("a", 1.0, 1.1), ("b", 2.0, 1.8), ("c", 3.0, 3.0)]
    >>> round(mape(obs), 6), kendall_tau([1.0, 2.0, 3.0], [1.1, 1.8, 3.0]), regret(obs)
    (6.734007, 1.0, 1.0)

Errors are relative to the measurement: ``100 * |predicted - measured| / measured``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Observation = tuple[Hashable, float, float]  # (config, predicted_s, measured_s)


def _check(obs: Sequence[Observation]) -> None:
    if not obs:
        raise ValueError("observations must be non-empty")
    for config, predicted, measured in obs:
        if not (math.isfinite(predicted) and predicted > 0):
            raise ValueError(f"predicted_s of {config!r} must be finite and > 0, got {predicted}")
        if not (math.isfinite(measured) and measured > 0):
            raise ValueError(f"measured_s of {config!r} must be finite and > 0, got {measured}")


def abs_pct_errors(obs: Sequence[Observation]) -> list[float]:
    _check(obs)
    return [100 * abs(p - m) / m for _, p, m in obs]


def mape(obs: Sequence[Observation]) -> float:
    """Mean absolute percentage error, in percent."""
    errors = abs_pct_errors(obs)
    return sum(errors) / len(errors)


def worst_abs_pct_error(obs: Sequence[Observation]) -> float:
    """Largest absolute percentage error, in percent."""
    return max(abs_pct_errors(obs))


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b rank correlation (equals tau-a without ties); O(n^2), fine here.

    ``(C - D) / sqrt((n0 - tx) (n0 - ty))`` with C/D concordant/discordant pairs,
    n0 = n(n-1)/2 and tx, ty the pairs tied in x, in y.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} != {len(y)}")
    n = len(x)
    if n < 2:
        raise ValueError(f"kendall_tau needs at least 2 points, got {n}")
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                tied_x += 1
            if dy == 0:
                tied_y += 1
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tied_x) * (n0 - tied_y))
    if denom == 0:
        raise ValueError("kendall_tau is undefined when x or y is constant")
    return (concordant - discordant) / denom


def regret(obs: Sequence[Observation]) -> float:
    """Measured time of the config the model ranks fastest / fastest measured time (>= 1).
    1.0 means following the model costs nothing. Ties in prediction: the first listed."""
    _check(obs)
    chosen = min(obs, key=lambda o: o[1])
    return chosen[2] / min(m for _, _, m in obs)


@dataclass(frozen=True)
class ValidationSummary:
    n: int
    mape_pct: float
    worst_abs_pct: float
    kendall_tau: float | None  # None with fewer than 2 points or constant values
    regret: float

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "mape_pct": self.mape_pct,
            "worst_abs_pct": self.worst_abs_pct,
            "kendall_tau": self.kendall_tau,
            "regret": self.regret,
        }


def summarize(obs: Sequence[Observation]) -> ValidationSummary:
    _check(obs)
    try:
        tau: float | None = kendall_tau([o[1] for o in obs], [o[2] for o in obs])
    except ValueError:
        tau = None
    return ValidationSummary(len(obs), mape(obs), worst_abs_pct_error(obs), tau, regret(obs))

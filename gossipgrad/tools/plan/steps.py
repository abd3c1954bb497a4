"""Steps to a target accuracy against size: fitted at small sizes, predicted at larger ones.

PURE (stdlib only). Per strategy, the measured steps to the target at a few sizes p (runs
of ``gossipgrad bench tta --metrics-out`` or ``gossipgrad train --metrics-out``) are fitted
by one of three two-parameter forms, each linear after a transform and fitted in closed
form by least squares:

- ``log``:   steps(p) = a + b log2(p). Each doubling of the ranks changes the steps by the
  same amount b. For allreduce the global batch doubles with p: b < 0 while a bigger batch
  still helps, b -> 0 once past the critical batch. Gossip also mixes over a hypercube
  whose diameter is log2(p): a disagreement between ranks costs more steps to contract as
  p doubles, one more dimension each time.
- ``power``: steps(p) = a p^b, i.e. log steps linear in log(p). A constant factor per
  doubling, 2^b (b = -1: the steps halve, perfect scaling of the batch; b = 0: no gain).
- ``batch``: steps(p) = a + b / p, linear in 1/p. The critical-batch model of McCandlish
  et al. (2018), S = S_min (1 + B_noise / B), with the global batch B = p x the per-rank
  batch: a = S_min is the floor (the steps with noise-free gradients at this learning
  rate), b / a = B_noise / (per-rank batch). Adding ranks helps while B is below B_noise
  and hardly at all past it, where the other two forms keep promising fewer steps.

``batch`` is the default (:data:`DEFAULT_FORM`): it is the only form with a floor, so it
does not promise ever fewer steps past the measured sizes. ``auto`` picks the form with
the smallest relative RMS residual on the fitted sizes; three noisy sizes rarely tell the
forms apart that way. Two sizes fit every form exactly; the tie goes to the first in
:data:`FORMS`.

A size is predicted only from sizes below it: runs at the predicted size (or above) never
enter its fit, so a measured run there is a held-out check (:func:`predict`).

    >>> fit = fit_steps("gossip", {1: 100, 2: 90, 4: 80}, form="log")
    >>> round(fit.a, 6), round(fit.b, 6), round(fit.predict(8), 6)
    (100.0, -10.0, 70.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gossipgrad.tools.plan.convergence import parse_records, run_steps

FORMS = ("log", "power", "batch")
DEFAULT_FORM = "batch"


@dataclass(frozen=True)
class StepsFit:
    """``form``'s coefficients for ``strategy``, from mean steps ``steps`` at ``sizes``;
    ``rms_rel``: relative RMS residual over those sizes (0: every point on the curve)."""

    strategy: str
    form: str
    a: float
    b: float
    sizes: tuple[int, ...]
    steps: tuple[float, ...]
    rms_rel: float

    def predict(self, size: int) -> float:
        """Predicted steps to the target at ``size`` ranks (>= 1)."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if self.form == "log":
            return self.a + self.b * math.log2(size)
        if self.form == "batch":
            return self.a + self.b / size
        return self.a * size**self.b

    def describe(self) -> str:
        """The fitted curve in words, e.g. ``steps = 100 - 10 log2(size)``."""
        sign = "-" if self.b < 0 else "+"
        if self.form == "log":
            return f"steps = {self.a:.4g} {sign} {abs(self.b):.3g} log2(size)"
        if self.form == "batch":
            return f"steps = {self.a:.4g} {sign} {abs(self.b):.3g} / size"
        return f"steps = {self.a:.4g} size^{self.b:.3g}"


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of y = a + b x (closed form); needs two distinct x.

    >>> fit_line([0, 1, 2], [1, 3, 5])
    (1.0, 2.0)
    """
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError("a line needs at least two distinct x values")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def fit_steps(strategy: str, points: Mapping[int, float], form: str = "auto") -> StepsFit:
    """Fit ``points`` ({size: mean steps to the target}) by ``form`` (``log``, ``power``,
    ``batch`` or ``auto``); ValueError with fewer than two sizes or a non-positive count."""
    if form not in (*FORMS, "auto"):
        raise ValueError(f"unknown steps form {form!r}; choose log, power, batch or auto")
    sizes = sorted(points)
    if len(sizes) < 2:
        raise ValueError(
            f"{strategy}: steps to target measured at {len(sizes)} size(s); "
            "the fit needs at least two (e.g. runs at 1, 2 and 4 ranks)"
        )
    if any(s < 1 for s in sizes) or any(not points[s] > 0 for s in sizes):
        raise ValueError(f"{strategy}: sizes must be >= 1 and steps > 0, got {dict(points)}")
    fits = [
        _fit_form(strategy, f, sizes, [float(points[s]) for s in sizes])
        for f in (FORMS if form == "auto" else (form,))
    ]
    return min(fits, key=lambda f: (round(f.rms_rel, 9), FORMS.index(f.form)))


def _fit_form(strategy: str, form: str, sizes: list[int], steps: list[float]) -> StepsFit:
    if form == "log":
        a, b = fit_line([math.log2(s) for s in sizes], steps)
    elif form == "batch":
        a, b = fit_line([1.0 / s for s in sizes], steps)
    else:  # log steps = log a + b log size
        la, b = fit_line([math.log(s) for s in sizes], [math.log(y) for y in steps])
        a = math.exp(la)
    fit = StepsFit(strategy, form, a, b, tuple(sizes), tuple(steps), 0.0)
    rel = [(fit.predict(s) - y) / y for s, y in zip(sizes, steps, strict=True)]
    rms = math.sqrt(sum(r * r for r in rel) / len(rel))
    return StepsFit(strategy, form, a, b, tuple(sizes), tuple(steps), rms)


@dataclass(frozen=True)
class MeasuredSteps:
    """Steps to the target per (strategy, size) over runs: ``steps`` holds one entry per
    run that reached it exactly (first evaluation at or above the target); ``missed``
    counts runs that did not, or only by their summary (an upper bound)."""

    steps: Mapping[tuple[str, int], tuple[int, ...]]
    missed: Mapping[tuple[str, int], int]

    def mean(self, strategy: str, size: int) -> float | None:
        """Mean steps at (strategy, size), or None unless every run there reached the
        target exactly (a mean over the runs that happened to reach it would flatter)."""
        got = self.steps.get((strategy, size), ())
        if not got or self.missed.get((strategy, size)):
            return None
        return sum(got) / len(got)

    def sizes(self, strategy: str) -> list[int]:
        return sorted({s for (n, s) in self.steps if n == strategy})


def measured_steps(lines: Iterable[str], target: float) -> MeasuredSteps:
    """Read metrics lines (see :mod:`gossipgrad.tools.plan.convergence`); runs without a size
    in their summary are left out (the fit needs it)."""
    runs, _ = parse_records(lines)
    steps: dict[tuple[str, int], list[int]] = {}
    missed: dict[tuple[str, int], int] = {}
    for strategy, rs in runs.items():
        for r in rs:
            if r.size is None:
                continue
            n, upper, _ = run_steps(r, target)
            if n is None or upper:
                missed[(strategy, r.size)] = missed.get((strategy, r.size), 0) + 1
            else:
                steps.setdefault((strategy, r.size), []).append(n)
    return MeasuredSteps({k: tuple(v) for k, v in steps.items()}, missed)


@dataclass(frozen=True)
class StepsPrediction:
    """Predicted steps at ``size`` from ``fit`` (sizes below ``size`` only), and the
    measured mean there when a run at ``size`` exists (held out from the fit)."""

    strategy: str
    size: int
    predicted: float
    fit: StepsFit
    measured: float | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, when measured."""
        return None if not self.measured else (self.predicted - self.measured) / self.measured


def predict(
    measured: MeasuredSteps, strategy: str, size: int, form: str = DEFAULT_FORM
) -> StepsPrediction | None:
    """Steps for ``strategy`` at ``size`` from its runs at smaller sizes only; None when
    fewer than two smaller sizes have every run reaching the target."""
    points = {
        s: m
        for s in measured.sizes(strategy)
        if s < size and (m := measured.mean(strategy, s)) is not None
    }
    if len(points) < 2:
        return None
    fit = fit_steps(strategy, points, form)
    return StepsPrediction(strategy, size, fit.predict(size), fit, measured.mean(strategy, size))

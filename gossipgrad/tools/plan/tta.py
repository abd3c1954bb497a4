"""Predicted time to accuracy: predicted steps to the target x predicted step time.

PURE. Steps come from :mod:`gossipgrad.tools.plan.steps` (fitted per strategy at sizes below the
one predicted); step time from the planner's rows (:func:`gossipgrad.tools.plan.planner.plan`),
the fastest staleness-0 configuration of the strategy at that size (the steps were
measured at staleness 0; staleness 1 may need more). The recommendation per size is the
strategy with the least predicted time; each other strategy's gap to it is split into its
two factors, and the larger one (by |log|) is named as the term that dominates.

    >>> from gossipgrad.tools.plan.steps import MeasuredSteps
    >>> m = MeasuredSteps({("gossip", 1): (100,), ("gossip", 2): (100,),
    ...                    ("allreduce", 1): (100,), ("allreduce", 2): (90,)}, {})
    >>> row = lambda s, t: PlanRow(s, 4, 25.0, 0, t, 0.0, 0.0, None, 1, 0.0, 0.0, 0)
    >>> ttas = tta_rows([row("gossip", 0.5), row("allreduce", 1.0)], m, [4], form="log")
    >>> [(r.strategy, round(r.steps), r.seconds) for r in ttas]
    [('gossip', 100, 50.0), ('allreduce', 80, 80.0)]
    >>> best = recommend_tta(ttas)[4]
    >>> best.strategy, dominant_term(ttas[1], best)
    ('gossip', 'step time')
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gossipgrad.tools.plan.planner import PlanRow, best_by
from gossipgrad.tools.plan.steps import DEFAULT_FORM, MeasuredSteps, StepsPrediction, predict


@dataclass(frozen=True)
class TtaRow:
    """One strategy at one size: steps (predicted, or measured at the size: ``runs`` > 0),
    step time and their product."""

    strategy: str
    size: int
    steps: float
    step_s: float
    bucket_mb: float
    prediction: StepsPrediction | None
    runs: int = 0

    @property
    def seconds(self) -> float:
        """Predicted seconds to the target (training only, evaluation excluded)."""
        return self.steps * self.step_s


def _steps(
    measured: MeasuredSteps, name: str, size: int, form: str, at_size: bool
) -> tuple[float, StepsPrediction | None, int] | None:
    """(steps at ``size``, the fit from smaller sizes, runs at the size they came from):
    with ``at_size`` the mean over runs at the size itself when every one there reached
    the target (other seeds' pilots; 0 runs otherwise), else the fit; None with neither."""
    pred = predict(measured, name, size, form)
    if at_size and (mean := measured.mean(name, size)) is not None:
        return mean, pred, len(measured.steps[(name, size)])
    if pred is None or not pred.predicted > 0:
        return None
    return pred.predicted, pred, 0


def tta_rows(
    rows: Sequence[PlanRow],
    measured: MeasuredSteps,
    sizes: Iterable[int],
    form: str = DEFAULT_FORM,
    at_size: bool = False,
) -> list[TtaRow]:
    """A row per (size, strategy) that has both a staleness-0 plan row and steps (a fit,
    or with ``at_size`` runs at the size: :func:`_steps`)."""
    out = []
    for size in sorted(set(sizes)):
        for strategy in dict.fromkeys(r.strategy for r in rows):
            best = best_by(rows, {"strategy": strategy, "staleness": 0}).get(size)
            got = _steps(measured, strategy, size, form, at_size)
            if best is None or got is None:
                continue
            out.append(TtaRow(strategy, size, got[0], best.step_s, best.bucket_mb, *got[1:]))
    return out


def tta_rows_measured(
    step_times: Mapping[tuple[str, int], float],
    measured: MeasuredSteps,
    form: str = DEFAULT_FORM,
    at_size: bool = False,
) -> list[TtaRow]:
    """A row per (contender, size) of ``step_times`` (hardware efficiency measured, e.g. by
    ``gossipgrad bench strategies`` on a stand-in cluster: :func:`read_step_times`) that
    has steps from the same contender's runs (:func:`_steps`)."""
    out = []
    for (name, size), step_s in sorted(step_times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        got = _steps(measured, name, size, form, at_size)
        if got is not None:
            out.append(TtaRow(name, size, got[0], step_s, 0.0, *got[1:]))
    return out


def last_record(path: Path) -> dict[str, Any]:
    """The last JSON line of a benchmark's output file (log lines around it are skipped);
    ``{}`` when it holds none."""
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def read_step_times(paths: Iterable[str | Path]) -> dict[tuple[str, int], float]:
    """``{(contender, size): step_s}`` from ``bench strategies`` or ``bench tta`` JSON
    records (the last JSON line of each file; a stand-in record's ``step_s_undilated``,
    the time of the cluster it stands for; a ``bench tta`` row's mean training step);
    ValueError naming a file that holds neither."""
    out: dict[tuple[str, int], float] = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise ValueError(f"step-times file {str(path)!r} does not exist")
        rec = last_record(path)
        if rec.get("bench") not in ("strategies", "tta") or "size" not in rec:
            raise ValueError(
                f"step-times file {str(path)!r} is not a 'gossipgrad bench strategies' or "
                "'bench tta' record"
            )
        rows = rec["results"]
        for row in rows.values() if isinstance(rows, dict) else rows:
            step = row.get("step_s_undilated", row["step_s"])
            out[(row.get("name", row["strategy"]), int(rec["size"]))] = float(step)
    return out


def recommend_tta(rows: Sequence[TtaRow]) -> dict[int, TtaRow]:
    """Least predicted time to the target per size, ``local`` excluded (it trains no shared
    model; a tie goes to fewer steps)."""
    best: dict[int, TtaRow] = {}
    for r in rows:
        if r.strategy == "local":
            continue
        cur = best.get(r.size)
        if cur is None or (r.seconds, r.steps) < (cur.seconds, cur.steps):
            best[r.size] = r
    return dict(sorted(best.items()))


def dominant_term(row: TtaRow, best: TtaRow) -> str:
    """Which factor of ``row``'s time against ``best``'s is further from 1: ``"steps"``
    or ``"step time"`` (``"-"`` for the best itself)."""
    if row is best:
        return "-"
    steps, time = row.steps / best.steps, row.step_s / best.step_s
    return "steps" if abs(math.log(steps)) > abs(math.log(time)) else "step time"


def _tta_line(r: TtaRow, best: TtaRow) -> str:
    """One table row: the fit's sizes and curve (or the runs at the size it measured),
    the steps, the held-out measurement and the comparison with the best."""
    vs = "-" if r is best else f"{r.steps / best.steps:.2f}x, {r.step_s / best.step_s:.2f}x"
    pred, held = r.prediction, "-"
    if r.runs or pred is None:
        fitted, model = f"measured at {r.size} ({r.runs} runs)", "their mean"
        if pred is not None:
            model += f"; fit: {pred.predicted:.1f}"
    else:
        fitted, model = ",".join(map(str, pred.fit.sizes)), pred.fit.describe()
        if pred.measured is not None:
            held = f"{pred.measured:.1f} ({pred.error:+.0%})"
    return (
        f"| {r.size} | {r.strategy} | {fitted} | {model} | {r.steps:.1f} | {held} | "
        f"{r.step_s:.4f} | {r.seconds:.2f} | {vs} | {dominant_term(r, best)} |"
    )


def render_tta(rows: Sequence[TtaRow], target: float, step_source: str = "") -> str:
    """The prediction table and one recommendation sentence per size (Markdown);
    ``step_source`` says where measured step times came from (empty: the planner's)."""
    if not rows:
        return (
            "Time to accuracy: no prediction (it needs, per strategy, runs that reach "
            f"the target {target:g} at two or more sizes below the size predicted, with "
            "'size' in their summaries, e.g. gossipgrad bench tta --metrics-out at 1, 2 "
            "and 4 ranks; with --steps-at-size, runs at the size itself will do)."
        )
    rec = recommend_tta(rows)
    step = f"step time MEASURED ({step_source})" if step_source else "predicted step time"
    steps = "steps to target fitted at smaller sizes"
    if any(r.runs for r in rows):
        steps += " (or MEASURED at the size itself where the fit column says so)"
    out = [
        f"Predicted time to test accuracy {target:g} (PREDICTION: {steps} x {step}, staleness 0):",
        "",
        "| size | strategy | fitted on sizes | steps model | predicted steps | measured "
        "steps (held out) | step s | time to target s | vs best: steps, step time | "
        "dominant term |",
        "|" + "---|" * 10,
    ]
    out += [_tta_line(r, rec.get(r.size, r)) for r in rows]
    out.append("")
    for size, best in rec.items():
        others = [r for r in rows if r.size == size and r is not best]
        text = (
            f"Size {size}: {best.strategy} is predicted fastest to {target:g} "
            f"({best.seconds:.2f} s, {best.steps:.0f} steps x {best.step_s:.4f} s)"
        )
        for r in others:
            term = dominant_term(r, best)
            text += (
                f"; against {r.strategy} ({r.seconds:.2f} s: {r.steps / best.steps:.2f}x "
                f"the steps, {r.step_s / best.step_s:.2f}x the step time) {term} "
                f"{'dominate' if term == 'steps' else 'dominates'}"
            )
        out.append(text + ".")
    return "\n".join(out)

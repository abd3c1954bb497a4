"""Time to accuracy as steps x step time, scored against a direct measurement
(``python -m lab tta-product OUTDIR``; the launches: lab/tta_product.sh).

Reads, from OUTDIR: ``tta-1.jsonl``, ``tta-2.jsonl``, ``tta-4.jsonl`` (``bench tta
--metrics-out`` at the smaller sizes: statistical efficiency), ``step-8.json`` (a short
``bench tta`` launch at the predicted size: hardware efficiency) and ``tta-8.json`` (the
full launch at that size, which enters neither input). A contender's predicted seconds to
the target are its steps predicted from the smaller sizes (:func:`gossipgrad.plan.steps.
predict`, the batch form) times its short launch's mean step, as ``gossipgrad plan
--metrics ... --step-times ...`` computes them.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from gossipgrad.plan.convergence import read_lines
from gossipgrad.plan.steps import measured_steps, predict
from gossipgrad.plan.tta import last_record, read_step_times

SMALLER = (1, 2, 4)
TARGET_PCT = 15.0  # issue 22: predicted vs measured seconds to target within 15 %


def _last_record(path: Path) -> dict[str, Any]:
    record = last_record(path)
    if not record:
        raise ValueError(f"{path}: no JSON record (did the launch finish?)")
    return record


def _pct(predicted: float, measured: float) -> float:
    return round(100.0 * (predicted - measured) / measured, 2)


def score(out_dir: str | Path, full: str = "tta-8.json", short: str = "step-8.json") -> dict:
    """One row per contender of the full launch and the summary over the scored rows."""
    d = Path(out_dir)
    record = _last_record(d / full)
    size, target = int(record["size"]), float(record["target"])
    smaller = [d / f"tta-{n}.jsonl" for n in SMALLER if (d / f"tta-{n}.jsonl").is_file()]
    measured = measured_steps(read_lines(smaller), target)
    step_times = read_step_times([d / short])
    rows = []
    for name, r in record["results"].items():
        pred = predict(measured, name, size)
        step = step_times.get((name, size))
        row: dict[str, Any] = {"contender": name, "measured_steps": r["steps_to_target"]}
        if pred is None or step is None or r["seconds_to_target"] is None:
            why = (
                "fewer than two smaller sizes reached the target"
                if pred is None
                else "no short launch"
                if step is None
                else "the full launch did not reach the target"
            )
            rows.append({**row, "scored": False, "why": why})
            continue
        predicted_s = pred.predicted * step
        rows.append(
            {
                **row,
                "scored": True,
                "fitted_steps": dict(zip(pred.fit.sizes, pred.fit.steps, strict=True)),
                "predicted_steps": round(pred.predicted, 2),
                "steps_error_pct": _pct(pred.predicted, r["steps_to_target"]),
                "short_step_s": step,
                "full_step_s": r["step_s"],
                "step_error_pct": _pct(step, r["step_s"]),
                "predicted_s": round(predicted_s, 3),
                "measured_s": r["seconds_to_target"],
                "error_pct": _pct(predicted_s, r["seconds_to_target"]),
            }
        )
    errors = [abs(r["error_pct"]) for r in rows if r["scored"]]
    summary = {
        "scored": len(errors),
        "mape_pct": round(statistics.fmean(errors), 2) if errors else None,
        "worst_pct": max(errors) if errors else None,
        "within_target": sum(e <= TARGET_PCT for e in errors),
        "target_pct": TARGET_PCT,
    }
    return {"size": size, "target": target, "rows": rows, "summary": summary}


def markdown(report: dict) -> str:
    """The scored rows as a table (predicted = fitted steps x short launch's step)."""
    head = (
        "| contender | steps 1/2/4 | steps pred. | steps meas. | step short (s) | step full (s) "
        "| s pred. | s meas. | error |\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    out = [head]
    for r in report["rows"]:
        if not r["scored"]:
            out.append(f"| {r['contender']} | not scored: {r['why']} |||||||| ")
            continue
        fitted = "/".join(f"{v:g}" for v in r["fitted_steps"].values())
        out.append(
            f"| {r['contender']} | {fitted} | {r['predicted_steps']:.1f} | {r['measured_steps']} "
            f"| {r['short_step_s']:.4f} | {r['full_step_s']:.4f} | {r['predicted_s']:.2f} "
            f"| {r['measured_s']:.2f} | {r['error_pct']:+.1f} % |"
        )
    return "\n".join(out) + "\n"

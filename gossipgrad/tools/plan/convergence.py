"""Measured steps to a target accuracy, per strategy, from a training metrics JSONL file.

The planner predicts throughput only; this module reports what runs actually measured, so a
reader can weigh "faster steps" against "more steps". Records it understands (anything else
is skipped):

- interval: ``{"step": int, "test_accuracy": float}``, optionally with ``"strategy"``;
- summary: ``{"event": "summary", "strategy": str, "steps": int, "test_accuracy": float}``,
  optionally with ``"size"`` (ranks): runs of different sizes are then reported apart (and
  :mod:`gossipgrad.tools.plan.steps` fits steps to target against size).
  Interval records without a strategy belong to the next summary in the file (a run logs
  its intervals, then its summary).

Tolerant: bad lines and missing fields become ``problems`` (with line numbers), never
exceptions. Accuracy must be in the same units as ``target`` (fraction or percent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ConvergenceRow:
    """``steps_to_target`` is None when not reached; ``upper_bound`` marks a value known only
    from a summary (the target was reached by then, the exact step is unknown)."""

    strategy: str
    steps_to_target: int | None
    upper_bound: bool
    best_accuracy: float | None
    runs: int
    note: str = ""
    size: int | None = None  # the runs' size (ranks), when their summaries say


@dataclass(frozen=True)
class ConvergenceReport:
    target: float
    rows: tuple[ConvergenceRow, ...]
    problems: tuple[str, ...] = field(default=())


@dataclass
class _Run:
    points: list[tuple[int, float]] = field(default_factory=list)
    summary_steps: int | None = None
    summary_acc: float | None = None
    size: int | None = None


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def parse_records(lines: Iterable[str]) -> tuple[dict[str, list[_Run]], list[str]]:
    """Group accuracy records into runs per strategy; return (runs, problems).

    >>> runs, problems = parse_records([
    ...     '{"step": 100, "test_accuracy": 0.9}',
    ...     'not json',
    ...     '{"event": "summary", "strategy": "gossip", "steps": 200, "test_accuracy": 0.96}',
    ... ])
    >>> [(s, r.points, r.summary_steps) for s, rs in runs.items() for r in rs]
    [('gossip', [(100, 0.9)], 200)]
    >>> problems
    ['line 2: not JSON, skipped']
    """
    runs: dict[str, list[_Run]] = {}
    problems: list[str] = []
    open_runs: dict[str | None, _Run] = {}  # runs without a summary yet; None: no strategy
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"line {n}: not JSON, skipped")
            continue
        if not isinstance(rec, dict):
            problems.append(f"line {n}: not a JSON object, skipped")
            continue
        strategy = rec.get("strategy") if isinstance(rec.get("strategy"), str) else None
        if rec.get("event") == "summary":
            if strategy is None:
                problems.append(f"line {n}: summary has no 'strategy'; counted as 'unknown'")
            run = open_runs.pop(strategy, _Run())
            if strategy is not None:
                run.points += open_runs.pop(None, _Run()).points
            steps, acc = _num(rec.get("steps")), _num(rec.get("test_accuracy"))
            if steps is None or acc is None:
                problems.append(f"line {n}: summary lacks numeric 'steps' or 'test_accuracy'")
            run.summary_steps = None if steps is None else int(steps)
            run.summary_acc = acc
            size = _num(rec.get("size"))
            run.size = int(size) if size is not None and size >= 1 else None
            runs.setdefault(strategy or "unknown", []).append(run)
            continue
        step, acc = _num(rec.get("step")), _num(rec.get("test_accuracy"))
        if step is None or acc is None:
            continue  # a training-loss record or another event: not about accuracy
        open_runs.setdefault(strategy, _Run()).points.append((int(step), acc))
    for strategy, run in open_runs.items():
        if strategy is None:
            problems.append(
                f"{len(run.points)} accuracy record(s) after the last summary "
                "have no strategy; counted as 'unknown'"
            )
        runs.setdefault(strategy or "unknown", []).append(run)
    return runs, problems


def run_steps(run: _Run, target: float) -> tuple[int | None, bool, float | None]:
    """(steps to ``target`` or None, whether that is only an upper bound from the summary,
    best accuracy seen) of one run: the first interval record at or above the target."""
    for step, acc in sorted(run.points):
        if acc >= target:
            return step, False, max(a for _, a in run.points)
    accs = [a for _, a in run.points] + ([run.summary_acc] if run.summary_acc is not None else [])
    best = max(accs) if accs else None
    if run.summary_acc is not None and run.summary_acc >= target and run.summary_steps:
        return run.summary_steps, True, best
    return None, False, best


def steps_to_target(lines: Iterable[str], target: float) -> ConvergenceReport:
    """Steps each strategy needed to reach ``target`` test accuracy (best over its runs).

    >>> report = steps_to_target([
    ...     '{"step": 100, "test_accuracy": 0.91}',
    ...     '{"step": 200, "test_accuracy": 0.96}',
    ...     '{"event": "summary", "strategy": "gossip", "steps": 300, "test_accuracy": 0.97}',
    ...     '{"event": "summary", "strategy": "allreduce", "steps": 300, "test_accuracy": 0.955}',
    ...     '{"event": "summary", "strategy": "local", "steps": 300, "test_accuracy": 0.9}',
    ... ], target=0.95)
    >>> [(r.strategy, r.steps_to_target, r.upper_bound) for r in report.rows]
    [('allreduce', 300, True), ('gossip', 200, False), ('local', None, False)]
    """
    if not math.isfinite(target):
        raise ValueError(f"target must be a finite accuracy, got {target!r}")
    runs, problems = parse_records(lines)
    rows = []
    groups: dict[tuple[str, int], list[_Run]] = {}  # runs of one size together (0: unknown)
    for strategy, rs in runs.items():
        for r in rs:
            groups.setdefault((strategy, r.size or 0), []).append(r)
    for (strategy, size), rs in sorted(groups.items()):
        results = [run_steps(r, target) for r in rs]
        reached = [(s, ub) for s, ub, _ in results if s is not None]
        bests = [b for _, _, b in results if b is not None]
        best = max(bests) if bests else None
        note = "" if len(rs) == 1 else f"fewest over {len(rs)} runs"
        if reached:
            steps, ub = min(reached)
            rows.append(ConvergenceRow(strategy, steps, ub, best, len(rs), note, size or None))
        else:
            why = "no accuracy recorded" if best is None else f"not reached (best {best:g})"
            rows.append(ConvergenceRow(strategy, None, False, best, len(rs), why, size or None))
    return ConvergenceReport(target, tuple(rows), tuple(problems))


def read_metrics(path: str | Path | Sequence[str | Path], target: float) -> ConvergenceReport:
    """The report over one metrics file or several (read one after another)."""
    return steps_to_target(read_lines(path), target)


def read_lines(path: str | Path | Sequence[str | Path]) -> list[str]:
    """The lines of one metrics file or of several, in order; ValueError naming a missing
    one."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    lines: list[str] = []
    for p in map(Path, paths):
        if not p.is_file():
            what = "is a directory" if p.is_dir() else "does not exist"
            raise ValueError(
                f"metrics file {str(p)!r} {what}; pass the metrics.jsonl "
                "written by a training run (or by gossipgrad bench tta --metrics-out)"
            )
        lines += p.read_text().splitlines()
    return lines


def render_convergence(report: ConvergenceReport) -> str:
    """A markdown table of ``report``, labelled as measured.

    >>> print(render_convergence(steps_to_target([
    ...     '{"event": "summary", "strategy": "gossip", "steps": 300, "test_accuracy": 0.97}',
    ... ], target=0.95)))
    Measured steps to test accuracy >= 0.95 (MEASURED, not predicted):
    <BLANKLINE>
    | strategy | steps to target | best accuracy | runs | note |
    |---|---|---|---|---|
    | gossip | <= 300 | 0.97 | 1 |  |
    """
    lines = [
        f"Measured steps to test accuracy >= {report.target:g} (MEASURED, not predicted):",
        "",
        "| strategy | steps to target | best accuracy | runs | note |",
        "|---|---|---|---|---|",
    ]
    for r in report.rows:
        steps = (
            "—"
            if r.steps_to_target is None
            else (f"<= {r.steps_to_target}" if r.upper_bound else str(r.steps_to_target))
        )
        best = "—" if r.best_accuracy is None else f"{r.best_accuracy:g}"
        name = r.strategy if r.size is None else f"{r.strategy}, size {r.size}"
        lines.append(f"| {name} | {steps} | {best} | {r.runs} | {r.note} |")
    if not report.rows:
        lines.append("| (no runs with accuracy found) | | | | |")
    if report.problems:
        lines += ["", "Problems reading the metrics file:"] + [f"- {p}" for p in report.problems]
    return "\n".join(lines)

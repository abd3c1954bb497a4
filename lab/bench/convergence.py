"""``python -m lab convergence``: final accuracy of each mixing mode against allreduce.

    python -m lab convergence --tasks digits,templates --sizes 4,7,8 --markdown conv.md

Not run under a launcher: for every task x size x mode it launches one
``mpiexec -n SIZE gossipgrad train`` (the ``mpiexec`` next to this Python, else the one on
PATH) with the same seed, epochs and data, and reads the run's summary record. Modes:

- ``allreduce``: ``--strategy allreduce`` (every rank holds the same model: the reference);
- ``param``: gossip ``--mix param`` (the default);
- ``grad``: gossip ``--mix grad --sync off`` (gradient mixing alone, as the paper describes);
- ``grad-adaptive``: gossip ``--mix grad --sync adaptive`` (global averages when the
  monitored consensus distance exceeds ``--sync-threshold``).

Runs evaluate only after the last epoch (``--eval-every EPOCHS``): an evaluation is a global
average, and averaging every epoch would hide how far the ranks drift (a user's own loop
averages once, at the end). Per cell it reports the test accuracy of the final consensus
model, its gap to allreduce in points, the exact consensus distance just before that final
average, the largest distance seen, the adaptive averages taken and their bytes, the bytes
per step per rank including them, and the monitor's cost per estimate. Accuracy is
deterministic for a given seed and size; times are not.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from gossipgrad.tools.bench.common import finite, rounded
from lab.launch import mpiexec_path

log = logging.getLogger(__name__)

MODES: dict[str, list[str]] = {
    "allreduce": ["--strategy", "allreduce"],
    "param": ["--strategy", "gossip", "--mix", "param"],
    "grad": ["--strategy", "gossip", "--mix", "grad", "--sync", "off"],
    "grad-adaptive": ["--strategy", "gossip", "--mix", "grad", "--sync", "adaptive"],
}
"""The modes and the ``gossipgrad train`` flags that select them."""

TASKS = ("digits", "templates")


def parse_list(text: str, flag: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; ValueError naming ``flag`` for an empty list or a name
    outside ``allowed``."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError(f"{flag} {text!r}: expected a comma-separated list")
    bad = [s for s in items if allowed is not None and s not in allowed]
    if bad:
        raise ValueError(f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
    return items


def parse_sizes(text: str) -> list[int]:
    """``"4,7,8"`` -> ``[4, 7, 8]``; ValueError naming ``--sizes`` otherwise."""
    try:
        sizes = [int(v) for v in parse_list(text, "--sizes")]
    except ValueError:
        sizes = []
    if not sizes or any(v < 1 for v in sizes):
        raise ValueError(f"--sizes {text!r}: expected comma-separated rank counts >= 1, e.g. 4,7,8")
    return sizes


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; ValueError naming ``--seeds`` otherwise."""
    try:
        return [int(v) for v in parse_list(text, "--seeds")]
    except ValueError:
        raise ValueError(
            f"--seeds {text!r}: expected comma-separated integers, e.g. 0,1,2"
        ) from None


def train_argv(size: int, task: str, epochs: int, seed: int, metrics: str, flags: list[str]):
    """``mpiexec -n SIZE python -m gossipgrad train`` on ``task`` for ``epochs``, evaluated
    once after the last, its summary in ``metrics``, then ``flags``: one cell of a study."""
    return [
        mpiexec_path(),
        "-n",
        str(size),
        sys.executable,
        "-m",
        "gossipgrad",
        "train",
        "--no-progress",
        "--dataset",
        task,
        "--epochs",
        str(epochs),
        "--eval-every",
        str(epochs),
        "--seed",
        str(seed),
        "--metrics-out",
        metrics,
        *flags,
    ]


def train_command(
    task: str, size: int, mode: str, epochs: int, seed: int, metrics: str, extra: list[str]
) -> list[str]:
    """The launch of one cell (``extra`` flags come last, so they win; the allreduce
    reference runs without them: gossip's flags do not apply to it)."""
    flags = [*MODES[mode], *(extra if mode != "allreduce" else [])]
    return train_argv(size, task, epochs, seed, metrics, flags)


def run_cell(
    task: str, size: int, mode: str, epochs: int, seed: int, extra: list[str], timeout: float
) -> dict[str, Any]:
    """Launch one cell and return its summary record; ValueError if it fails or hangs."""
    return summary_of_launch(
        lambda metrics: train_command(task, size, mode, epochs, seed, metrics, extra),
        f"{task} x {size} ranks x {mode}",
        timeout,
        "gg-conv-",
    )


def summary_of_launch(
    command: Callable[[str], list[str]], what: str, timeout: float, prefix: str
) -> dict[str, Any]:
    """Run ``command(metrics_path)`` (a ``train`` launch) and return the summary record it
    wrote; ValueError naming ``what`` if it fails or passes ``timeout``."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        try:
            res = subprocess.run(
                command(metrics),
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            late = f"{what} did not finish within {timeout:g} s; raise --timeout"
            raise ValueError(late) from None
        if res.returncode != 0:
            raise ValueError(f"{what} failed ({res.returncode}):\n{res.stderr[-2000:]}")
        with open(metrics, encoding="utf-8") as f:
            return next(r for r in map(json.loads, f) if r.get("event") == "summary")


def cell_row(task: str, size: int, mode: str, s: dict[str, Any]) -> dict[str, Any]:
    """The figures of one cell from its summary record ``s``."""
    steps = max(1, s["steps"])
    step_s = s["batch_size"] * size / s["images_per_s"] if s.get("images_per_s") else None
    calls = s.get("monitor_calls") or 0
    return {
        "task": task,
        "size": size,
        "mode": mode,
        "topology": s["topology"],
        "test_accuracy": s["test_accuracy"],
        "steps": s["steps"],
        "consensus_distance": finite(s.get("consensus_distance")),
        "max_consensus_distance": finite(s.get("max_consensus_distance")),
        "syncs": s.get("syncs", 0),
        "sync_bytes": s.get("sync_bytes", 0.0),
        "exchange_bytes_per_step": s["bytes_sent_per_step"],
        "bytes_per_step": rounded(s["bytes_sent_per_step"] + s.get("sync_bytes", 0.0) / steps),
        "model_bytes": s["model_bytes"],
        "step_s": finite(step_s),
        "monitor_calls": calls,
        "monitor_s_per_call": finite(s["monitor_seconds"] / calls) if calls else None,
        "monitor_sketch_s_per_call": (
            finite(s["monitor_sketch_seconds"] / calls) if calls else None
        ),
        "monitor_bytes_per_call": s.get("monitor_bytes_per_call", 0),
        "wall_seconds": finite(s["wall_seconds"]),
    }


def add_gaps(rows: list[dict[str, Any]]) -> None:
    """``gap_points``: 100 x (accuracy - allreduce's at the same task, size and seed), in
    place; None where allreduce was not run."""
    ref = {
        (r["task"], r["size"], r["seed"]): r["test_accuracy"]
        for r in rows
        if r["mode"] == "allreduce"
    }
    for r in rows:
        base = ref.get((r["task"], r["size"], r["seed"]))
        r["gap_points"] = None if base is None else round(100 * (r["test_accuracy"] - base), 2)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per task x size x mode: means over seeds (accuracy, gap, distances, syncs,
    bytes) and the range of the gap."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["task"], r["size"], r["mode"]), []).append(r)
    out = []
    for (task, size, mode), rs in groups.items():
        gaps = [r["gap_points"] for r in rs if r["gap_points"] is not None]
        row = {
            "task": task,
            "size": size,
            "mode": mode,
            "seeds": len(rs),
            "gap_min": min(gaps) if gaps else None,
            "gap_max": max(gaps) if gaps else None,
        }
        for key in (
            "test_accuracy",
            "gap_points",
            "consensus_distance",
            "max_consensus_distance",
            "syncs",
            "sync_bytes",
            "bytes_per_step",
            "step_s",
            "monitor_s_per_call",
            "monitor_sketch_s_per_call",
        ):
            mean = _mean([r[key] for r in rs])
            row[key] = None if mean is None else rounded(mean, 4)
        out.append(row)
    return out


def run_convergence(
    tasks: list[str],
    sizes: list[int],
    modes: list[str],
    epochs: int,
    seeds: list[int] | None = None,
    extra: list[str] | None = None,
    timeout: float = 1800,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every cell for every seed, one after the other; returns the JSON-able record
    (``rows``: one per run; ``summary``: means over seeds). ``on_cell`` sees each row as it
    finishes (progress)."""
    seeds = seeds if seeds is not None else [0]
    rows = []
    for task in tasks:
        for size in sizes:
            for seed in seeds:
                for mode in modes:
                    s = run_cell(task, size, mode, epochs, seed, list(extra or []), timeout)
                    rows.append({**cell_row(task, size, mode, s), "seed": seed})
                    if on_cell is not None:
                        on_cell(rows[-1])
    add_gaps(rows)
    return {
        "benchmark": "convergence",
        "tasks": tasks,
        "sizes": sizes,
        "modes": modes,
        "epochs": epochs,
        "seeds": seeds,
        "extra": list(extra or []),
        "rows": rows,
        "summary": summarize(rows),
    }


def _gap(r: dict[str, Any]) -> str:
    if r["mode"] == "allreduce" or r["gap_points"] is None:
        return "—"
    if r["seeds"] > 1:
        return f"{r['gap_points']:+.2f} ({r['gap_min']:+.2f}..{r['gap_max']:+.2f})"
    return f"{r['gap_points']:+.2f}"


def markdown_table(record: dict[str, Any]) -> str:
    """The matrix as a Markdown table: means over seeds (the gap's range in brackets);
    bytes per step per rank, kB = 10^3 bytes."""
    lines = [
        "| task | ranks | mode | test acc. | vs allreduce (points) | consensus distance "
        "before final average | max distance | syncs | kB/step/rank (with syncs) "
        "| sync MB/rank |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in record["summary"]:
        dist = "0" if r["mode"] == "allreduce" else f"{r['consensus_distance']:.2g}"
        top = "0" if r["mode"] == "allreduce" else f"{r['max_consensus_distance']:.2g}"
        lines.append(
            f"| {r['task']} | {r['size']} | {r['mode']} | {r['test_accuracy']:.4f} | "
            f"{_gap(r)} | {dist} | {top} | {r['syncs']:g} | "
            f"{r['bytes_per_step'] / 1e3:.1f} | {r['sync_bytes'] / 1e6:.2f} |"
        )
    return "\n".join(lines) + "\n"

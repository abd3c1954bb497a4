"""``python -m lab codecs``: final accuracy of each wire codec against fp32, per strategy.

    python -m lab codecs --sizes 7,8 --tasks digits,templates --rows codecs.jsonl \\
        --markdown codecs.md

Not run under a launcher: for every task x size x mode x wire (x topology) it launches one
``mpiexec -n SIZE gossipgrad train --wire WIRE`` (20 epochs, seed 0, evaluated once after
the last epoch, as ``lab convergence`` does) and reads the summary. Modes:

- ``param``: gossip ``--mix param`` (the default);
- ``grad``: gossip ``--mix grad`` (adaptive averaging, its default ``--sync auto``);
- ``allreduce``: ``--strategy allreduce`` (gradients, decoded before they are added);
- ``ps``: ``--strategy ps`` (pushes and pulls through the codec).

A wire is a codec (its own error-feedback default: on for fp8 only), or ``bf16/ef``,
``fp16/ef``, ``fp8/noef`` to try the other setting.

Per cell: test accuracy, its gap in points to the same mode and topology with ``fp32``, the
exact consensus distance before the final average (and the largest the monitor saw), bytes
per step per rank, step time and wall time. ``--topologies`` runs the gossip modes once per
schedule (``auto``: base2 at sizes that are not powers of two). ``--rows FILE`` appends each
cell as a JSON line as it finishes and skips the cells already there, so a long study can
be resumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from gossipgrad.tools.bench.common import markdown
from lab.bench.convergence import cell_row, summary_of_launch, train_argv

MODES: dict[str, list[str]] = {
    "param": ["--strategy", "gossip", "--mix", "param"],
    "grad": ["--strategy", "gossip", "--mix", "grad"],
    "allreduce": ["--strategy", "allreduce"],
    "ps": ["--strategy", "ps"],
}
"""The modes and the ``gossipgrad train`` flags that select them."""

GOSSIP = ("param", "grad")
WIRES = ("fp32", "bf16", "fp16", "fp8", "bf16/ef", "fp16/ef", "fp8/noef")
"""``--wires`` values: a codec, or a lossy one with error feedback switched on (``/ef``)
or off (``/noef``) against its default."""


def wire_flags(wire: str) -> list[str]:
    """``gossipgrad train`` flags of a ``--wires`` value.

    >>> wire_flags("fp8/noef"), wire_flags("bf16")
    (['--wire', 'fp8', '--error-feedback', 'off'], ['--wire', 'bf16'])
    """
    codec, _, feedback = wire.partition("/")
    extra = {"": [], "ef": ["--error-feedback", "on"], "noef": ["--error-feedback", "off"]}
    return ["--wire", codec, *extra[feedback]]


def command(
    task: str, size: int, mode: str, wire: str, topology: str, epochs: int, metrics: str
) -> list[str]:
    """The launch of one cell."""
    topo = ["--topology", topology] if mode in GOSSIP else []
    return train_argv(size, task, epochs, 0, metrics, [*MODES[mode], *wire_flags(wire), *topo])


def key(row: dict[str, Any]) -> tuple:
    return (row["task"], row["size"], row["mode"], row["wire"], row["topology_flag"])


def run_cell(
    task: str, size: int, mode: str, wire: str, topology: str, epochs: int, timeout: float
) -> dict[str, Any]:
    """Launch one cell; its row (ValueError if it fails or passes ``timeout``)."""
    s = summary_of_launch(
        lambda metrics: command(task, size, mode, wire, topology, epochs, metrics),
        f"{task} x {size} ranks x {mode} x {wire} x {topology}",
        timeout,
        "gg-codecs-",
    )
    row = cell_row(task, size, mode, s)
    row.update(
        wire=wire,
        error_feedback=s.get("error_feedback"),
        topology_flag=topology if mode in GOSSIP else "-",
        epochs=epochs,
    )
    return row


def add_gaps(rows: list[dict[str, Any]]) -> None:
    """``gap_points``: 100 x (accuracy - the fp32 cell's of the same task, size, mode and
    topology), in place (None without that cell)."""
    ref = {key(r)[:3] + key(r)[4:]: r["test_accuracy"] for r in rows if r["wire"] == "fp32"}
    for r in rows:
        base = ref.get(key(r)[:3] + key(r)[4:])
        r["gap_points"] = None if base is None else round(100 * (r["test_accuracy"] - base), 2)


def run_codecs(
    tasks: list[str],
    sizes: list[int],
    modes: list[str],
    wires: list[str],
    topologies: list[str],
    epochs: int = 20,
    timeout: float = 3600,
    rows_file: str | None = None,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every cell, one after the other (those in ``rows_file`` are read, not run)."""
    done: dict[tuple, dict[str, Any]] = {}
    if rows_file and os.path.exists(rows_file):
        with open(rows_file, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done[key(r)] = r
    rows = []
    for task in tasks:
        for size in sizes:
            for mode in modes:
                for topology in topologies if mode in GOSSIP else ["-"]:
                    for wire in wires:
                        k = (task, size, mode, wire, topology)
                        if k not in done:
                            done[k] = run_cell(
                                task, size, mode, wire, _flag(topology), epochs, timeout
                            )
                            if rows_file:
                                with open(rows_file, "a", encoding="utf-8") as f:
                                    f.write(json.dumps(done[k], sort_keys=True) + "\n")
                            if on_cell is not None:
                                on_cell(done[k])
                        rows.append(dict(done[k]))
    add_gaps(rows)
    return {
        "benchmark": "codecs",
        "tasks": tasks,
        "sizes": sizes,
        "modes": modes,
        "wires": wires,
        "topologies": topologies,
        "epochs": epochs,
        "rows": rows,
    }


def _flag(topology: str) -> str:
    return "auto" if topology == "-" else topology


def markdown_table(record: dict[str, Any]) -> str:
    """One line per cell; kB = 10^3 bytes."""
    header = ["task", "ranks", "mode", "topology", "wire", "test acc.", "vs fp32 (points)"]
    header += ["consensus distance before final average", "max distance", "kB/step/rank"]
    header += ["step (s)", "wall (s)"]
    rows = [
        [
            r["task"],
            r["size"],
            r["mode"],
            r["topology"],
            r["wire"],
            f"{r['test_accuracy']:.4f}",
            "—" if r["wire"] == "fp32" or r["gap_points"] is None else f"{r['gap_points']:+.2f}",
            _g(r["consensus_distance"]),
            _g(r["max_consensus_distance"]),
            f"{r['bytes_per_step'] / 1e3:.1f}",
            _g(r["step_s"]),
            _g(r["wall_seconds"]),
        ]
        for r in record["rows"]
    ]
    return markdown(header, "lrlllrrrrrrr", rows) + "\n"


def _g(x: float | None) -> str:
    return "-" if x is None else "0" if x == 0 else f"{x:.3g}"

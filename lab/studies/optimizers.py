"""Gossip against gradient-averaging allreduce with the optimizers users run.

    python -m lab optimizers --sizes 4,8 --tasks digits,templates --seeds 0,1 \\
        --markdown optimizers.md --json optimizers.json

For every optimizer x task x size x seed x contender it launches one ``mpiexec -n SIZE
gossipgrad train`` (the ``mpiexec`` next to this Python) and reads the run's summary
record. Optimizers (learning rates fixed beforehand on the reference, gradient-averaging
allreduce at 4 ranks, never on a contender):

- ``nesterov``: SGD, momentum 0.9, Nesterov, lr 0.1;
- ``adam``: Adam, lr 0.01;
- ``adamw``: AdamW, lr 0.01, weight decay 0.01.

(The scan, allreduce at 4 ranks, test accuracy on digits / templates: Adam 1e-3 0.953 /
0.861, 3e-3 0.972 / 0.874, 1e-2 0.989 / 0.872, 3e-2 0.989 / -; SGD-Nesterov 0.03 0.939 /
0.861, 0.1 0.975 / 0.879, 0.3 0.981 / -; AdamW 3e-3 0.972, 1e-2 0.989 on digits.)

Contenders: ``allreduce`` (gradients averaged over every rank: what DDP and Horovod run,
the reference), ``gossip-param`` and ``gossip-grad`` (gossip mixing parameters, or
gradients with its default adaptive averaging), ``allreduce-param`` (parameters averaged
over every rank after each local step) and ``allreduce-param-moments`` (the same, and the
optimizer's state too, every step: whether unmixed moments are why parameter averaging
trails). Evaluation runs once, after the last epoch, on the consensus model. Accuracy is
deterministic for a given seed and size; times are not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from statistics import mean

from lab.bench.convergence import train_argv

OPTIMIZERS: dict[str, list[str]] = {
    "nesterov": ["--optimizer", "sgd", "--nesterov", "--lr", "0.1", "--momentum", "0.9"],
    "adam": ["--optimizer", "adam", "--lr", "0.01"],
    "adamw": ["--optimizer", "adamw", "--lr", "0.01", "--wd", "0.01"],
}
"""The optimizers and their ``gossipgrad train`` flags."""

CONTENDERS: dict[str, list[str]] = {
    "allreduce": ["--strategy", "allreduce"],
    "gossip-param": ["--strategy", "gossip", "--mix", "param"],
    "gossip-grad": ["--strategy", "gossip", "--mix", "grad"],
    "allreduce-param": ["--strategy", "allreduce-param"],
    "allreduce-param-moments": ["--strategy", "allreduce-param-moments"],
}
"""The contenders and their flags (``-moments``: a lab plugin's strategy, below)."""

MOMENTS_PLUGIN = "lab.studies.moments_plugin"
"""Loaded (``GOSSIPGRAD_PLUGINS``) for ``allreduce-param-moments`` only."""


def run_one(
    optimizer: str, task: str, size: int, seed: int, contender: str, epochs: int, timeout: float
) -> dict:
    """One launch; its summary record with the cell's keys added."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.jsonl")
        flags = [*OPTIMIZERS[optimizer], *CONTENDERS[contender]]
        cmd = train_argv(size, task, epochs, seed, out, flags)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        if contender.endswith("-moments"):
            env["GOSSIPGRAD_PLUGINS"] = MOMENTS_PLUGIN
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if res.returncode != 0:
            raise SystemExit(f"failed ({res.returncode}): {shlex.join(cmd)}\n{res.stderr[-2000:]}")
        with open(out, encoding="utf-8") as f:
            summary = next(r for r in map(json.loads, f) if r.get("event") == "summary")
    return {
        "optimizer": optimizer,
        "task": task,
        "size": size,
        "seed": seed,
        "contender": contender,
        "test_accuracy": summary["test_accuracy"],
        "steps": summary["steps"],
        "syncs": summary.get("syncs", 0),
        "max_consensus_distance": summary.get("max_consensus_distance"),
        "wall_seconds": round(summary["wall_seconds"], 2),
    }


def table(rows: list[dict], contenders: list[str]) -> str:
    """Markdown: mean test accuracy over seeds per cell, and the gap to allreduce in points."""
    cells: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        key = (r["optimizer"], r["task"], r["size"])
        cells.setdefault(key, {}).setdefault(r["contender"], []).append(r["test_accuracy"])
    head = ["optimizer", "task", "ranks", *contenders]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, by in cells.items():
        ref = mean(by["allreduce"]) if "allreduce" in by else None
        out = [key[0], key[1], str(key[2])]
        for c in contenders:
            if c not in by:
                out.append("-")
                continue
            acc = mean(by[c])
            gap = "" if ref is None or c == "allreduce" else f" ({100 * (acc - ref):+.1f})"
            out.append(f"{acc:.4f}{gap}")
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m lab optimizers", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    ap.add_argument("--tasks", default="digits,templates")
    ap.add_argument("--sizes", default="4,8")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", help="write every run's row here (JSON lines, appended)")
    ap.add_argument("--markdown", help="write the table here")
    args = ap.parse_args(argv)
    contenders = args.contenders.split(",")
    for name in (*args.optimizers.split(","), *contenders):
        if name not in OPTIMIZERS and name not in CONTENDERS:
            ap.error(f"unknown optimizer or contender {name!r}")
    rows = []
    for optimizer in args.optimizers.split(","):
        for task in args.tasks.split(","):
            for size in map(int, args.sizes.split(",")):
                for seed in map(int, args.seeds.split(",")):
                    for c in contenders:
                        row = run_one(optimizer, task, size, seed, c, args.epochs, args.timeout)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
                        if args.json:
                            with open(args.json, "a", encoding="utf-8") as f:
                                f.write(json.dumps(row) + "\n")
    text = table(rows, contenders)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)

"""Statistical efficiency from 8 to 1024 ranks, on the simulator (issue 41, item 3).

    python -m lab scale-efficiency --sizes 8,16,32,64,128,256,512,1024 \\
        --out lab/records/scale/efficiency.jsonl
    python -m lab scale-efficiency --table lab/records/scale/efficiency.jsonl

Task: the generated templates task at 100,000 samples (97,952 to train: 95 a rank at 1024
ranks; 2,000 to test), the runtime's MLP at width 32. Every run is one ``simulate`` on the
stack engine (the agreement test holds it equal to real ranks). Settings fixed before the
study, on the reference (allreduce at 8 ranks, global batch 1024, 6 epochs, test accuracy
after the last): SGD momentum 0.9 lr 0.1 0.878 / 0.3 0.899 (taken); AdamW weight decay
0.01 lr 1e-3 0.815 / 3e-3 0.877 / 1e-2 0.886 (taken). Strong scaling: global batch 1024
(1 a rank at 1024). Weak scaling: 8 a rank, the learning rate scaled by sqrt(global batch /
1024) from the same reference.

Contenders: ``allreduce`` (gradients, the reference); ``gossip`` (the runtime's defaults:
parameters mixed with SGD, gradients with adaptive averaging with AdamW); ``gossip-sync``
(gossip and a global average every 50 steps: ``--sync-every 50``); ``local`` (local SGD,
a global average every 8 steps); ``gossip-lag`` (``--max-lag 2``, frames arriving as a
clock with 5 % compute jitter has them); ``gossip-static`` (the schedule never rotated:
the same hypercube pairs every cycle, BlueFog's static graph against its one-peer dynamic
one). Partitions: ``iid``, ``sorted`` (label-sorted shards), ``sorted+shuffle`` (the
background shuffle on: 8 samples every 2 steps). ``--scalings large``: a total batch of
8192 (Zhu et al.'s large-batch comparison), the learning rate scaled by sqrt(8) from the
reference.

Each run prints one JSON line (appended to ``--out``; a run already there is skipped, so an
interrupted study resumes): final accuracy of the consensus model (the final merge), the
ranks' own accuracy at the end (no merge), the accuracy after every epoch, steps to the
target, the largest consensus distance, global averages taken, and the seconds the run
took on this host with the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

import torch

from gossipgrad.tools.simulate import ClockOptions, simulate, tasks

SAMPLES = 100_000
TRAIN = SAMPLES - tasks.TEST
HIDDEN = 32
EVALS_PER_EPOCH = 4
EPOCHS = 6
OPTIMIZERS = {
    "sgd": {"optimizer": "sgd", "lr": 0.3, "momentum": 0.9},
    "adamw": {"optimizer": "adamw", "lr": 0.01, "weight_decay": 0.01},
}
TARGET = 0.85
CONTENDERS: dict[str, dict[str, Any]] = {
    "allreduce": {"strategy": "allreduce"},
    "gossip": {"strategy": "gossip"},
    "gossip-sync": {"strategy": "gossip", "sync_every": 50},
    "local": {"strategy": "local", "sync_every": 8},
    "gossip-lag": {"strategy": "gossip", "max_lag": 2},
    "gossip-static": {"strategy": "gossip", "rotate": False},
}
PARTITIONS = {
    "iid": {"partition": "iid"},
    "sorted": {"partition": "sorted"},
    "sorted+shuffle": {"partition": "sorted", "shuffle": True},
}
JITTER = ClockOptions(compute_s=0.1, jitter=0.05)
LARGE_BATCH = 8192
"""``--scalings large``: the total batch of Zhu et al.'s CIFAR-10 comparison (16 workers)."""


def key(rec: dict[str, Any]) -> tuple:
    return tuple(rec[k] for k in ("size", "contender", "partition", "optimizer", "scaling"))


def options(contender: str, partition: str, optimizer: str, scaling: str) -> dict[str, Any]:
    opts = {**CONTENDERS[contender], **PARTITIONS[partition], **OPTIMIZERS[optimizer]}
    if scaling == "strong":
        opts["global_batch"] = 1024
    elif scaling == "large":
        opts.update(global_batch=LARGE_BATCH, lr_scale="sqrt", lr_batch=1024)
    else:
        opts.update(batch=8, lr_scale="sqrt", lr_batch=1024)
    return opts


def eval_every(size: int, opts: dict[str, Any], train: int = TRAIN) -> int:
    """Steps between evaluations: :data:`EVALS_PER_EPOCH` an epoch."""
    batch = opts.get("batch") or opts["global_batch"] // size
    if batch * size > train // 4:  # a few steps an epoch: evaluate every step
        return 1
    return max(1, (train // size) // batch // EVALS_PER_EPOCH)


def run_one(
    task: tasks.Task,
    size: int,
    contender: str,
    partition: str,
    optimizer: str,
    scaling: str,
    epochs: float = EPOCHS,
) -> dict[str, Any]:
    opts = options(contender, partition, optimizer, scaling)
    clock = JITTER if contender == "gossip-lag" else None
    started, load = time.perf_counter(), os.getloadavg()[0]
    sim = simulate(
        lambda: tasks.mlp(task, HIDDEN),
        task,
        size,
        epochs=epochs,
        eval_every=eval_every(size, opts, len(task.train_y)),
        clock=clock,
        **opts,
    )
    evals = [r for r in sim.records if "accuracy" in r]
    return {
        "study": "efficiency",
        "size": size,
        "contender": contender,
        "partition": partition,
        "optimizer": optimizer,
        "scaling": scaling,
        "global_batch": sim.job["global_batch"],
        "lr": sim.job["lr"],
        "mix": sim.job["mix"],
        "steps": sim.job["steps"],
        "target": TARGET,
        "steps_to_target": sim.steps_to(TARGET),
        "final_accuracy": sim.summary["final_accuracy"],
        "rank_accuracy_mean": evals[-1]["rank_accuracy_mean"],
        "rank_accuracy_min": evals[-1]["rank_accuracy_min"],
        "accuracy_by_epoch": by_epoch(
            [[r["step"], round(r["accuracy"], 4)] for r in evals], sim.job["steps_per_epoch"]
        ),
        "accuracy_steps": [[r["step"], round(r["accuracy"], 4)] for r in evals],
        "max_distance": max(r["distance"] for r in sim.records),
        "syncs": sim.summary["syncs"],
        "skipped_steps": sim.summary["skipped_steps"],
        "wall_s": round(time.perf_counter() - started, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab scale-efficiency", description=__doc__)
    p.add_argument("--sizes", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--partitions", default=",".join(PARTITIONS))
    p.add_argument("--optimizers", default="sgd")
    p.add_argument("--scalings", default="strong")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--samples", type=int, default=SAMPLES, help="templates samples (tests)")
    p.add_argument("--epochs", type=float, default=EPOCHS, help="epochs (tests)")
    p.add_argument("--out", help="JSON lines to append to (runs already there are skipped)")
    p.add_argument("--table", help="print Markdown tables of this JSON lines file instead")
    p.add_argument(
        "--profile-out",
        help="write the planner profile of the study's model at the per-rank batch of "
        "strong scaling at the first of --sizes here, and stop (gossipgrad plan --profile)",
    )
    p.add_argument(
        "--metrics-out",
        help="with --table: write the runs of --sizes on --partitions[0] as a metrics file "
        "gossipgrad plan --metrics reads (contenders named as strategies: allreduce, gossip, "
        "local)",
    )
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.table:
        from lab.studies.scale_tables import efficiency_tables

        with open(args.table, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        if args.metrics_out:
            sizes = {int(s) for s in args.sizes.split(",")}
            partition = args.partitions.split(",")[0]
            with open(args.metrics_out, "w", encoding="utf-8") as f:
                for rec in records:
                    if rec["size"] in sizes and rec["partition"] == partition:
                        f.writelines(metrics_lines(rec))
            return 0
        print(efficiency_tables(records))
        return 0
    torch.set_num_threads(args.threads)
    if args.profile_out:
        size = int(args.sizes.split(",")[0])
        profile_model(args.samples, 1024 // size).save(args.profile_out)
        return 0
    done = set()
    if args.out and os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            done = {key(json.loads(line)) for line in f if line.strip()}
    task = tasks.templates(args.samples)
    for scaling in args.scalings.split(","):
        for optimizer in args.optimizers.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                for partition in args.partitions.split(","):
                    for contender in args.contenders.split(","):
                        if _skip(contender, partition):
                            continue
                        k = (size, contender, partition, optimizer, scaling)
                        if k in done:
                            continue
                        rec = run_one(
                            task, size, contender, partition, optimizer, scaling, args.epochs
                        )
                        line = json.dumps(rec)
                        print(line, flush=True)
                        if args.out:
                            with open(args.out, "a", encoding="utf-8") as f:
                                f.write(line + "\n")
    return 0


def profile_model(samples: int, batch: int) -> Any:
    """The planner profile of one rank's step of the study's model at ``batch`` (measured
    here, on this host's CPU)."""
    from gossipgrad.tools.measure.profiler import profile_step

    task = tasks.templates(samples)
    model = tasks.mlp(task, HIDDEN)
    x, y = task.train_x[:batch], task.train_y[:batch]
    label = f"templates MLP-{HIDDEN}, batch {batch}"
    return profile_step(model, x, y, label=label).profile


def by_epoch(points: list[list[float]], steps_per_epoch: int) -> list[float]:
    """The last evaluation at or before each epoch's end.

    >>> by_epoch([[2, 0.5], [4, 0.6], [6, 0.7]], 3)
    [0.5, 0.7]
    """
    last = int(max(s for s, _ in points))
    out = []
    for end in range(steps_per_epoch, last + 1, steps_per_epoch):
        out.append([a for s, a in points if s <= end][-1])
    return out


def metrics_lines(rec: dict[str, Any]) -> list[str]:
    """One run as ``gossipgrad train``'s metrics lines (evaluations, then a summary); a
    contender that is not a strategy's own name (gossip-sync, gossip-lag) writes none."""
    if rec["contender"] not in ("allreduce", "gossip", "local"):
        return []
    name = rec["contender"]
    lines = [
        json.dumps({"step": step, "test_accuracy": acc, "strategy": name})
        for step, acc in rec["accuracy_steps"]
    ]
    summary = {
        "event": "summary",
        "strategy": name,
        "size": rec["size"],
        "steps": rec["steps"],
        "test_accuracy": rec["final_accuracy"],
    }
    return [line + "\n" for line in [*lines, json.dumps(summary)]]


def _skip(contender: str, partition: str) -> bool:
    """allreduce averages every rank's gradient: the shuffle cannot change what it sees
    (only its order), so it runs on iid and sorted shards only."""
    return contender == "allreduce" and partition == "sorted+shuffle"


def steps_ratio(a: int | None, b: int | None) -> float:
    """How many times as many steps ``a`` took as ``b`` (inf: never reached)."""
    if a is None:
        return math.inf
    return a / b if b else math.nan

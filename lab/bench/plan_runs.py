"""The runs behind ``plan-validate``: the configurations, training one for a few steps,
the in-step calibration taken before the scored runs, and the re-measured regret after
them. Every function that trains is collective over its communicator."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.step import train_step
from gossipgrad.models import build_model, default_classes, input_shape
from gossipgrad.strategies import build_optimizer, options_for


@dataclass(frozen=True)
class Config:
    strategy: str  # gossip | allreduce | local
    bucket_mb: float
    mix: str = "grad"
    overlap: bool = True
    staleness: int = 0

    @property
    def label(self) -> str:
        parts = [self.strategy, f"{self.bucket_mb:g}MiB", self.mix]
        if self.mix == "grad":
            parts.append("overlap" if self.overlap else "no-overlap")
        parts.append(f"s{self.staleness}")
        return " ".join(parts)


def default_configs(
    strategies: Sequence[str], buckets: Sequence[float], staleness: Sequence[int] = (0,)
) -> list[Config]:
    """Every strategy x bucket cap with overlap; plus, at the median cap, no overlap and
    mix=param; plus staleness 1 at the smallest cap."""
    out: list[Config] = []
    mid = sorted(buckets)[len(buckets) // 2]
    for s in strategies:
        for b in buckets:
            for st in staleness:
                out.append(Config(s, b, "grad", True, st))
        out.append(Config(s, mid, "grad", False, 0))
        out.append(Config(s, mid, "param", False, 0))
    return list(dict.fromkeys(out))


def _slowest(comm: Any, values: list[float]) -> list[float]:
    """Element-wise max over ranks."""
    buf = np.asarray(values, dtype=np.float64)
    allreduce_(comm, buf, ReduceOp.MAX)
    return buf.tolist()


def run_config(
    comm: Any, cfg: Config, arch: str, hidden: int, batch_size: int, steps: int, warmup: int
) -> dict[str, Any]:
    """Train ``cfg`` for ``warmup + steps`` steps; per-step time of the slowest rank."""
    shape = input_shape(arch, 224)
    classes = default_classes(arch)
    torch.manual_seed(0)
    model = build_model(arch, shape, classes, hidden)
    g = torch.Generator().manual_seed(1 + comm.rank)
    x = torch.randn(batch_size, *shape, generator=g)
    y = torch.randint(0, classes, (batch_size,), generator=g)
    opts = options_for(
        cfg.strategy,
        mix=cfg.mix,
        staleness=cfg.staleness,
        bucket_mb=cfg.bucket_mb,
        overlap=cfg.overlap,
        sync="off",
        monitor_every=0,
        sufficient_factors="off",
    )  # the model prices buckets only
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), model, comm, opts
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    times: list[float] = []
    try:
        comm.barrier()
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            train_step(opt, x, y, loss_fn)
            # Every step starts together. The barrier is inside the timing: at staleness 1
            # the exchange is still in flight here, and an untimed barrier would give it
            # free time (on a rate-limited link a step then measured faster than the wire).
            comm.barrier()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        opt.drain()
    finally:
        opt.close()
    slow = _slowest(comm, times)
    return {
        "measured_s": statistics.median(slow),
        "min_s": min(slow),
        "max_s": max(slow),
        "steps_s": slow,
    }


def run_passes(
    comm: Any,
    configs: Sequence[Config],
    passes: int,
    arch: str,
    hidden: int,
    batch_size: int,
    steps: int,
    warmup: int,
    before_pass: Callable[[int], Callable[[Config], dict[str, float]]] | None = None,
) -> list[dict[str, Any]]:
    """Every config measured in ``passes`` passes of ``ceil(steps / passes)`` timed steps
    each (plus ``warmup`` per pass), the order reversed every other pass (A..Z, Z..A, ...),
    so that a slow drift of the machine over the minutes a launch takes falls on every
    configuration alike instead of on those measured last. A config's ``measured_s`` is the
    median of all its timed steps (each the slowest rank's); ``pass_s`` the per-pass
    medians.

    ``before_pass(p)``, when given, runs before pass ``p`` (the calibration rounds) and
    returns the predictor for that pass: ``config -> {name: seconds}``. Each prediction is
    thus made from measurements taken before the runs it predicts; the result carries each
    name's per-pass list (``pass_<name>``) and mean (``<name>``).

    Returns one dict per config, in ``configs`` order. Collective."""
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    per_pass = -(-steps // passes)
    pooled: list[list[float]] = [[] for _ in configs]
    medians: list[list[float]] = [[] for _ in configs]
    predicted: list[dict[str, list[float]]] = [{} for _ in configs]
    for p in range(passes):
        predict = before_pass(p) if before_pass is not None else None
        order = range(len(configs)) if p % 2 == 0 else range(len(configs) - 1, -1, -1)
        for i in order:
            m = run_config(comm, configs[i], arch, hidden, batch_size, per_pass, warmup)
            pooled[i].extend(m["steps_s"])
            medians[i].append(m["measured_s"])
            for name, value in (predict(configs[i]) if predict else {}).items():
                predicted[i].setdefault(name, []).append(value)
    out = []
    for t, med, pred in zip(pooled, medians, predicted, strict=True):
        row: dict[str, Any] = {
            "measured_s": statistics.median(t),
            "min_s": min(t),
            "max_s": max(t),
            "pass_s": med,
        }
        for name, values in pred.items():
            row[name] = statistics.fmean(values)
            row[f"pass_{name}"] = values
        out.append(row)
    return out


def confirm_regret(
    rows: Sequence[dict[str, Any]], chosen_index: int, rounds: int, run: Callable[[str], float]
) -> dict[str, Any]:
    """The regret re-measured: the model's choice (``rows[chosen_index]``, the smallest
    ``predicted_s`` on rank 0) and the fastest measured configuration run again, ``rounds``
    times each, alternating. The first pass
    picked the fastest *as measured*, so its time is biased low (the luckiest of many noisy
    runs); fresh runs of both give a ratio free of that selection. ``regret`` =
    max(1, median(chosen) / median(best)); ``ratio`` is the raw quotient. Collective."""
    chosen = rows[chosen_index]["config"]
    best = min(rows, key=lambda r: r["measured_s"])["config"]  # measured: same on every rank
    out: dict[str, Any] = {"chosen": chosen, "best": best, "rounds": rounds}
    if chosen == best:
        return {**out, "regret": 1.0}
    if rounds < 1:  # not re-measured: the scoring falls back to the first pass
        return {**out, "regret": None}
    times: dict[str, list[float]] = {chosen: [], best: []}
    for i in range(rounds):
        for label in (chosen, best) if i % 2 == 0 else (best, chosen):
            times[label].append(run(label))
    ratio = statistics.median(times[chosen]) / statistics.median(times[best])
    return {
        **out,
        "chosen_s": times[chosen],
        "best_s": times[best],
        "ratio": ratio,
        "regret": max(1.0, ratio),
    }


def calibration_rounds(
    comm: Any,
    strategies: Sequence[str],
    cap_mb: float,
    pairs: int,
    arch: str,
    hidden: int,
    batch_size: int,
    steps: int,
    warmup: int,
    first_round: int = 0,
) -> list[dict[str, Any]]:
    """The runs of the in-step calibration, apart from the scored ones: ``pairs`` rounds per
    strategy of four short runs at ``cap_mb`` (grad mix) -- compute-only (``local``),
    blocking, overlapped staleness 0, overlapped staleness 1 -- the order rotated each
    round (round ``first_round + i`` starts at kind ``(first_round + i) % 4``, so rounds
    taken before successive passes continue the rotation). One dict per round:
    ``strategy`` and ``local_s``, ``blocking_s``, ``s0_s``, ``s1_s``; fitted by
    :func:`gossipgrad.tools.plan.calibrate.fit_in_step`. Collective."""
    if pairs < 1:
        raise ValueError(f"calibrate_pairs must be >= 1, got {pairs}")
    kinds = [
        ("local", "local", False, 0),
        ("blocking", None, False, 0),
        ("s0", None, True, 0),
        ("s1", None, True, 1),
    ]
    runs = []
    for strategy in strategies:
        for i in range(first_round, first_round + pairs):
            t = {}
            for name, kind, overlapped, staleness in kinds[i % 4 :] + kinds[: i % 4]:
                cfg = Config(kind or strategy, cap_mb, "grad", overlapped, staleness)
                t[f"{name}_s"] = run_config(comm, cfg, arch, hidden, batch_size, steps, warmup)[
                    "measured_s"
                ]
            runs.append({"strategy": strategy, **t})
    return runs

"""``python -m lab stragglers``: what one slow rank costs the whole job, per strategy.

    mpiexec -n 8 python -m lab stragglers --markdown stragglers.md

One launch builds a model copy per contender (default gossip with ``--max-lag`` 0, 2 and 4,
gossipgrad's allreduce and DDP; any strategy the engine factory knows, ``gossip:S`` for a
lag bound) and runs blocks of ``--steps`` steps, contender after contender in an order
rotated every repetition, each contender with and without the slow rank back to back (the
order of the two alternating). The slow rank (``--slow RANK:FACTOR``, default
``GOSSIPGRAD_INJECT_SLOW`` or the last rank at 2x) sleeps before each compute so that its
forward and backward take FACTOR times as long (:class:`gossipgrad.inject.straggler.Straggler`).

A block starts after a barrier and ends when every rank has finished its steps and drained
what is in flight; its throughput is the samples actually computed by all ranks over the
slowest rank's time. A rank whose peers are ahead skips compute (``behind()``/
``skip_step()``, gossip with ``--max-lag`` >= 1), so its skipped samples are not counted.
Per contender: ``samples_per_s`` without and with the slow rank (medians over blocks),
``ratio`` (with / without, of the medians), ``ratio_paired`` (median over repetitions of
the two back-to-back blocks' ratio) and the share of samples the slow rank and all ranks
skipped. The model is ``--layers`` x Linear(``--width``), batch ``--batch`` per rank.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.step import train_step
from gossipgrad.inject.straggler import Straggler
from gossipgrad.settings import Settings
from gossipgrad.strategies import build_optimizer, options_for
from gossipgrad.tools.bench.common import finite, make_stack, median

DEFAULT_CONTENDERS = "gossip:0,gossip:2,gossip:4,allreduce,ddp"


def parse_contenders(text: str) -> list[tuple[str, int]]:
    """``"gossip:2,allreduce"`` -> ``[("gossip", 2), ("allreduce", 0)]``.

    >>> parse_contenders("gossip:0,gossip:4,ddp")
    [('gossip', 0), ('gossip', 4), ('ddp', 0)]
    """
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, lag = item.partition(":")
        try:
            out.append((name, int(lag) if lag else 0))
        except ValueError:
            raise ValueError(
                f"--contenders {text!r}: {item!r} is not STRATEGY or "
                "STRATEGY:MAX_LAG (e.g. gossip:2)"
            ) from None
    if not out or len(set(out)) != len(out):
        raise ValueError(f"--contenders {text!r}: name each contender once")
    return out


def parse_slow(text: str | None, size: int, env: Settings) -> tuple[int, float]:
    """``--slow RANK:FACTOR``; default ``GOSSIPGRAD_INJECT_SLOW``, else the last rank at 2x."""
    if text is None:
        return env.inject_slow if env.inject_slow is not None else (size - 1, 2.0)
    try:
        return Settings.from_env({"GOSSIPGRAD_INJECT_SLOW": text}).inject_slow
    except ValueError:
        raise ValueError(
            f"--slow {text!r}: expected RANK:FACTOR with FACTOR >= 1, e.g. 7:2"
        ) from None


class Contender:
    """One strategy's model copy and distributed optimizer, its straggler pair and blocks."""

    def __init__(
        self,
        comm: Communicator,
        name: str,
        max_lag: int,
        width: int,
        layers: int,
        batch: int,
        slow: tuple[int, float],
        bucket_mb: float,
    ) -> None:
        self.comm, self.name, self.max_lag, self.batch = comm, name, max_lag, batch
        self.label = f"{name} --max-lag {max_lag}" if name == "gossip" else name
        self.model = make_stack(width, layers)
        kw: dict[str, Any] = {"bucket_mb": bucket_mb}
        if name == "gossip":
            kw["max_lag"] = max_lag
        self.opt = build_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=1e-3),
            self.model,
            comm,
            options_for(name, **kw),
        )
        self.x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1))
        self.stragglers = {
            False: Straggler(comm.rank, Settings()),
            True: Straggler(comm.rank, Settings(inject_slow=slow)),
        }
        self.rates: dict[bool, list[float]] = {False: [], True: []}
        self.skipped: dict[bool, list[np.ndarray]] = {False: [], True: []}

    def block(self, steps: int, slow: bool, record: bool) -> None:
        """``steps`` steps after a barrier, then a drain; records the job's samples/s."""
        straggler, opt = self.stragglers[slow], self.opt
        self.comm.barrier()
        t0 = time.perf_counter()
        skipped = 0
        for _ in range(steps):
            done = train_step(
                opt,
                self.x,
                None,
                lambda out, _: out.square().mean(),
                compute=straggler.compute,
                batch=len(self.x),
            )
            skipped += done.skipped
        opt.drain()
        elapsed = np.array([time.perf_counter() - t0])
        per_rank = np.zeros(self.comm.size)
        per_rank[self.comm.rank] = skipped
        allreduce_(self.comm, elapsed, ReduceOp.MAX)
        allreduce_(self.comm, per_rank)
        if record:
            computed = (steps * self.comm.size - per_rank.sum()) * self.batch
            self.rates[slow].append(float(computed / elapsed[0]))
            self.skipped[slow].append(per_rank / steps)

    def row(self, slow_rank: int) -> dict[str, Any]:
        plain, slowed = median(self.rates[False]), median(self.rates[True])
        paired = [s / p for s, p in zip(self.rates[True], self.rates[False], strict=True)]
        skip_slow = np.mean(self.skipped[True], axis=0)
        skip_plain = np.mean(self.skipped[False], axis=0)
        return {
            "contender": self.label,
            "strategy": self.name,
            "max_lag": self.max_lag,
            "samples_per_s": finite(plain, 5),
            "samples_per_s_slow": finite(slowed, 5),
            "ratio": finite(slowed / plain),
            "ratio_paired": finite(median(paired)),
            "slow_rank_skipped": finite(float(skip_slow[slow_rank])),
            "skipped_slow": finite(float(skip_slow.mean())),
            "skipped_no_slow": finite(float(skip_plain.mean())),
            "blocks": len(self.rates[True]),
        }


def run_stragglers(
    comm: Communicator,
    contenders: list[tuple[str, int]],
    slow: tuple[int, float],
    width: int = 512,
    layers: int = 4,
    batch: int = 64,
    steps: int = 40,
    reps: int = 3,
    warmup: int = 1,
    bucket_mb: float = 25.0,
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if comm.size < 2:
        raise ValueError("bench stragglers needs at least 2 ranks (mpiexec -n 8 ...)")
    if not 0 <= slow[0] < comm.size:
        raise ValueError(
            f"--slow {slow[0]}:{slow[1]:g}: rank {slow[0]} is not in 0..{comm.size - 1}"
        )
    if min(batch, steps, reps) < 1 or warmup < 0:
        raise ValueError("need --batch, --steps, --reps >= 1 and --warmup >= 0")
    built: list[Contender] = []
    try:
        for name, lag in contenders:  # one by one: those built are closed if one fails
            built.append(Contender(comm, name, lag, width, layers, batch, slow, bucket_mb))
        for rep in range(warmup + reps):
            k = rep % len(built)
            for c in built[k:] + built[:k]:
                for slowed in (False, True) if rep % 2 == 0 else (True, False):
                    c.block(steps, slowed, record=rep >= warmup)
        rows = [c.row(slow[0]) for c in built]
        lockstep = next((r for r in rows if r["strategy"] == "gossip" and not r["max_lag"]), None)
        for r in rows:  # what lag itself costs or saves, against lockstep gossip unslowed
            r["slow_vs_lockstep"] = (
                finite(r["samples_per_s_slow"] / lockstep["samples_per_s"]) if lockstep else None
            )
    finally:
        for c in built:
            c.opt.close()
    model_bytes = sum(p.numel() * p.element_size() for p in built[0].model.parameters())
    return {
        "bench": "stragglers",
        "size": comm.size,
        "slow_rank": slow[0],
        "factor": slow[1],
        "width": width,
        "layers": layers,
        "batch": batch,
        "steps": steps,
        "reps": reps,
        "warmup": warmup,
        "model_bytes": model_bytes,
        "results": rows,
    }


def markdown_table(record: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    lines = [
        f"{record['size']} ranks, rank {record['slow_rank']} {record['factor']:g}x slow, "
        f"{record['layers']} x Linear({record['width']}), batch {record['batch']}, "
        f"{record['steps']} steps per block, {record['reps']} blocks each",
        "",
        "| contender | samples/s | samples/s, slow rank | ratio | ratio (paired) | "
        "slow / lockstep unslowed | slow rank skipped | all skipped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in record["results"]:
        lines.append(
            f"| {r['contender']} | {r['samples_per_s']:.0f} | "
            f"{r['samples_per_s_slow']:.0f} | {r['ratio']:.2f} | "
            f"{r['ratio_paired']:.2f} | {_fmt(r.get('slow_vs_lockstep'))} | "
            f"{100 * r['slow_rank_skipped']:.0f}% | "
            f"{100 * r['skipped_slow']:.0f}% |"
        )
    return "\n".join(lines) + "\n"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"

"""``gossipgrad bench strategies``: strategies side by side on one model, ranks and links.

    python scripts/emucluster.py run -n 8 --rate 1gbit -- \\
        gossipgrad bench strategies --strategies gossip,allreduce,local --png s.png

One launch builds one model copy per strategy through the engine factory
(:func:`gossipgrad.engine.factory.make_distributed`, so any strategy it knows, such as an
adapter added later, is just a name here) and runs them in rotating order: ``--warmup``
untimed blocks each, then ``--reps`` timed blocks of ``--steps`` steps. Per strategy:

- ``step_s``: median over blocks of the mean step time (MAX over ranks);
- ``samples_per_s``: ``batch * size / step_s``;
- ``phase_s``: where a step goes (MAX over ranks, median over blocks): ``forward`` (with the
  waits of forward pre-hooks: overlapped parameter mixing), ``backward`` (with the hooks
  that post gradient buckets), ``optimizer`` (``step()``: waits for gradient buckets, the
  update, the posts or blocking exchange of parameter buckets);
- ``posted_bytes_per_step``: bytes this rank handed to ``isend``/``iallreduce`` (counted by
  wrapping the communicator; an allreduce buffer counts once, whatever MPI sends for it);
- ``wire_bytes_per_step``: bytes the rank's ``eth0`` transmitted (``/proc/net/dev``), in
  the emulated cluster only: the real traffic, TCP/IP headers included;
- ``theory_bytes_per_step``: the model's bytes for gossip, ``2 (size - 1) / size`` of them
  for allreduce (ring / reduce-scatter + allgather), 0 for local.

``gossip_over_allreduce`` is the ratio of the two medians; ``..._paired`` the median over
repetitions of the ratio of the two blocks run back to back in that repetition (less
sensitive to a machine whose load drifts during the run).

A name may carry a variant: ``gossip@block`` is gossip whose communication thread waits in
MPI instead of polling (``GOSSIPGRAD_COMM_WAIT=block``), so both run side by side.

Gossip mixes ``--mix`` (default param); allreduce averages gradients during backward, as
DDP and Horovod do. Both overlap (``--no-overlap`` turns it off for all); ``--staleness 1``
applies to gossipgrad's own strategies (gossip, allreduce), whose rows say so.

Strategies whose library keeps a busy background thread (Horovod: its thread negotiates
with every rank each cycle, ~1 ms, even when idle) would slow every other strategy in the
same processes, so they run after the others, each on its own: the rest rotate block by
block and are closed first.
"""

from __future__ import annotations

from typing import Any

from gossipgrad.bench.common import (
    PHASES,
    CountingCommunicator,
    Trainer,
    finite,
    link_info,
    max_over_ranks,
    median,
    rounded,
    split_variant,
    wire_tx_bytes,
)
from gossipgrad.comm.base import Communicator

ALLREDUCE_FAMILY = ("allreduce", "horovod", "ddp")
"""The strategies that average over all ranks every step: gossip's comparison is with the
fastest of them."""

BUSY_BACKGROUND = frozenset({"horovod"})
"""Strategies run last, alone (see the module docstring)."""


def strategy_kwargs(name: str, mix: str, bucket_mb: float, overlap: bool,
                    staleness: int = 0) -> dict[str, Any]:
    """Factory arguments for ``name``: the built-in bucket strategies take the engine's
    options; other adapters get their own defaults."""
    if name == "gossip":
        return {"mix": mix, "bucket_mb": bucket_mb, "overlap": overlap, "staleness": staleness}
    if name == "allreduce":
        return {"mix": "grad", "bucket_mb": bucket_mb, "overlap": overlap,
                "staleness": staleness}
    if name == "local":
        return {"mix": mix, "bucket_mb": bucket_mb}
    return {}


class Contender:
    """One strategy's model copy, its counting communicator and its measurements."""

    def __init__(self, comm: Communicator, name: str, width: int, layers: int, batch: int,
                 kw: dict[str, Any]) -> None:
        self.name = name
        self.staleness = int(kw.get("staleness", 0))
        base, block = split_variant(name)
        self.counter = CountingCommunicator(comm, block)
        self.trainer = Trainer(self.counter, base, width, layers, **kw)
        self.trainer.set_batch(batch)
        self.times: list[float] = []
        self.phases: dict[str, list[float]] = {k: [] for k in PHASES}
        self.posted: list[float] = []
        self.wire: list[float] = []

    def block(self, steps: int, record: bool) -> None:
        """``steps`` timed steps (+ one untimed); bytes are per step over all ``steps + 1``."""
        posted0 = self.counter.sent + self.counter.reduced
        wire0 = wire_tx_bytes()
        phases = self.trainer.block(steps)
        wire1 = wire_tx_bytes()
        if record:
            self.times.append(phases["total"])
            for k, v in phases.items():
                self.phases[k].append(v)
            self.posted.append((self.counter.sent + self.counter.reduced - posted0) / (steps + 1))
            if wire0 is not None and wire1 is not None:
                self.wire.append((wire1 - wire0) / (steps + 1))


def run_order(strategies: list[str]) -> list[list[str]]:
    """Groups of strategies alive at once, in the order they run: every strategy without a
    busy background thread together (rotating block by block), then each busy one alone."""
    quiet = [n for n in strategies if n not in BUSY_BACKGROUND]
    return [quiet] * bool(quiet) + [[n] for n in strategies if n in BUSY_BACKGROUND]


def run_strategies(comm: Communicator, strategies: list[str], width: int = 1024,
                   layers: int = 8, batch: int = 8, mix: str = "param",
                   bucket_mb: float = 25.0, overlap: bool = True, steps: int = 3,
                   reps: int = 3, warmup: int = 1, staleness: int = 0) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if not strategies or len(set(strategies)) != len(strategies):
        raise ValueError(f"--strategies {','.join(strategies)!r}: name each strategy once")
    if batch < 1 or steps < 1 or reps < 1 or warmup < 0:
        raise ValueError("need --batch, --steps, --reps >= 1 and --warmup >= 0")
    if staleness not in (0, 1):
        raise ValueError(f"--staleness must be 0 or 1, got {staleness}")

    rows: dict[str, dict[str, Any]] = {}
    done: dict[str, Contender] = {}
    for names in run_order(strategies):
        contenders: list[Contender] = []
        try:
            for n in names:  # one by one: those built are closed if a later one fails
                contenders.append(Contender(comm, n, width, layers, batch, strategy_kwargs(
                    split_variant(n)[0], mix, bucket_mb, overlap, staleness)))
            for rep in range(warmup + reps):
                k = rep % len(contenders)
                for c in contenders[k:] + contenders[:k]:
                    comm.barrier()
                    c.block(steps, record=rep >= warmup)
            for c in contenders:
                rows[c.name] = summarize(comm, c, batch)
                done[c.name] = c
        finally:
            for c in contenders:
                c.trainer.close()
    model_bytes = sum(p.numel() * p.element_size()
                      for p in done[strategies[0]].trainer.model.parameters())
    record: dict[str, Any] = {
        "bench": "strategies", "size": comm.size, "width": width, "layers": layers,
        "batch": batch, "mix": mix, "bucket_mb": bucket_mb, "overlap": overlap,
        "staleness": staleness, "steps": steps, "reps": reps, "warmup": warmup,
        "model_bytes": model_bytes, "results": [rows[n] for n in strategies], **link_info()}
    if "gossip" in rows and "allreduce" in rows:
        record["gossip_over_allreduce"] = finite(rows["gossip"]["step_s"]
                                                 / rows["allreduce"]["step_s"])
        g, a = done["gossip"], done["allreduce"]
        paired = [x / y for x, y in zip(max_over_ranks(comm, g.times),
                                        max_over_ranks(comm, a.times), strict=True)]
        record["gossip_over_allreduce_paired"] = finite(median(paired))
    family = [n for n in ALLREDUCE_FAMILY if n in rows]
    if "gossip" in rows and family:
        best = min(family, key=lambda n: rows[n]["step_s"])
        record["best_allreduce_family"] = best
        record["gossip_over_best_allreduce_family"] = finite(rows["gossip"]["step_s"]
                                                             / rows[best]["step_s"])
    return record


def summarize(comm: Communicator, c: Contender, batch: int) -> dict[str, Any]:
    """One row: medians over blocks (times MAX over ranks; bytes of this rank, rank 0's)."""
    step_s = median(max_over_ranks(comm, c.times))
    theory = float(c.trainer.opt.bytes_sent_per_step())
    posted = median(c.posted)
    wire = median(c.wire) if c.wire else None
    phases = {k: rounded(median(max_over_ranks(comm, v)), 4) for k, v in c.phases.items()
              if k != "total"}
    return {"strategy": c.name, "staleness": c.staleness, "step_s": rounded(step_s),
            "phase_s": phases,
            "samples_per_s": rounded(batch * comm.size / step_s, 5),
            "posted_bytes_per_step": round(posted, 1), "theory_bytes_per_step": round(theory, 1),
            "wire_bytes_per_step": round(wire, 1) if wire is not None else None,
            "wire_over_theory": finite(wire / theory) if wire is not None and theory else None}


def markdown_table(record: dict[str, Any]) -> str:
    """The results as a Markdown table (MB = 10^6 bytes)."""
    lines = ["| strategy | staleness | step (s) | samples/s | posted MB/step | wire MB/step "
             "| theory MB/step |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in record["results"]:
        wire = f"{r['wire_bytes_per_step'] / 1e6:.2f}" if r["wire_bytes_per_step"] else "-"
        lines.append(f"| {r['strategy']} | {r.get('staleness', 0)} | {r['step_s']:.4f} | "
                     f"{r['samples_per_s']:.1f} | "
                     f"{r['posted_bytes_per_step'] / 1e6:.2f} | {wire} | "
                     f"{r['theory_bytes_per_step'] / 1e6:.2f} |")
    return "\n".join(lines) + "\n"


def plot_png(record: dict[str, Any], path: str) -> None:
    """Step time and bytes per step per strategy, side by side (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--png needs matplotlib: pip install 'gossipgrad[plot]'") from exc
    rows = record["results"]
    names = [r["strategy"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.bar(names, [r["step_s"] for r in rows], color="tab:blue")
    ax1.set_ylabel("step time (s)")
    xs = range(len(rows))
    ax2.bar([x - 0.2 for x in xs], [r["theory_bytes_per_step"] / 1e6 for r in rows], 0.4,
            label="theory", color="tab:gray")
    ax2.bar([x + 0.2 for x in xs],
            [(r["wire_bytes_per_step"] or r["posted_bytes_per_step"]) / 1e6 for r in rows], 0.4,
            label="wire" if any(r["wire_bytes_per_step"] for r in rows) else "posted",
            color="tab:orange")
    ax2.set_xticks(list(xs), names)
    ax2.set_ylabel("MB sent per step per rank")
    ax2.legend()
    link = record.get("emu_rate") or "host"
    fig.suptitle(f"{record['size']} ranks, {link}, {record['model_bytes'] / 1e6:.1f} MB model, "
                 f"batch {record['batch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""``gossipgrad bench strategies``: strategies side by side on one model, ranks and links.

    python scripts/emucluster.py run -n 8 --rate 1gbit -- \\
        gossipgrad bench strategies --strategies gossip,allreduce,local --png s.png

One launch builds one model copy per strategy through the engine factory
(:func:`gossipgrad.strategies.DistributedOptimizer`, so any strategy it knows, such as an
adapter added later, is just a name here) and runs them in rotating order: ``--warmup``
untimed blocks each, then ``--reps`` timed blocks of ``--steps`` steps. Per strategy:

- ``step_s``: median over blocks of the mean step time (MAX over ranks);
- ``samples_per_s``: ``batch * size / step_s``;
- ``phase_s``: where a step goes (MAX over ranks, median over blocks): ``forward`` (with the
  waits of forward pre-hooks: overlapped parameter mixing), ``backward`` (with the hooks
  that post gradient buckets), ``optimizer`` (``step()``: waits for gradient buckets, the
  update, the posts or blocking exchange of parameter buckets);
- ``step_split_s``: the same step split as ``gossipgrad train``'s summary, of the slowest
  rank in each block (so its parts add up to that step), median over blocks
  (docs/train.md): ``compute`` (forward and backward less the waits in
  them), ``exposed_wire`` (every wait on communication on the training thread; None for
  ddp and horovod, whose waits happen inside the library) and ``host`` (the rest). Wire
  time hidden behind compute is not measured;
- ``posted_bytes_per_step``: bytes a rank handed to ``isend``/``iallreduce``, the mean over
  ranks (counted by wrapping the communicator; an allreduce buffer counts once, whatever
  MPI sends for it; under ps a rank sends more the more of the model it serves);
- ``wire_bytes_per_step``: bytes a rank's ``eth0`` transmitted (``/proc/net/dev``), the mean
  over ranks, in the emulated cluster only: the real traffic, TCP/IP headers included;
- ``theory_bytes_per_step``: the model's bytes for gossip, ``2 (size - 1) / size`` of them
  for allreduce (ring / reduce-scatter + allgather) and ps (gradients to each bucket's owner,
  parameters back), 0 for local;
- ``cpu_s_per_step``: ``user + sys`` of the whole process (every thread: the communication
  thread and MPI's progress too) per step, the mean over ranks, and ``cpu_share``: the ranks
  of one host together over (its cores x ``step_s``), 1.0 = every core busy. On a stand-in
  device, where compute is a wait, it says how much of the host the exchange itself takes;
- ``peak_rss_mb``: the most resident memory one rank's process held while the contender's
  group was built and run (MiB, MAX over ranks; Linux only, else None): contenders alive
  together (``--together all``) share one figure, ``--together one`` gives each its own.

``gossip_over_allreduce`` is the ratio of the two medians; ``..._paired`` the median over
repetitions of the ratio of the two blocks run back to back in that repetition (less
sensitive to a machine whose load drifts during the run).

A name may carry a variant: ``gossip@block`` is gossip whose communication thread waits in
MPI instead of polling (``GOSSIPGRAD_COMM_WAIT=block``), so both run side by side; and
settings of its own (:func:`~gossipgrad.tools.bench.common.split_settings`): ``gossip:mix=grad``,
``gossip:bucket-mb=4:staleness=1`` run beside the launch's ``gossip`` in one launch (a
setting the strategy does not read is refused).

Gossip mixes ``--mix`` (default param); allreduce averages gradients during backward, as
DDP and Horovod do. Both overlap (``--no-overlap`` turns it off for all); ``--staleness 1``
applies to gossipgrad's own strategies (gossip, allreduce), whose rows say so.

Strategies whose library keeps a busy background thread (Horovod: its thread negotiates
with every rank each cycle, ~1 ms, even when idle) would slow every other strategy in the
same processes, so they run after the others, each on its own: the rest rotate block by
block and are closed first. ``--together strategy`` runs one strategy's contenders at a
time, ``--together one`` one contender at a time (less memory for a big model).

Sufficient factors (``--factors on,off``): each strategy that can send Linear layers'
gradients as factors (its spec's ``factor_pattern``) runs once per value, named
``gossip`` (off), ``gossip+factors`` (on), ``gossip+factors-auto`` (auto); the others run
once, without. ``factors_over_plain`` holds, per strategy, the ratios on / off of step time
(medians, and paired block by block), wire and posted bytes. ``--model fc-head`` trains the
FC-heavy model of ``--dims`` (the VGG head by default) instead of the Linear stack.

Wire codecs (``--wires fp32,bf16,fp8``): each strategy that takes a codec runs once per
codec it accepts, named ``gossip`` (fp32), ``gossip+bf16``, ``ddp+bf16`` (DDP's own
compression hook); a name may also carry its codec itself (``--strategies
gossip,gossip+bf16,ddp+bf16``). ``wires_over_fp32`` holds, per strategy and codec, the
ratios to its fp32 row of step time (medians, and paired) and of posted and theory bytes.
"""

# Over 300 lines on purpose: one benchmark: contenders, the timed rounds and their summary.

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.options import ExchangeOptions, wire_refusal
from gossipgrad.registry import CODECS, STRATEGIES
from gossipgrad.runtime import host_share
from gossipgrad.tools.bench.common import (
    PHASES,
    SPLIT,
    CountingCommunicator,
    Trainer,
    base_strategy,
    finite,
    link_info,
    markdown,
    max_over_ranks,
    median,
    peak_rss_mb,
    release_memory,
    reset_peak_rss,
    rounded,
    split_settings,
    split_variant,
    wire_tx_bytes,
)

ALLREDUCE_FAMILY = ("allreduce", "horovod", "ddp")
"""The strategies that average over all ranks every step: gossip's comparison is with the
fastest of them."""

BUSY_BACKGROUND = frozenset({"horovod"})
"""Strategies run last, alone (see the module docstring)."""


def sends_factors(name: str) -> bool:
    """Whether strategy ``name`` can send sufficient factors (its spec says)."""
    return STRATEGIES.get(name).factor_pattern is not None


def takes_wire(name: str, wire: str) -> bool:
    """Whether strategy ``name`` accepts ``--wire wire`` (its spec's rules say)."""
    return wire_refusal(name, wire) is None


def strategy_kwargs(
    name: str,
    mix: str,
    bucket_mb: float,
    overlap: bool,
    staleness: int = 0,
    factors: str = "off",
    wire: str = "fp32",
    own: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The launch's exchange settings as contender ``name`` takes them: those its spec
    reads (a strategy that averages one thing, or has no buckets of its own, keeps its own
    settings for the rest), with ``own`` (the contender's settings, from its name) on top;
    one of those the strategy does not read is a ValueError."""
    candidates = {
        "mix": mix,
        "bucket_mb": bucket_mb,
        "overlap": overlap,
        "staleness": staleness,
        "sufficient_factors": factors,
        "wire": wire,
    }
    uses = STRATEGIES.get(name).uses
    unread = sorted(k for k in (own or {}) if k not in uses)
    if unread:
        raise ValueError(
            f"--strategies: {name} does not read {', '.join(unread)}; drop it from its name"
        )
    return {k: v for k, v in candidates.items() if k in uses} | dict(own or {})


Spec = tuple[str, str, str, str]  # name, strategy (with its @variant), factors, wire


def contenders(
    strategies: list[str], factors: list[str], wires: tuple[str, ...] = ("fp32",)
) -> list[Spec]:
    """``(name, strategy, factors, wire)`` of every contender, in order (see the module
    docstring). A name ``strategy+wire`` runs that codec only.

    >>> [n for n, _, _, _ in contenders(["gossip", "local"], ["off", "on"])]
    ['gossip', 'gossip+factors', 'local']
    >>> [n for n, *_ in contenders(["gossip", "ddp", "allreduce+fp8"], ["off"], ("fp32", "fp8"))]
    ['gossip', 'gossip+fp8', 'ddp', 'allreduce+fp8']
    """
    out = []
    for s in strategies:
        base, _, fixed = s.partition("+")
        if fixed and fixed not in CODECS:
            raise ValueError(
                f"--strategies {s!r}: {fixed!r} is not a wire codec; one of "
                f"{', '.join(CODECS.names())} (e.g. gossip+bf16)"
            )
        plain = base_strategy(base)
        for w in [fixed] if fixed else [w for w in wires if takes_wire(plain, w)]:
            if not takes_wire(plain, w):
                ExchangeOptions(strategy=plain, wire=w)  # raises, saying why
            for f in factors if sends_factors(plain) else ["off"]:
                name = (
                    base
                    if f == "off"
                    else f"{base}+factors"
                    if f == "on"
                    else f"{base}+factors-{f}"
                )
                out.append((name if w == "fp32" else f"{name}+{w}", base, f, w))
    return list(dict.fromkeys(out))


class Contender:
    """One strategy's model copy, its counting communicator and its measurements."""

    def __init__(
        self,
        comm: Communicator,
        name: str,
        width: int,
        layers: int,
        batch: int,
        kw: dict[str, Any],
        strategy: str | None = None,
        dims: tuple[int, ...] | None = None,
        standin: Any = None,
    ) -> None:
        self.name, self.strategy = name, strategy or name
        self.staleness = int(kw.get("staleness", 0))
        self.factors = kw.get("sufficient_factors", "off")
        self.codec = kw.get("wire", "fp32")
        self.settings = {k: kw[k] for k in ("mix", "bucket_mb", "max_lag", "wire") if k in kw}
        base, block = split_variant(self.strategy)
        self.counter = CountingCommunicator(comm, block)
        self.trainer = Trainer(self.counter, base, width, layers, dims=dims, standin=standin, **kw)
        self.trainer.set_batch(batch)
        self.times: list[float] = []
        self.phases: dict[str, list[float]] = {k: [] for k in PHASES}
        self.split: dict[str, list[float]] = {k: [] for k in SPLIT}
        self.posted: list[float] = []
        self.wire: list[float] = []
        self.cpu: list[float] = []

    def posted_bytes(self) -> int:
        return self.counter.sent + self.counter.reduced + self.counter.gathered

    def block(self, steps: int, record: bool) -> None:
        """``steps`` timed steps (+ one untimed); bytes are per step over all ``steps + 1``."""
        posted0 = self.posted_bytes()
        wire0 = wire_tx_bytes()
        cpu0 = time.process_time()  # every thread of this process
        phases = self.trainer.block(steps)
        cpu1 = time.process_time()
        wire1 = wire_tx_bytes()
        if record:
            self.times.append(phases["total"])
            for k in PHASES:
                self.phases[k].append(phases[k])
            for k in SPLIT:  # a library's exposed wire is None: its list stays empty
                if phases[k] is not None:
                    self.split[k].append(phases[k])
            self.posted.append((self.posted_bytes() - posted0) / (steps + 1))
            self.cpu.append(max(0.0, cpu1 - cpu0) / (steps + 1))
            if wire0 is not None and wire1 is not None:
                self.wire.append((wire1 - wire0) / (steps + 1))


def run_order(names: list[str], together: str = "all") -> list[list[str]]:
    """Groups of contenders alive at once, in the order they run: every one without a busy
    background thread together (rotating block by block; with ``together="strategy"`` one
    group per strategy, with ``"one"`` each alone), then each busy one alone."""
    quiet = [n for n in names if base_strategy(n) not in BUSY_BACKGROUND]
    if together == "strategy":
        groups = [
            [n for n in quiet if base_strategy(n) == s]
            for s in dict.fromkeys(base_strategy(n) for n in quiet)
        ]
    elif together == "one":
        groups = [[n] for n in quiet]
    else:
        groups = [quiet] * bool(quiet)
    return groups + [[n] for n in names if base_strategy(n) in BUSY_BACKGROUND]


# Over 60 lines on purpose: the try/finally that closes every contender built must enclose their
# construction and runs.
def run_strategies(
    comm: Communicator,
    strategies: list[str],
    width: int = 1024,
    layers: int = 8,
    batch: int = 8,
    mix: str = "param",
    bucket_mb: float = 25.0,
    overlap: bool = True,
    steps: int = 3,
    reps: int = 3,
    warmup: int = 1,
    staleness: int = 0,
    factors: tuple[str, ...] = ("off",),
    dims: tuple[int, ...] | None = None,
    together: str = "all",
    standin: Any = None,
    wires: tuple[str, ...] = ("fp32",),
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank).

    ``standin`` (a :class:`gossipgrad.tools.bench.standin.StandinModels`): every contender trains
    the profiled model on a stand-in device instead of the Linear stack."""
    _check_arguments(strategies, batch, steps, reps, warmup, staleness, factors)
    specs = {name: (s, f, w) for name, s, f, w in contenders(strategies, list(factors), wires)}
    rows: dict[str, dict[str, Any]] = {}
    times: dict[str, tuple[int, list[float]]] = {}  # name -> (group, block times)
    model_bytes = 0
    share = host_share(comm)  # (cores, ranks on this host): the same for every contender
    for group, names in enumerate(run_order(list(specs), together)):
        alive: list[Contender] = []
        # Every rank has let go of the last group before any collects it and starts this
        # group's peak: ranks that share a process (in-process worlds) hold objects of each
        # other's (messages in flight), so a collection before the barrier can miss a cycle.
        comm.barrier()
        release_memory()
        tracked = reset_peak_rss()  # this group's peak, not an earlier one's
        try:
            for n in names:  # one by one: those built are closed if a later one fails
                s, f, w = specs[n]
                s, own = split_settings(s)
                base = split_variant(s)[0]
                kw = strategy_kwargs(base, mix, bucket_mb, overlap, staleness, f, w, own)
                alive.append(
                    Contender(
                        comm,
                        n,
                        width,
                        layers,
                        batch,
                        kw,
                        strategy=s,
                        dims=dims,
                        standin=standin,
                    )
                )
            model_bytes = sum(
                p.numel() * p.element_size() for p in alive[0].trainer.model.parameters()
            )
            for rep in range(warmup + reps):
                k = rep % len(alive)
                for c in alive[k:] + alive[:k]:
                    comm.barrier()
                    c.block(steps, record=rep >= warmup)
            peak = peak_rss_mb() if tracked else None
            peak_mb = max_over_ranks(comm, [peak if peak is not None else -1.0])[0]
            for c in alive:
                rows[c.name] = summarize(comm, c, batch, share)
                rows[c.name]["peak_rss_mb"] = round(peak_mb, 1) if peak_mb >= 0 else None
                times[c.name] = (group, max_over_ranks(comm, c.times))
        finally:
            for c in alive:
                c.trainer.close()
            # A big model's copies go before the next group is built: no name may hold
            # one (the loops' last contender), and hooks hold the model in cycles.
            c = None
            alive.clear()
            release_memory()
    record: dict[str, Any] = {
        "bench": "strategies",
        "size": comm.size,
        "width": width,
        "layers": layers,
        "dims": list(dims) if dims else None,
        "batch": batch,
        "mix": mix,
        "bucket_mb": bucket_mb,
        "overlap": overlap,
        "staleness": staleness,
        "factors": list(factors),
        "wires": list(wires),
        "together": together,
        "steps": steps,
        "reps": reps,
        "warmup": warmup,
        "model_bytes": model_bytes,
        "results": [rows[n] for n in specs],
        **link_info(),
    }
    record = _with_ratios(record, rows, times, strategies)
    return standin.annotate(record) if standin is not None else record


def _check_arguments(
    strategies: list[str],
    batch: int,
    steps: int,
    reps: int,
    warmup: int,
    staleness: int,
    factors: tuple[str, ...],
) -> None:
    if not strategies or len(set(strategies)) != len(strategies):
        raise ValueError(f"--strategies {','.join(strategies)!r}: name each strategy once")
    for s in strategies:  # unknown names and settings fail before any model is built
        base, own = split_settings(s.partition("+")[0])
        strategy_kwargs(base_strategy(base), "param", 25.0, True, 0, "off", "fp32", own)
    if batch < 1 or steps < 1 or reps < 1 or warmup < 0:
        raise ValueError("need --batch, --steps, --reps >= 1 and --warmup >= 0")
    if staleness not in (0, 1):
        raise ValueError(f"--staleness must be 0 or 1, got {staleness}")
    if not factors or not set(factors) <= {"on", "off", "auto"}:
        raise ValueError(f"--factors {','.join(factors)!r}: a list of on, off, auto")


def _with_ratios(
    record: dict[str, Any],
    rows: dict[str, dict[str, Any]],
    times: dict[str, tuple[int, list[float]]],
    strategies: list[str],
) -> dict[str, Any]:
    """``record`` plus gossip's step time over allreduce's (and the allreduce family's best)
    and, per strategy run with and without factors, ``factors_over_plain``."""
    if "gossip" in rows and "allreduce" in rows:
        record["gossip_over_allreduce"] = finite(
            rows["gossip"]["step_s"] / rows["allreduce"]["step_s"]
        )
        record["gossip_over_allreduce_paired"] = paired_ratio(times["gossip"], times["allreduce"])
    family = [n for n in ALLREDUCE_FAMILY if n in rows]
    if "gossip" in rows and family:
        best = min(family, key=lambda n: rows[n]["step_s"])
        record["best_allreduce_family"] = best
        record["gossip_over_best_allreduce_family"] = finite(
            rows["gossip"]["step_s"] / rows[best]["step_s"]
        )
    ratios = {
        s: factor_ratios(rows[f"{s}+factors"], rows[s], times[f"{s}+factors"], times[s])
        for s in strategies
        if s in rows and f"{s}+factors" in rows
    }
    if ratios:
        record["factors_over_plain"] = ratios
    by_wire = {
        n: factor_ratios(rows[n], rows[base], times[n], times[base])
        for n in rows
        for base in [n.rpartition("+")[0]]
        if n.rpartition("+")[2] in CODECS and base in rows
    }
    if by_wire:
        record["wires_over_fp32"] = by_wire
    return record


def paired_ratio(a: tuple[int, list[float]], b: tuple[int, list[float]]) -> float | None:
    """Median over repetitions of a's block time / b's, when both ran in one group (block
    by block, back to back); None otherwise."""
    if a[0] != b[0]:
        return None
    return finite(median([x / y for x, y in zip(a[1], b[1], strict=True)]))


def factor_ratios(
    on: dict[str, Any],
    off: dict[str, Any],
    t_on: tuple[int, list[float]],
    t_off: tuple[int, list[float]],
) -> dict[str, float | None]:
    """Factors on / off for one strategy: step time (medians; paired) and bytes."""

    def ratio(key: str) -> float | None:
        a, b = on[key], off[key]
        return finite(a / b) if a is not None and b else None

    return {
        "step_s": ratio("step_s"),
        "step_s_paired": paired_ratio(t_on, t_off),
        "wire_bytes": ratio("wire_bytes_per_step"),
        "posted_bytes": ratio("posted_bytes_per_step"),
        "theory_bytes": ratio("theory_bytes_per_step"),
    }


def mean_over_ranks(comm: Communicator, values: list[float]) -> list[float]:
    """Element-wise mean over ranks (ps ranks send different amounts: what each owns)."""
    arr = np.asarray(values, dtype=np.float64)
    if comm.size > 1:
        allreduce_(comm, arr)
    return (arr / comm.size).tolist()


def slowest_rank_split(
    comm: Communicator, times: list[float], split: dict[str, list[float]]
) -> dict[str, float | None]:
    """Per block, the step split of the rank whose step took longest (the parts of one rank
    add up to its step; the MAX of each part over ranks would not); the median over blocks
    of each part, named as in the row (a part no rank measured: None)."""
    parts = [k for k in SPLIT if split[k]]
    table = np.zeros((comm.size, len(times), 1 + len(parts)))
    table[comm.rank] = np.column_stack([times, *(split[k] for k in parts)])
    if comm.size > 1:
        allreduce_(comm, table)  # a sum: each rank filled its own row
    slowest = table[np.argmax(table[:, :, 0], axis=0), np.arange(len(times))]
    medians = dict(zip(parts, np.median(slowest[:, 1:], axis=0).tolist(), strict=True))
    names = ("compute", "exposed_wire", "host")
    return {
        name: rounded(medians[k], 4) if k in medians else None
        for k, name in zip(SPLIT, names, strict=True)
    }


def summarize(
    comm: Communicator, c: Contender, batch: int, share: tuple[int, int]
) -> dict[str, Any]:
    """One row: medians over blocks (times MAX over ranks; bytes the mean over ranks);
    ``share`` is :func:`host_share`'s (cores, ranks on this host)."""
    step_s = median(max_over_ranks(comm, c.times))
    theory = float(c.trainer.opt.bytes_sent_per_step())
    posted = median(mean_over_ranks(comm, c.posted))
    wire = median(mean_over_ranks(comm, c.wire)) if c.wire else None
    cpu = median(mean_over_ranks(comm, c.cpu))
    cores, per_host = share
    phases = {
        k: rounded(median(max_over_ranks(comm, v)), 4) for k, v in c.phases.items() if k != "total"
    }
    split = slowest_rank_split(comm, c.times, c.split)
    table = c.trainer.opt.factor_table
    layout = getattr(c.trainer.opt, "layout", None)
    return {
        "strategy": c.strategy,
        "name": c.name,
        "wire": c.codec,
        "sufficient_factors": c.factors,
        "factor_forms": [r["form"] for r in table] if table else None,
        "staleness": c.staleness,
        **c.settings,
        "step_s": rounded(step_s),
        "phase_s": phases,
        "step_split_s": split,
        "samples_per_s": rounded(batch * comm.size / step_s, 5),
        "posted_bytes_per_step": round(posted, 1),
        "theory_bytes_per_step": round(theory, 1),
        "wire_bytes_per_step": round(wire, 1) if wire is not None else None,
        "wire_over_theory": finite(wire / theory) if wire is not None and theory else None,
        "cpu_s_per_step": rounded(cpu, 4),
        "cpu_share": finite(cpu * per_host / (max(1, cores) * step_s), 3),
        "split_parameters": bool(layout and any(b.span for b in layout.buckets)),
    }


def markdown_table(record: dict[str, Any]) -> str:
    """The results as a Markdown table (MB = 10^6 bytes)."""
    header = ["strategy", "staleness", "step (s)", "exposed wire (s)", "samples/s"]
    header += ["posted MB/step", "wire MB/step", "theory MB/step"]
    rows = [
        [
            r.get("name", r["strategy"]),
            r.get("staleness", 0),
            f"{r['step_s']:.4f}",
            _seconds((r.get("step_split_s") or {}).get("exposed_wire")),
            f"{r['samples_per_s']:.1f}",
            f"{r['posted_bytes_per_step'] / 1e6:.2f}",
            f"{r['wire_bytes_per_step'] / 1e6:.2f}" if r["wire_bytes_per_step"] else "-",
            f"{r['theory_bytes_per_step'] / 1e6:.2f}",
        ]
        for r in record["results"]
    ]
    return markdown(header, "lrrrrrrr", rows) + "\n"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def plot_png(record: dict[str, Any], path: str) -> None:
    """Step time and bytes per step per strategy, side by side (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--png needs matplotlib: pip install 'gossipgrad[plot]'") from exc
    rows = record["results"]
    names = [r.get("name", r["strategy"]) for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.bar(names, [r["step_s"] for r in rows], color="tab:blue")
    ax1.set_ylabel("step time (s)")
    xs = range(len(rows))
    ax2.bar(
        [x - 0.2 for x in xs],
        [r["theory_bytes_per_step"] / 1e6 for r in rows],
        0.4,
        label="theory",
        color="tab:gray",
    )
    ax2.bar(
        [x + 0.2 for x in xs],
        [(r["wire_bytes_per_step"] or r["posted_bytes_per_step"]) / 1e6 for r in rows],
        0.4,
        label="wire" if any(r["wire_bytes_per_step"] for r in rows) else "posted",
        color="tab:orange",
    )
    ax2.set_xticks(list(xs), names)
    ax2.set_ylabel("MB sent per step per rank")
    ax2.legend()
    link = record.get("emu_rate") or "host"
    fig.suptitle(
        f"{record['size']} ranks, {link}, {record['model_bytes'] / 1e6:.1f} MB model, "
        f"batch {record['batch']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

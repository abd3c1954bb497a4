"""``gossipgrad bench codecs``: what each wire codec saves in bytes and costs in time.

    mpiexec -n 8 gossipgrad bench codecs --strategies gossip,allreduce,ps --wires fp32,bf16,fp16,fp8

One launch trains the digits job (``--arch``, ``--dataset``, ``--batch-size`` as ``train``
takes them) for ``--steps`` timed steps after ``--warmup`` untimed ones, once per strategy
and codec, through the real optimizer on a communicator that counts what it is handed.
Per row:

- ``posted_bytes_per_step``: bytes this rank handed to ``isend``/``iallgather`` per step,
  plus ``2 (size - 1) / size`` of those handed to ``iallreduce`` (a ring's share), the mean
  over ranks; ``theory_bytes_per_step``: what the
  optimizer reports (``bytes_sent_per_step``); ``bytes_over_fp32``: posted over the same
  strategy's fp32 row (bf16 and fp16: 0.5 and a scale; fp8: 0.25 and a scale per 512;
  ``ddp`` moves its buckets through gloo, uncounted: its theory, and no codec time);
- ``step_s``: median over steps of the step time, MAX over ranks;
- ``encode_s_per_step``/``decode_s_per_step``: seconds inside the codec's ``encode_`` and
  ``decode`` per step, on any thread (the communication thread's count too: with more
  ranks than cores it is compute time lost), MAX over ranks; ``codec_share``: their sum
  over ``step_s``.

Sufficient factors are off (every Linear layer goes through the buckets and their codec).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_, allreduce_bytes
from gossipgrad.data.sources import open_source
from gossipgrad.engine.step import train_step
from gossipgrad.models import build_model, loss_fn
from gossipgrad.options import DataOptions
from gossipgrad.strategies import build_optimizer, options_for
from gossipgrad.tools.bench.common import CountingCommunicator, finite, link_info, median, rounded
from gossipgrad.tools.bench.strategies import mean_over_ranks, takes_wire


class CodecClock:
    """Seconds spent in a codec instance's ``encode_`` and ``decode`` (its methods wrapped,
    thread-safe: the communication thread encodes and decodes too)."""

    def __init__(self) -> None:
        self.seconds = {"encode": 0.0, "decode": 0.0}
        self._lock = threading.Lock()

    def watch(self, codec: Any) -> None:
        for attr, kind in (("encode_", "encode"), ("decode", "decode")):
            setattr(codec, attr, self._timed(getattr(codec, attr), kind))

    def _timed(self, fn: Any, kind: str) -> Any:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                with self._lock:
                    self.seconds[kind] += time.perf_counter() - t0

        return timed


def codecs_of(opt: Any) -> list[Any]:
    """The codec instances an optimizer encodes with (the shell's and a lagged timing's,
    ps's push and pull), each once."""
    return list({id(c): c for c in opt.wire_codecs}.values())


def run_codecs(
    comm: Communicator,
    strategies: list[str],
    wires: list[str],
    arch: str = "mlp",
    dataset: str = "digits",
    batch_size: int = 32,
    steps: int = 40,
    warmup: int = 5,
) -> dict[str, Any]:
    """The benchmark (collective); the record, the same on every rank."""
    if comm.size < 2:
        raise ValueError("bench codecs needs at least 2 ranks (one rank sends nothing)")
    if steps < 1 or warmup < 0:
        raise ValueError(f"need --steps >= 1 and --warmup >= 0, got {steps}, {warmup}")
    data = DataOptions(dataset=dataset, batch_size=batch_size)
    source = open_source(data, rank=comm.rank, size=comm.size)
    rows = []
    for strategy in strategies:
        for wire in wires:
            if takes_wire(strategy, wire):
                rows.append(_row(comm, source, strategy, wire, arch, steps, warmup))
    fp32 = {r["strategy"]: _bytes(r) for r in rows if r["wire"] == "fp32"}
    for r in rows:
        base = fp32.get(r["strategy"])
        r["bytes_over_fp32"] = finite(_bytes(r) / base, 5) if base else None
    return {
        "bench": "codecs",
        "size": comm.size,
        "arch": arch,
        "dataset": dataset,
        "batch_size": batch_size,
        "steps": steps,
        "warmup": warmup,
        "results": rows,
        **link_info(),
    }


def _bytes(row: dict[str, Any]) -> float:
    """Posted bytes, or the theory where nothing went through our communicator (ddp: gloo)."""
    return row["posted_bytes_per_step"] or row["theory_bytes_per_step"]


def _posted(counter: CountingCommunicator, size: int) -> float:
    """Bytes handed to the communicator so far, an allreduce buffer counted as a ring sends
    it (2 (size - 1) / size of it), so that fp32's allreduce compares with a lossy codec's,
    which scatters and gathers encoded shards point to point."""
    return counter.sent + counter.gathered + allreduce_bytes(counter.reduced, size)


def _row(
    comm: Communicator,
    source: Any,
    strategy: str,
    wire: str,
    arch: str,
    steps: int,
    warmup: int,
) -> dict[str, Any]:
    counter = CountingCommunicator(comm)
    model = build_model(arch, source.in_shape, source.classes, 0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opts = options_for(strategy, wire=wire, sync="off", monitor_every=0, sufficient_factors="off")
    opt = build_optimizer(sgd, model, counter, opts)
    clock = CodecClock()
    for codec in codecs_of(opt):
        clock.watch(codec)
    batches = _batches(source, warmup + steps)
    times: list[float] = []
    try:
        for i, (x, y) in enumerate(batches):
            if i == warmup:
                comm.barrier()
                posted0 = _posted(counter, comm.size)
                seconds0 = dict(clock.seconds)
            t0 = time.perf_counter()
            train_step(opt, x, y, loss_fn, batch=len(x))
            times.append(time.perf_counter() - t0)
        opt.drain()
        posted = (_posted(counter, comm.size) - posted0) / steps
        theory = float(opt.bytes_sent_per_step())
    finally:
        opt.close()
    step_times = np.asarray(times[warmup:], dtype=np.float64)
    allreduce_(comm, step_times, ReduceOp.MAX)
    spent = np.array([clock.seconds[k] - seconds0[k] for k in ("encode", "decode")]) / steps
    allreduce_(comm, spent, ReduceOp.MAX)
    step_s = median(step_times.tolist())
    return {
        "strategy": strategy,
        "wire": wire,
        "error_feedback": any(c.feedback for c in codecs_of(opt)),
        "posted_bytes_per_step": round(median(mean_over_ranks(comm, [posted])), 1),
        "theory_bytes_per_step": round(theory, 1),
        "step_s": rounded(step_s),
        "encode_s_per_step": rounded(float(spent[0])),
        "decode_s_per_step": rounded(float(spent[1])),
        "codec_share": finite(float(spent.sum()) / step_s),
    }


def _batches(source: Any, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` training batches of this rank's shard (epochs repeated as needed)."""
    out: list[tuple[torch.Tensor, torch.Tensor]] = []
    epoch = 0
    while len(out) < count:
        out += list(source.train_batches(epoch))
        epoch += 1
    return out[:count]

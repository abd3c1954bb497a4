"""What every benchmark shares: timing across ranks, medians, byte counting, one JSON line.

Benchmarks are run by a launcher (``mpiexec -n 2 gossipgrad bench exchange``); each rank
runs the same code, times are taken between barriers and reduced with MAX over ranks (a
step is as slow as its slowest rank), and rank 0 prints one JSON object.
"""

# Over 300 lines on purpose: one home for what every benchmark shares (timing, counting,
# records); splitting it would scatter helpers each benchmark imports together.

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp, WaitContext
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.step import PHASES, SPLIT, train_step
from gossipgrad.inject.straggler import Straggler
from gossipgrad.models import logits
from gossipgrad.options import ExchangeOptions, Option, options_of
from gossipgrad.settings import settings
from gossipgrad.strategies import build_optimizer, options_for


def max_over_ranks(comm: Communicator, values: list[float]) -> list[float]:
    """Element-wise MAX over ranks of a list of floats (same length on every rank)."""
    arr = np.asarray(values, dtype=np.float64)
    if comm.size > 1:
        allreduce_(comm, arr, ReduceOp.MAX)
    return arr.tolist()


def timed(comm: Communicator, fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes on this rank, started right after a barrier."""
    comm.barrier()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def markdown(header: list[str], align: str, rows: list[list[Any]]) -> str:
    """A Markdown table: ``align`` has one letter per column, ``l`` or ``r``.

    >>> print(markdown(["a", "b"], "lr", [["x", 1]]))
    | a | b |
    |---|---:|
    | x | 1 |
    """
    if len(align) != len(header) or any(len(r) != len(header) for r in rows):
        raise ValueError(f"{len(header)} columns: every row and the alignment need as many")
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    lines = ["| " + " | ".join(map(str, cells)) + " |" for cells in [header, *rows]]
    return "\n".join([lines[0], rule, *lines[1:]])


def rounded(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def finite(x: float | None, digits: int = 4) -> float | None:
    """``x`` rounded, or None for None/NaN/inf (JSON has no NaN)."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    return rounded(x, digits)


def make_stack(width: int, layers: int, seed: int = 0) -> torch.nn.Module:
    """``layers`` x (Linear(width, width), ReLU); the same weights for the same seed."""
    gen = torch.Generator().manual_seed(seed)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        lin = torch.nn.Linear(width, width)
        with torch.no_grad():
            lin.weight.normal_(0.0, width**-0.5, generator=gen)
            lin.bias.zero_()
        mods += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


VGG_HEAD = (25088, 4096, 4096, 1000)
"""VGG-16's classifier: 7 x 7 x 512 features -> 4096 -> 4096 -> 1000 (123.6 M parameters)."""


def make_fc_head(dims: tuple[int, ...], seed: int = 0) -> torch.nn.Module:
    """Linear(dims[0], dims[1]), ReLU, ..., Linear(dims[-2], dims[-1]): an FC-heavy model
    (the VGG head by default) over generated features; the same weights for the same seed."""
    if len(dims) < 2 or any(d < 1 for d in dims):
        raise ValueError(
            f"--dims {','.join(map(str, dims))}: need at least two sizes >= 1, "
            "e.g. 25088,4096,4096,1000"
        )
    gen = torch.Generator().manual_seed(seed)
    mods: list[torch.nn.Module] = []
    for n_in, n_out in zip(dims, dims[1:], strict=False):
        lin = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            lin.weight.normal_(0.0, n_in**-0.5, generator=gen)
            lin.bias.zero_()
        mods += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*mods[:-1])


def square_loss(output: torch.Tensor | tuple, _target: Any = None) -> torch.Tensor:
    """A timing benchmark's loss: the mean square of every head's logits (GoogLeNet's
    auxiliary heads too, so that every parameter gets a gradient, as in training)."""
    loss = logits(output).square().mean()
    for aux in (getattr(output, "aux_logits1", None), getattr(output, "aux_logits2", None)):
        if aux is not None:
            loss = loss + aux.square().mean()
    return loss


class Trainer:
    """One model copy (:func:`make_stack`, or :func:`make_fc_head` when ``dims`` is given,
    or the profiled model on a stand-in device when ``standin`` is given: a
    :class:`gossipgrad.tools.bench.standin.StandinModels`) and its distributed optimizer for
    ``strategy``; ``kw`` are exchange options, of which the strategy's own are used
    (:func:`gossipgrad.strategies.options_for`)."""

    def __init__(
        self,
        comm: Communicator,
        strategy: str,
        width: int,
        layers: int,
        dims: tuple[int, ...] | None = None,
        standin: Any = None,
        **kw: Any,
    ) -> None:
        self.device = None  # a stand-in device's handle
        if standin is not None:
            self.model, self.device = standin.build()
            self.sample_shape = tuple(standin.sample_shape)
        else:
            self.model = make_fc_head(dims) if dims else make_stack(width, layers)
            self.sample_shape = (dims[0] if dims else width,)
        sgd = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        # Timing benchmarks time the exchange alone: no consensus monitor, no adaptive average.
        opts = options_for(strategy, **{"sync": "off", "monitor_every": 0, **kw})
        self.opt = build_optimizer(
            self.device.optimizer(sgd) if self.device else sgd, self.model, comm, opts
        )
        self.x = torch.empty(0)
        self.straggler = Straggler(comm.rank)

    def set_batch(self, batch: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(batch, *self.sample_shape, generator=g)

    def step(self) -> dict[str, float]:
        """One step (:func:`gossipgrad.engine.step.train_step`); seconds on this rank of its
        phases: ``forward``, ``backward``, ``optimizer`` and ``total``."""
        done = train_step(
            self.opt,
            self.x,
            None,
            square_loss,
            compute=self.straggler.compute,  # GOSSIPGRAD_INJECT_SLOW
            batch=len(self.x),
        )
        return done.seconds

    def block(self, steps: int) -> dict[str, float | None]:
        """Mean phase times (see :meth:`step`) and step split (``compute``, ``exposed``,
        ``host``: :func:`gossipgrad.engine.step.breakdown`; ``exposed`` None where the
        library waits out of sight) over ``steps`` steps after one untimed step. In-flight
        exchanges are completed untimed at the end (``drain``), so each timed step pays for
        exactly one exchange."""
        self.step()
        sums: dict[str, float | None] = dict.fromkeys((*PHASES, *SPLIT), 0.0)
        for _ in range(steps):
            seconds = self.step()
            for k, total in sums.items():
                sums[k] = None if total is None or seconds[k] is None else total + seconds[k]
        self.opt.drain()
        return {k: None if v is None else v / steps for k, v in sums.items()}

    def close(self) -> None:
        self.opt.close()
        if self.device is not None:
            self.device.remove()


def emit(comm: Communicator, record: dict[str, Any]) -> None:
    """Print ``record`` as one JSON line on rank 0 (other ranks print nothing)."""
    if comm.rank == 0:
        print(json.dumps(record, sort_keys=True), flush=True)


def parse_sizes_mb(text: str) -> list[float]:
    """``"1,100"`` -> ``[1.0, 100.0]``; ValueError naming the flag for anything else."""
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sizes-mb {text!r}: expected comma-separated MiB, e.g. 1,100") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(f"--sizes-mb {text!r}: every size must be > 0 MiB")
    return sizes


def link_info() -> dict[str, Any]:
    """Where this runs: the emulated cluster's namespace/rate and the injected delay."""
    env = settings()
    return {
        "emu_netns": bool(env.emu_netns),
        "emu_rate": env.emu_rate,
        "inject_delay_ms": env.inject_delay_ms,
    }


def wire_tx_bytes(dev: str = "eth0") -> int | None:
    """Bytes this network namespace has transmitted on ``dev`` (``/proc/net/dev``), or None
    when not in the emulated cluster (on a plain host the traffic is shared memory or ``lo``
    shared with everything else, so there is no per-rank wire to read)."""
    if not settings().emu_netns:
        return None
    try:
        with open("/proc/net/dev", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == dev:
                    return int(rest.split()[8])
    except OSError:
        return None
    return None


def release_memory() -> None:
    """Free what nothing references any more (reference cycles: hooks hold their model)
    and hand glibc's freed heap back to the system, so that the next peak measured is the
    next contender's own (where ``malloc_trim`` is not there, the collection alone)."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


def reset_peak_rss() -> bool:
    """Start this process's peak resident memory (``VmHWM``) again from what it holds now
    (Linux: ``/proc/self/clear_refs``); False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float | None:
    """This process's peak resident memory since it started or since :func:`reset_peak_rss`,
    in MiB (``VmHWM`` of ``/proc/self/status``), or None where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def nbytes(buf: Any) -> int:
    if isinstance(buf, torch.Tensor):
        return buf.numel() * buf.element_size()
    return int(np.asarray(buf).nbytes)


WAIT_VARIANTS = {"poll": False, "block": True}
"""Contender name suffixes: ``gossip@block`` is gossip whose communication thread waits in
MPI (``GOSSIPGRAD_COMM_WAIT=block``), next to a plain ``gossip`` in the same launch."""


def split_variant(name: str) -> tuple[str, bool | None]:
    """``"gossip@block"`` -> ``("gossip", True)``; a plain name keeps the launch's setting.

    >>> split_variant("gossip@block"), split_variant("ddp")
    (('gossip', True), ('ddp', None))
    """
    base, sep, variant = name.partition("@")
    if not sep:
        return name, None
    if variant not in WAIT_VARIANTS:
        raise ValueError(
            f"--strategies: unknown variant {name!r}; add @poll or @block to a "
            "strategy name, e.g. gossip@block"
        )
    return base, WAIT_VARIANTS[variant]


#: What a contender's name may set for itself (``gossip:mix=grad:bucket-mb=4``): the
#: option's spelling on the command line -> (its field, how the value is read).
def contender_settings() -> dict[str, Option]:
    """What a contender may set of its own: every exchange option of the table, by its flag
    name (``bucket-mb``), read by the table's kind."""
    return {o.flag_name[2:]: o for o in options_of(ExchangeOptions) if o.name != "strategy"}


def split_settings(name: str) -> tuple[str, dict[str, Any]]:
    """``"gossip:mix=grad:bucket-mb=4"`` -> ``("gossip", {"mix": "grad", "bucket_mb": 4.0})``:
    a contender with settings of its own beside the launch's (the rest are the launch's):
    any exchange option by its flag name (``timing=lag:2`` keeps its colon); ValueError
    naming ``--strategies`` for an unknown key or a bad value.

    >>> split_settings("gossip@block:staleness=1"), split_settings("ddp")
    (('gossip@block', {'staleness': 1}), ('ddp', {}))
    >>> split_settings("gossip:timing=lag:2:mix=grad")
    ('gossip', {'timing': 'lag:2', 'mix': 'grad'})
    """
    base, *parts = name.split(":")
    pairs: list[list[str]] = []
    for part in parts:
        key, sep, value = part.partition("=")
        if sep:
            pairs.append([key, value])
        elif pairs:  # a value's own colon (timing=lag:2)
            pairs[-1][1] += ":" + part
        else:
            pairs.append([key, ""])
    known = contender_settings()
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key not in known or not value:
            raise ValueError(
                f"--strategies: {name!r}: a setting is KEY=VALUE with KEY an exchange option "
                f"({', '.join(known)}), e.g. gossip:mix=grad:bucket-mb=4"
            )
        try:
            out[known[key].name] = known[key].parse(value, key)
        except ValueError:
            raise ValueError(f"--strategies: {name!r}: {key}={value!r} is not a value") from None
    return base, out


def base_strategy(name: str) -> str:
    """The registered strategy a contender's name runs: ``"horovod@block:bucket-mb=4+factors"``
    -> ``"horovod"``."""
    return name.split(":")[0].split("+")[0].split("@")[0]


class CountingCommunicator:
    """Wraps a Communicator and counts the bytes handed to ``isend``, ``iallreduce_`` and
    ``iallgather``, also on communicators duplicated from it (they share the counts).

    ``sent`` counts point-to-point payload; ``reduced`` counts allreduce buffers and
    ``gathered`` allgather send buffers (what goes on the wire for those depends on MPI's
    algorithm; see :func:`wire_tx_bytes`).
    Thread-safe enough for one communication thread: counters are only ever incremented.
    ``block`` (not None) overrides the wait policy's ``block`` for whoever builds on it.
    """

    def __init__(
        self,
        comm: Communicator,
        block: bool | None = None,
        counts: CountingCommunicator | None = None,
    ) -> None:
        self.inner = comm
        self.rank, self.size, self.timeout = comm.rank, comm.size, comm.timeout
        self._counts = counts if counts is not None else self
        self._block = block
        if block is not None:
            self.policy = dataclasses.replace(comm.policy, block=block)
        self.sent = 0
        self.reduced = 0
        self.gathered = 0

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Any:
        self._counts.sent += nbytes(buf)
        return self.inner.isend(buf, dst, tag, ctx)

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Any:
        return self.inner.irecv(buf, src, tag, ctx)

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> Any:
        self._counts.reduced += nbytes(buf)
        return self.inner.iallreduce_(buf, op)

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> Any:
        self._counts.gathered += nbytes(sendbuf)
        return self.inner.iallgather(sendbuf, recvbuf)

    def bcast_(self, buf: Any, root: int = 0) -> None:
        self.inner.bcast_(buf, root)

    def barrier(self) -> None:
        self.inner.barrier()

    def dup(self) -> Communicator:
        return CountingCommunicator(self.inner.dup(), self._block, self._counts)

    def abort(self, code: int = 1) -> None:
        self.inner.abort(code)

    def __getattr__(self, name: str) -> Any:
        """Anything else is the wrapped communicator's (e.g. ``mpi4py_comm`` and
        ``thread_multiple``, which the horovod adapter reads)."""
        return getattr(self.inner, name)

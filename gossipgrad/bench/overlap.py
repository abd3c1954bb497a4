"""``gossipgrad bench overlap``: how much of the exchange hides behind compute.

    python scripts/emucluster.py run -n 2 --rate 1gbit -- \\
        gossipgrad bench overlap --comm-fraction 0.5 --mix param

The model is a stack of ``--layers`` Linear(``--width``, ``--width``) + ReLU layers (one
bucket per layer with the default ``--bucket-mb 4``). Three copies train side by side in one
run, each through the engine factory, alternating blocks of ``--steps`` steps:

- ``compute``: strategy ``local`` (no communication; the lower bound);
- ``blocking``: gossip, ``overlap=False`` (exchange after backward, or after the step);
- ``overlapped``: gossip, ``overlap=True`` (buckets leave from backward hooks, or are
  waited for by forward pre-hooks, on the communication thread).

Calibration first: the time of one blocking exchange of the whole model (``exchange_s``) and
the backward time per sample are measured, and the batch is chosen so that the exchange is
``--comm-fraction`` of backward (``--batch`` overrides). ``hidden = (blocking - overlapped) /
(blocking - compute)``: 1.0 means all communication is hidden.

Why the emulated cluster: on shared memory the transfer is CPU copies that compete with
compute for the same cores; over the namespaces' shaped TCP links the kernel moves the bytes
at the link rate and the comm thread only polls, so the benchmark measures overlap rather
than CPU contention. (Injected latency is no substitute: a latency per message cannot hide
behind the forward pass that needs the first bucket, nor behind backward for the last one.)
"""

from __future__ import annotations

from typing import Any

from gossipgrad.bench.common import (
    Trainer,
    finite,
    link_info,
    max_over_ranks,
    median,
    rounded,
    timed,
)
from gossipgrad.comm.base import Communicator, Tag

CONFIGS = {"compute": ("local", False), "blocking": ("gossip", False),
           "overlapped": ("gossip", True)}


def calibrate(comm: Communicator, trainers: dict[str, Trainer], fraction: float,
              reps: int = 3) -> tuple[int, float, float]:
    """(batch, exchange seconds, backward seconds per sample) for comm = fraction x backward."""
    blocking = trainers["blocking"].opt
    buckets = [b.values if b.values is not None else b.grads for b in blocking.layout.buckets]

    def exchange() -> None:
        ex = blocking.exchange
        pend = [ex.start(b, i, 0, Tag.GRAD_BUCKET + i) for i, b in enumerate(buckets)]
        for p in pend:
            blocking.exchange.finish(p)

    exchange()
    ex = median(max_over_ranks(comm, [timed(comm, exchange) for _ in range(reps)]))
    probe = 32
    compute = trainers["compute"]
    compute.set_batch(probe)
    compute.step()
    bwd = median(max_over_ranks(comm, [compute.step()["backward"] for _ in range(reps)]))
    per_sample = bwd / probe
    batch = int(min(8192, max(1, round(ex / (fraction * per_sample)))))
    return batch, ex, per_sample


def run_overlap(comm: Communicator, width: int = 1024, layers: int = 8, mix: str = "param",
                comm_fraction: float = 0.5, batch: int = 0, bucket_mb: float = 4.0,
                steps: int = 4, reps: int = 3) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if comm.size < 2:
        raise ValueError("bench overlap needs at least 2 ranks: mpiexec -n 2 gossipgrad bench "
                         "overlap")
    if not 0 < comm_fraction <= 10 or batch < 0 or steps < 1 or reps < 1:
        raise ValueError("need 0 < --comm-fraction <= 10, --batch >= 0, --steps >= 1, "
                         "--reps >= 1")
    trainers = {name: Trainer(comm, strategy, width, layers, mix=mix, bucket_mb=bucket_mb,
                              overlap=overlap)
                for name, (strategy, overlap) in CONFIGS.items()}
    try:
        chosen, exchange_s, per_sample = calibrate(comm, trainers, comm_fraction)
        batch = batch or chosen
        for t in trainers.values():
            t.set_batch(batch)
            t.block(1)  # warm-up at this batch
        names = list(CONFIGS)
        times: dict[str, list[float]] = {n: [] for n in names}
        fwd_bwd, bwd = [], []
        for rep in range(reps):
            for n in names[rep % 3:] + names[:rep % 3]:
                comm.barrier()
                times[n].append(trainers[n].block(steps)["total"])
            comm.barrier()
            phases = trainers["compute"].step()
            fwd_bwd.append(phases["forward"] + phases["backward"])
            bwd.append(phases["backward"])
        med = {n: median(max_over_ranks(comm, times[n])) for n in names}
        backward_s = median(max_over_ranks(comm, bwd))
        forward_s = median(max_over_ranks(comm, fwd_bwd)) - backward_s
        model_bytes = trainers["blocking"].opt.layout.nbytes
        buckets = len(trainers["blocking"].opt.layout.buckets)
    finally:
        for t in trainers.values():
            t.close()
    exposed = med["blocking"] - med["compute"]
    hidden = (med["blocking"] - med["overlapped"]) / exposed if exposed > 0 else None
    return {"bench": "overlap", "size": comm.size, "mix": mix, "width": width,
            "layers": layers, "batch": batch, "bucket_mb": bucket_mb, "buckets": buckets,
            "model_bytes": model_bytes, "steps": steps, "reps": reps,
            "comm_fraction_target": comm_fraction,
            "exchange_s": rounded(exchange_s), "forward_s": rounded(forward_s),
            "backward_s": rounded(backward_s),
            "comm_fraction_measured": rounded(exchange_s / backward_s, 3),
            "calibration_backward_s_per_sample": rounded(per_sample),
            **{f"{n}_step_s": rounded(med[n]) for n in names},
            "overlapped_over_compute": rounded(med["overlapped"] / med["compute"], 4),
            "blocking_over_compute": rounded(med["blocking"] / med["compute"], 4),
            "hidden_fraction": finite(hidden), **link_info()}

"""``gossipgrad bench overlap``: how much of the exchange hides behind compute.

    python scripts/emucluster.py run -n 2 --rate 1gbit -- \\
        gossipgrad bench overlap --comm-fraction 0.5 --mix param

The model is a stack of ``--layers`` Linear(``--width``, ``--width``) + ReLU layers (one
bucket per layer with the default ``--bucket-mb 4``). Three copies train side by side in one
run, each through the engine factory, alternating blocks of ``--steps`` steps:

- ``compute``: strategy ``local`` (no communication; the lower bound);
- ``blocking``: gossip, ``overlap=False`` (exchange after backward, or after the step);
- ``overlapped``: gossip, ``overlap=True`` (buckets leave from backward hooks, or are
  waited for by forward pre-hooks, on the communication thread), at ``--staleness`` (0:
  every exchange completes within its step, so the last bucket's transfer is a tail no
  compute covers; 1: completed at the next step, behind its whole forward and backward).

Calibration first: the time of one blocking exchange of the whole model (``exchange_s``) and
the backward time per sample are measured, and the batch is chosen so that the exchange is
``--comm-fraction`` of backward (``--batch`` overrides). ``hidden = (blocking - overlapped) /
(blocking - compute)``: 1.0 means all communication is hidden. ``phase_s`` splits each
configuration's step into forward (with the waits of forward pre-hooks), backward (with the
hooks) and optimizer (``step()`` with its waits), MAX over ranks, median over blocks: the
profile of where the rest goes (compute slowed by the communication, or waiting).

Why the emulated cluster: on shared memory the transfer is CPU copies that compete with
compute for the same cores; over the namespaces' shaped TCP links the kernel moves the bytes
at the link rate and the comm thread only polls, so the benchmark measures overlap rather
than CPU contention. (Injected latency is no substitute: a latency per message cannot hide
behind the forward pass that needs the first bucket, nor behind backward for the last one.)
"""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.base import Communicator, Tag
from gossipgrad.tools.bench import common
from gossipgrad.tools.bench.common import PHASES, Trainer, finite, link_info, median, rounded, timed

CONFIGS = {
    "compute": ("local", False),
    "blocking": ("gossip", False),
    "overlapped": ("gossip", True),
}


def backward_seconds(comm: Communicator, trainer: Trainer, batch: int, reps: int) -> float:
    """Median backward time (MAX over ranks) at ``batch``, after one untimed step."""
    trainer.set_batch(batch)
    trainer.step()
    return median(common.max_over_ranks(comm, [trainer.step()["backward"] for _ in range(reps)]))


def calibrate(
    comm: Communicator, trainers: dict[str, Trainer], fraction: float, reps: int = 3
) -> tuple[int, float]:
    """(batch, exchange seconds) such that the exchange is ``fraction`` of backward.

    Backward time is not proportional to the batch (the weight-gradient and memory-bound
    parts are not), so it is fitted as ``b0 + k * batch`` from two batches, and the fit is
    refined once at the chosen batch."""
    blocking = trainers["blocking"].opt
    buckets = [b.values if b.values is not None else b.grads for b in blocking.layout.buckets]

    def exchange() -> None:
        ex = blocking.mixer
        pend = [ex.start(b, i, 0, Tag.GRAD_BUCKET + i) for i, b in enumerate(buckets)]
        for p in pend:
            ex.finish(p)

    exchange()
    ex = median(common.max_over_ranks(comm, [timed(comm, exchange) for _ in range(reps)]))
    target = ex / fraction
    compute = trainers["compute"]
    lo, hi = 16, 128
    b_lo, b_hi = (backward_seconds(comm, compute, b, reps) for b in (lo, hi))
    for _ in range(2):  # fit through (lo, b_lo), (hi, b_hi), then move one end to the guess
        k = max(1e-9, (b_hi - b_lo) / (hi - lo))
        guess = int(min(8192, max(1, round(lo + (target - b_lo) / k))))
        if guess in (lo, hi):
            break
        lo, b_lo = hi, b_hi
        hi, b_hi = guess, backward_seconds(comm, compute, guess, reps)
    return guess, ex


# Over 60 lines on purpose: one measurement's blocks, phases and record in the order they run.
def run_overlap(
    comm: Communicator,
    width: int = 1024,
    layers: int = 8,
    mix: str = "param",
    comm_fraction: float = 0.5,
    batch: int = 0,
    bucket_mb: float = 4.0,
    steps: int = 4,
    reps: int = 3,
    staleness: int = 0,
) -> dict[str, Any]:
    """The whole benchmark; returns the JSON record (the same on every rank)."""
    if comm.size < 2:
        raise ValueError(
            "bench overlap needs at least 2 ranks: mpiexec -n 2 gossipgrad bench overlap"
        )
    if not 0 < comm_fraction <= 10 or batch < 0 or steps < 1 or reps < 1:
        raise ValueError("need 0 < --comm-fraction <= 10, --batch >= 0, --steps >= 1, --reps >= 1")
    if staleness not in (0, 1):
        raise ValueError(f"--staleness must be 0 or 1, got {staleness}")
    trainers = {
        name: Trainer(
            comm,
            strategy,
            width,
            layers,
            mix=mix,
            bucket_mb=bucket_mb,
            overlap=overlap,
            staleness=staleness if overlap else 0,
            sufficient_factors="off",
        )  # buckets: what this measures
        for name, (strategy, overlap) in CONFIGS.items()
    }
    try:
        chosen, exchange_s = calibrate(comm, trainers, comm_fraction)
        batch = batch or chosen
        for t in trainers.values():
            t.set_batch(batch)
            t.block(1)  # warm-up at this batch
        names = list(CONFIGS)
        times: dict[str, dict[str, list[float]]] = {n: {k: [] for k in PHASES} for n in names}
        for rep in range(reps):
            for n in names[rep % 3 :] + names[: rep % 3]:
                comm.barrier()
                seconds = trainers[n].block(steps)
                for k in PHASES:
                    times[n][k].append(seconds[k])
        phases = {
            n: {k: median(common.max_over_ranks(comm, v)) for k, v in times[n].items()}
            for n in names
        }
        med = {n: phases[n]["total"] for n in names}
        backward_s, forward_s = phases["compute"]["backward"], phases["compute"]["forward"]
        model_bytes = trainers["blocking"].opt.layout.nbytes
        buckets = len(trainers["blocking"].opt.layout.buckets)
    finally:
        for t in trainers.values():
            t.close()
    exposed = med["blocking"] - med["compute"]
    hidden = (med["blocking"] - med["overlapped"]) / exposed if exposed > 0 else None
    return {
        "bench": "overlap",
        "size": comm.size,
        "mix": mix,
        "width": width,
        "layers": layers,
        "batch": batch,
        "bucket_mb": bucket_mb,
        "buckets": buckets,
        "staleness": staleness,
        "model_bytes": model_bytes,
        "steps": steps,
        "reps": reps,
        "comm_fraction_target": comm_fraction,
        "exchange_s": rounded(exchange_s),
        "forward_s": rounded(forward_s),
        "backward_s": rounded(backward_s),
        "comm_fraction_measured": rounded(exchange_s / backward_s, 3),
        **{f"{n}_step_s": rounded(med[n]) for n in names},
        "overlapped_over_compute": rounded(med["overlapped"] / med["compute"], 4),
        "blocking_over_compute": rounded(med["blocking"] / med["compute"], 4),
        "hidden_fraction": finite(hidden),
        "phase_s": {
            n: {k: rounded(v, 4) for k, v in phases[n].items() if k != "total"} for n in names
        },
        **link_info(),
    }

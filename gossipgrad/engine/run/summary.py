"""The run's summary record (the last ``--metrics-out`` line, ``"event": "summary"``) and
what catching up cost under bounded lag. Collective: every rank calls it; the record is
identical on every rank but for ``*_seconds`` fields measured per rank."""

from __future__ import annotations

from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.bucket.monitor import monitor_summary
from gossipgrad.engine.protocol import DistributedOptimizerProtocol as DistributedOptimizer
from gossipgrad.engine.run import checkpoint as ckpt


def skip_summary(
    comm: Communicator,
    opt: DistributedOptimizer,
    skipped_steps: int,
    samples_skipped: int,
    samples_scheduled: int,
) -> dict[str, Any]:
    """Collective: what catching up cost (identical on every rank): steps and samples
    skipped per rank and summed, the share of scheduled samples that was computed, and each
    rank's waits for a frame ``max_lag`` steps old."""
    stats = opt.lag_stats()
    per_rank = np.zeros((4, comm.size), dtype=np.float64)
    per_rank[:, comm.rank] = (
        skipped_steps,
        samples_skipped,
        stats["lag_waits"],
        stats["lag_wait_seconds"],
    )
    if comm.size > 1:
        allreduce_(comm, per_rank, what="run summary")
    total = comm.size * samples_scheduled
    return {
        "skipped_steps": int(per_rank[0].sum()),
        "samples_skipped": int(per_rank[1].sum()),
        "skipped_steps_per_rank": [int(v) for v in per_rank[0]],
        "samples_skipped_per_rank": [int(v) for v in per_rank[1]],
        "computed_fraction": 1.0 - per_rank[1].sum() / total if total else 1.0,
        "lag_waits_per_rank": [int(v) for v in per_rank[2]],
        "lag_wait_seconds_per_rank": [round(float(v), 3) for v in per_rank[3]],
    }


def run_summary(run: Any, start: int, step: int, stopped: str | None) -> dict[str, Any]:
    """The summary of ``run`` (:class:`gossipgrad.engine.run.loop.Run`) after ``step`` steps
    (from ``start``); ``stopped`` names the signal that stopped it, if one did."""
    comm, opt, cfg, last = run.comm, run.opt, run.cfg, run.last
    lag = skip_summary(comm, opt, run.skipped_steps, run.samples_skipped, run.samples_scheduled)
    skipped = int(allreduce_(comm, np.array([run.source.skipped], dtype=np.int64), ReduceOp.SUM)[0])
    ips = run.speed.images_per_s() * lag["computed_fraction"]  # samples computed
    saved = run.saver.last_step if run.saver is not None else -1
    ex = cfg.exchange
    exchanged = opt.exchange_stats(start, step)
    merged = run.merges.summary()
    return {
        "event": "summary",
        **run.task.summary_fields(last, ips, comm.size),  # what the data's task measures
        "steps": step,
        "start_step": start,
        "size": comm.size,
        "strategy": ex.strategy,
        "topology": opt.exchange_topology,
        "mix": ex.mix.value,
        "timing": ex.timing,
        "staleness": ex.staleness,
        "max_lag": ex.max_lag,
        "slack": ex.slack,
        "wire": ex.wire,
        "error_feedback": "on" if make_codec(ex.wire, ex.feedback).feedback else "off",
        "rule": ex.rule,
        "arch": cfg.arch,
        "dataset": run.source.name,
        "batch_size": cfg.data.batch_size,
        "bytes_sent_per_step": opt.bytes_sent_per_step(),
        **exchanged,  # exchange_bytes this rank sent; outer_steps, dense_steps (local:H)
        **merged,  # merge_at, merges, merge_bytes
        "bytes_sent": exchanged["exchange_bytes"] + merged["merge_bytes"],
        **run.unmerged,  # test_loss_unmerged ...: the ranks' own models before the final merge
        "model_bytes": run.model_bytes,
        "comm_seconds": run.comm_s,
        **run.split.means(),  # this rank's step: compute, exposed wire, host
        "eval_seconds": run.eval_s,
        "wall_seconds": run.speed.wall(),
        "images_per_s": ips,
        "samples_per_s": ips,
        "skipped_corrupt": skipped,
        "stopped": stopped,
        "checkpoint": (ckpt.checkpoint_path(cfg.run.run_dir, saved) if saved >= 0 else None),
        "consensus_distance": last.get("consensus_distance"),
        **lag,
        "size_launch": run.launch_size,
        "size_final": comm.size,
        **(run.membership.summary() if run.membership is not None else {}),
        "offload": list(cfg.run.offload),
        "activation_bytes_to_host_per_step": run.offload.last_bytes
        if run.offload is not None
        else 0,
        "sync": ex.sync.value,
        **monitor_summary(opt),
    }

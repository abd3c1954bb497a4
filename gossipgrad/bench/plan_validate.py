"""``gossipgrad bench plan-validate``: measured step times of real configurations against
the planner's predictions.

    PYTHONPATH=. mpiexec -n 2 python -m gossipgrad.bench.plan_validate \\
        --arch mlp --hidden 1024 --out pv-2.json
    PYTHONPATH=. mpiexec -n 4 python -m gossipgrad.bench.plan_validate \\
        --arch mlp --hidden 1024 --out pv-4.json
    PYTHONPATH=. python -m gossipgrad.bench.plan_validate --merge pv-2.json --merge pv-4.json

One launch, all on every rank (collective):

1. **beforehand**: every rank profiles the model at once (``profile_arch``; rank 0's profile
   is the one reported and whose choice is re-measured, taken while the other ranks
   compute too, as they will in training), then
   ``measure_network`` fits the links at the launched size and records the host (cores a
   rank may use, ranks on the host);
2. the configurations (strategy x bucket MiB x mix/overlap x staleness, and a
   compute-only ``local`` one first) are trained on a fixed synthetic batch in
   ``--passes`` passes (:func:`~gossipgrad.bench.plan_runs.run_passes`: the order reversed
   every other pass, ``warmup`` + ``steps / passes`` timed steps per pass). A config's
   step time is the median over all its timed steps of the slowest rank's step (a
   ``barrier``, timed, closes every step);
3. **before each pass**, the in-step calibration
   (:func:`~gossipgrad.bench.plan_runs.calibration_rounds`, fitted by
   :func:`~gossipgrad.plan.calibrate.fit_in_step`): ``--calibrate-pairs`` rounds per
   strategy of compute-only / blocking / overlapped s0 / overlapped s1 runs at the
   ``--calibrate-mb`` cap give the compute factor (from this pass's rounds: it follows the
   host's drift), each strategy's exchange factor and, without a spare core per rank
   (``HostShare``), the per-step overlap and staleness-1 costs (``fit_overlap``,
   ``fit_stale``; the last three from every round so far). These runs are not scored;
4. each configuration of a pass is predicted from that pass's calibration, before it
   runs: ``step_time`` of ``layout_profile`` (the engine's own buckets at that cap) scaled
   by the compute factor, the fit with the strategy's exchange factor, and the host.
   ``mix=param`` (no overlap in the engine: the exchange follows the optimizer step) is
   predicted with ``overlap=False``. A config's prediction is the mean over passes. Each
   row also carries ``predicted_uncalibrated_s`` (the profile and fit as measured, with the
   host term; scored in ``summary_uncalibrated``) and ``predicted_spare_core_s`` (neither
   calibration nor contention term, ``host=None``; ``summary_spare_core``). The
   compute-only row, predicted as the calibrated ``F + B + O``, is the compute term's
   error (``compute_check``);
5. the regret is re-measured (:func:`~gossipgrad.bench.plan_runs.confirm_regret`): the
   model's choice and the fastest measured configuration run again, ``--confirm-rounds``
   times each, alternating.

``--sizes 2,4`` repeats 1-5 at each size on the first ranks of the launch (the others
wait), so one launch varies the size too. Rank 0 prints one JSON object (and writes it to
``--out``): per-config predicted and measured seconds, their parts, and ``summary`` (MAPE,
worst error, Kendall tau, regret per size and its worst, from
:mod:`gossipgrad.bench.plan_score`). ``--merge`` (no MPI) scores several launches'
configurations together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from gossipgrad.bench.plan_runs import (
    Config,
    calibration_rounds,
    confirm_regret,
    default_configs,
    run_config,
    run_passes,
)


def measure(comm: Any, *, arch: str = "mlp", hidden: int = 1024, batch_size: int = 32,
            configs: Sequence[Config], steps: int = 20, warmup: int = 5,
            profile_steps: int = 20, net_max_mb: float = 16.0, net_reps: int = 5,
            calibrate_allreduce: bool = False, calibrate_mb: float | None = None,
            calibrate_pairs: int = 2, calibrate_steps: int | None = None,
            confirm_rounds: int = 3, passes: int = 1) -> dict[str, Any]:
    """Profile, fit, run and predict every config (collective). Returns rank 0's report
    (other ranks get the same dict; only rank 0 should print it)."""
    import numpy as np
    import torch

    from gossipgrad.engine.buckets import cap_from_mb
    from gossipgrad.measure.netfit import measure_network
    from gossipgrad.measure.profiler import layout_profile, profile_arch
    from gossipgrad.models import build_model, default_classes, input_shape
    from gossipgrad.plan import CommModel, step_time
    from gossipgrad.plan.calibrate import fit_in_step, scale_exchange, scale_profile
    from gossipgrad.plan.host import HostShare
    from gossipgrad.runtime import host_share
    torch.set_num_threads(1)
    comm.barrier()
    result = profile_arch(arch, batch_size=batch_size, hidden=hidden, steps=profile_steps,
                          warmup=5)
    comm.barrier()
    fit = measure_network(comm, max_bytes=int(net_max_mb * 2**20), reps=net_reps)
    duplex = min(2.0, max(1.0, fit.duplex or 1.0))
    cm = CommModel.from_network(fit.network, duplex=duplex,
                                calibrate_allreduce=calibrate_allreduce)
    shape = input_shape(arch, 224)
    net = build_model(arch, shape, default_classes(arch), hidden)
    found = HostShare(*host_share(comm))
    strategies = list(dict.fromkeys(c.strategy for c in configs if c.strategy != "local"))
    cap_mb = calibrate_mb or min(c.bucket_mb for c in configs)
    cal_prof = layout_profile(result, net, cap_from_mb(cap_mb))
    exchange_s = {s: sum(cm.bucket_s(s, b.bytes, comm.size) for b in cal_prof.buckets)
                  for s in strategies}
    profiles = {cfg: layout_profile(result, net, cap_from_mb(cfg.bucket_mb)) for cfg in configs}
    cal_runs: list[dict[str, Any]] = []
    per_pass: list[dict[str, Any]] = []
    p_local = result.profile.local_step_s

    def host_for(cal: dict[str, Any], strategy: str | None = None) -> HostShare:
        """The host as calibrated: without a spare core, ``cal``'s overlap and staleness-1
        costs (``strategy``'s own staleness-1 cost when given, else the pooled one)."""
        if found.spare_core:
            return found
        stale = (cal["stale_s_per_byte_by_strategy"][strategy] if strategy
                 else cal["stale_s_per_byte"])
        return HostShare(found.cores, found.ranks_per_host, 0.0, stale, cal["overlap_s"])

    def before_pass(p: int) -> Callable[[Config], dict[str, float]]:
        """Calibration rounds, then the predictor for pass ``p`` built from every round so
        far (the compute factor from this pass's rounds only)."""
        new = calibration_rounds(comm, strategies, cap_mb, calibrate_pairs, arch, hidden,
                                 batch_size, calibrate_steps or steps, warmup,
                                 first_round=p * calibrate_pairs)
        cal_runs.extend(new)
        cal = fit_in_step(cal_runs, new, cal_prof, exchange_s)
        per_pass.append(cal)

        def predict(cfg: Config) -> dict[str, float]:
            if cfg.strategy == "local":
                return {"predicted_s": p_local * cal["compute_factor"]}
            prof = profiles[cfg]
            kw = {"staleness": cfg.staleness, "overlap": cfg.overlap and cfg.mix == "grad"}
            factor = cal["exchange_factor"].get(cfg.strategy, 1.0)
            own = host_for(cal, cfg.strategy)
            st = step_time(scale_profile(prof, cal["compute_factor"]),
                           scale_exchange(cm, cfg.strategy, factor), cfg.strategy, comm.size,
                           host=own, **kw)
            raw = step_time(prof, cm, cfg.strategy, comm.size, host=own, **kw)
            free = step_time(prof, cm, cfg.strategy, comm.size, **kw)
            return {"predicted_s": st.step_s, "predicted_comm_s": st.comm_s,
                    "predicted_exposed_comm_s": st.exposed_comm_s,
                    "predicted_uncalibrated_s": raw.step_s,
                    "predicted_spare_core_s": free.step_s}

        return predict

    # The compute-only configuration goes first in every pass, like any other.
    local, *measured = run_passes(comm, [Config("local", 25.0), *configs], passes, arch,
                                  hidden, batch_size, steps, warmup, before_pass=before_pass)
    host = host_for(per_pass[-1])  # reported: the last pass's, staleness 1 pooled
    rows = []
    for cfg, m in zip(configs, measured, strict=True):
        rows.append({"config": cfg.label, **asdict(cfg), "size": comm.size,
                     "n_buckets": len(profiles[cfg].buckets), **m,
                     "measured_exposed_comm_s": m["measured_s"] - local["measured_s"]})
    # Each rank predicts from its own profile; rank 0's choice is the one re-measured.
    chosen = np.array([min(range(len(rows)), key=lambda i: rows[i]["predicted_s"])])
    comm.bcast_(chosen)
    by_label = {c.label: c for c in configs}
    confirm = confirm_regret(rows, int(chosen[0]), confirm_rounds, lambda label: run_config(
        comm, by_label[label], arch, hidden, batch_size, steps, warmup)["measured_s"])
    p = result.profile
    calibration = {"bucket_mb": cap_mb, "n_buckets": len(cal_prof.buckets),
                   "grad_bytes": cal_prof.grad_bytes, "runs": cal_runs,
                   **fit_in_step(cal_runs, cal_runs, cal_prof, exchange_s),
                   "per_pass": per_pass}
    report = {
        "benchmark": "plan-validate", "size": comm.size, "arch": arch, "hidden": hidden,
        "batch_size": batch_size, "steps": steps, "warmup": warmup, "passes": passes,
        "profile": {"forward_s": p.forward_s, "backward_s": p.backward_s,
                    "optimizer_s": p.optimizer_s, "local_step_s": p.local_step_s,
                    "param_bytes": p.param_bytes},
        "network": {**fit.network.to_json(), "duplex": duplex},
        "host": {**host.to_json(), "cores_per_rank": host.cores_per_rank,
                 "spare_core": host.spare_core},
        "calibration": calibration,
        "compute_check": {"profile_s": p.local_step_s, **local,
                          "error_pct": 100 * (local["predicted_s"] - local["measured_s"])
                          / local["measured_s"],
                          "profile_error_pct": 100 * (p.local_step_s - local["measured_s"])
                          / local["measured_s"]},
        "configs": rows,
        "confirm": {"size": comm.size, **confirm},
    }
    from gossipgrad.bench.plan_score import score

    report["summary"] = score(rows, [report])
    report["summary_uncalibrated"] = score(rows, [report], key="predicted_uncalibrated_s")
    report["summary_spare_core"] = score(rows, [report], key="predicted_spare_core_s")
    return report


IDLE_WAIT_S = 3600.0
"""How long ranks left out of a smaller size wait for the others' runs (each of which has
its own communication deadlines)."""


def measure_sizes(comm: Any, sizes: Sequence[int], **kw: Any) -> list[dict[str, Any]]:
    """:func:`measure` at each size in ``sizes`` on the first ``size`` ranks (a split
    communicator; the others wait), one after another. Collective over ``comm``; rank 0 is
    in every group and gets every report, the others get those they took part in."""
    import numpy as np

    reports = []
    for size in sizes:
        sub = comm if size == comm.size else comm.split(0 if comm.rank < size else None)
        if sub is not None:
            try:
                reports.append(measure(sub, **kw))
            finally:
                if sub is not comm:
                    sub.free()
        comm.iallreduce_(np.zeros(1)).wait(IDLE_WAIT_S)  # everyone done before the next
    return reports


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


@click.command("plan-validate")
@click.option("--arch", default="mlp", show_default=True)
@click.option("--hidden", type=int, default=1024, show_default=True)
@click.option("--batch-size", "-b", type=int, default=32, show_default=True)
@click.option("--strategies", default="gossip,allreduce", show_default=True)
@click.option("--bucket-mb", default="0.25,1,4,25", show_default=True,
              help="Bucket caps (MiB), comma-separated.")
@click.option("--staleness", default="0", show_default=True,
              help="Staleness values for the overlapped configs, e.g. 0,1.")
@click.option("--only-overlap", is_flag=True,
              help="Skip the no-overlap and mix=param configs.")
@click.option("--steps", type=click.IntRange(1), default=30, show_default=True,
              help="Timed steps per configuration, split between the passes.")
@click.option("--warmup", type=click.IntRange(0), default=3, show_default=True,
              help="Untimed steps before each run (each pass of each configuration).")
@click.option("--passes", type=click.IntRange(1), default=3, show_default=True,
              help="Measure the configurations in this many passes, the order reversed "
                   "every other pass, --steps split between them, the calibration rounds "
                   "before each (evens out and follows the host's drift).")
@click.option("--profile-steps", type=int, default=20, show_default=True)
@click.option("--net-max-mb", type=float, default=16.0, show_default=True)
@click.option("--net-reps", type=int, default=5, show_default=True)
@click.option("--calibrate-allreduce", is_flag=True)
@click.option("--calibrate-mb", type=float, default=None,
              help="Bucket cap (MiB) of the in-step calibration runs (default: the smallest "
                   "--bucket-mb).")
@click.option("--calibrate-pairs", type=click.IntRange(1), default=2, show_default=True,
              help="Rounds before each pass (compute-only, blocking, overlapped s0, s1) per "
                   "strategy for the in-step calibration.")
@click.option("--calibrate-steps", type=click.IntRange(1), default=15, show_default=True,
              help="Timed steps of each calibration run. Shorter runs "
                   "and more --calibrate-pairs average out run-to-run noise better.")
@click.option("--confirm-rounds", type=click.IntRange(0), default=3, show_default=True,
              help="Re-run the model's choice and the fastest measured configuration this "
                   "many times each for the regret (0: first-pass regret only).")
@click.option("--sizes", default=None,
              help="Ranks to validate at, comma-separated, each 2..launched size (default: "
                   "the launched size). Smaller sizes run on the first ranks; the rest wait.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON here (rank 0).")
@click.option("--merge", "merge_paths", multiple=True, type=click.Path(exists=True),
              help="No MPI: score these --out files together and print the JSON.")
def plan_validate(arch: str, hidden: int, batch_size: int, strategies: str, bucket_mb: str,
                  staleness: str, only_overlap: bool, steps: int, warmup: int,
                  passes: int, profile_steps: int, net_max_mb: float, net_reps: int,
                  calibrate_allreduce: bool, calibrate_mb: float | None,
                  calibrate_pairs: int, calibrate_steps: int, confirm_rounds: int,
                  sizes: str | None,
                  out: str | None,
                  merge_paths: tuple[str, ...]) -> None:
    """Measured step times of real configurations vs the planner's predictions (JSON)."""
    from gossipgrad.bench.plan_score import merge, print_summary

    if merge_paths:
        report = merge(merge_paths)
        text = json.dumps(report, indent=1)
        if out:
            Path(out).write_text(text + "\n")
        click.echo(text)
        return
    import logging

    from gossipgrad.runtime import call_or_abort, init

    comm = init()
    logging.getLogger("gossipgrad").setLevel(logging.WARNING)
    if comm.size < 2:
        raise click.UsageError("plan-validate needs >= 2 ranks: mpiexec -n 2 ...")
    at = [int(v) for v in _floats(sizes)] if sizes else [comm.size]
    if not at or any(not 2 <= n <= comm.size for n in at):
        raise click.BadParameter(f"each size must be in 2..{comm.size} (the launched size), "
                                 f"got {sizes!r}", param_hint="--sizes")
    configs = default_configs(strategies.split(","), _floats(bucket_mb),
                              [int(v) for v in _floats(staleness)])
    if only_overlap:
        configs = [c for c in configs if c.overlap and c.mix == "grad"]
    # A rank that fails ends the job: the others would wait for it in a collective.
    kw = dict(arch=arch, hidden=hidden, batch_size=batch_size, configs=configs, steps=steps,
              warmup=warmup, profile_steps=profile_steps, net_max_mb=net_max_mb,
              net_reps=net_reps, calibrate_allreduce=calibrate_allreduce,
              calibrate_mb=calibrate_mb, calibrate_pairs=calibrate_pairs,
              calibrate_steps=calibrate_steps, confirm_rounds=confirm_rounds, passes=passes)
    reports = call_or_abort(comm, lambda c: measure_sizes(c, at, **kw))
    if comm.rank == 0:
        from gossipgrad.bench.plan_score import combine

        report = reports[0] if len(reports) == 1 else {**combine(reports), "launches": reports}
        text = json.dumps(report, indent=1)
        if out:
            Path(out).write_text(text + "\n")
        click.echo(text)
        print_summary(report, reports)


if __name__ == "__main__":
    plan_validate()

"""What ``python -m lab plan-validate`` (:mod:`lab.cli.plan_validate`) runs:
measured step times of real configurations against the planner's predictions.

    mpiexec -n 2 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-2.json
    mpiexec -n 4 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-4.json
    python -m lab plan-validate --merge pv-2.json --merge pv-4.json

One launch, all on every rank (collective); steps 1, 3 and 4 are in
:mod:`lab.bench.plan_predict`:

1. **beforehand** (``measure_inputs``): every rank profiles the model at once
   (``profile_arch``; rank 0's profile is the one reported and whose choice is
   re-measured, taken while the other ranks compute too, as they will in training), then
   ``measure_network`` fits the links at the launched size and records the host (cores a
   rank may use, ranks on the host);
2. the configurations (strategy x bucket MiB x mix/overlap x staleness, and a
   compute-only ``local`` one first) are trained on a fixed synthetic batch in
   ``--passes`` passes (:func:`~lab.bench.plan_runs.run_passes`: the order reversed
   every other pass, ``warmup`` + ``steps / passes`` timed steps per pass). A config's
   step time is the median over all its timed steps of the slowest rank's step (a
   ``barrier``, timed, closes every step);
3. **before each pass** (``PassCalibration``), the in-step calibration
   (:func:`~lab.bench.plan_runs.calibration_rounds`, fitted by
   :func:`~gossipgrad.tools.plan.calibrate.fit_in_step`): ``--calibrate-pairs`` rounds per
   strategy of compute-only / blocking / overlapped s0 / overlapped s1 runs at the
   ``--calibrate-mb`` cap give the compute factor (from this pass's rounds: it follows the
   host's drift), each strategy's exchange factor and, without a spare core per rank
   (``HostShare``), the per-step overlap and staleness-1 costs (``fit_overlap``,
   ``fit_stale``; the last three from every round so far). These runs are not scored;
4. each configuration of a pass is predicted (``predict``) from that pass's calibration,
   before it runs: ``step_time`` of ``layout_profile`` (the engine's own buckets at that cap) scaled
   by the compute factor, the fit with the strategy's exchange factor, and the host.
   ``mix=param`` (no overlap in the engine: the exchange follows the optimizer step) is
   predicted with ``overlap=False``. A config's prediction is the mean over passes. Each
   row also carries ``predicted_uncalibrated_s`` (the profile and fit as measured, with the
   host term; scored in ``summary_uncalibrated``) and ``predicted_spare_core_s`` (neither
   calibration nor contention term, ``host=None``; ``summary_spare_core``, and over the
   configurations without overlap alone, ``summary_spare_core_blocking``). The
   compute-only row, predicted as the calibrated ``F + B + O``, is the compute term's
   error (``compute_check``);
5. the regret is re-measured (:func:`~lab.bench.plan_runs.confirm_regret`): the
   model's choice and the fastest measured configuration run again, ``--confirm-rounds``
   times each, alternating.

``--sizes 2,4`` repeats 1-5 at each size on the first ranks of the launch (the others
wait), so one launch varies the size too (:func:`measure_sizes`). Rank 0 prints one JSON
object (and writes it to ``--out``), :func:`combined_report` of the sizes' reports:
per-config predicted and measured seconds, their parts, and ``summary`` (MAPE, worst error,
Kendall tau, regret per size and its worst, from :mod:`lab.bench.plan_score`).
``--merge`` (no MPI) scores several launches' configurations together.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gossipgrad.runtime import usable_cores
from gossipgrad.tools.plan import Profile
from lab.bench.plan_predict import (
    Inputs,
    Launch,
    PassCalibration,
    Workload,
    calibrated_host,
    measure_inputs,
)
from lab.bench.plan_runs import (
    Config,
    confirm_regret,
    default_configs,
    run_config,
    run_passes,
)
from lab.bench.plan_score import blocking_score, combine, score


def config_rows(
    configs: Sequence[Config],
    measured: Sequence[dict[str, Any]],
    local: dict[str, Any],
    inputs: Inputs,
    size: int,
) -> list[dict[str, Any]]:
    """One report row per configuration: its options, predicted and measured seconds, and
    the measured exposed communication (its step minus the compute-only step)."""
    return [
        {
            "config": cfg.label,
            **asdict(cfg),
            "size": size,
            "n_buckets": len(inputs.profiles[cfg].buckets),
            **m,
            "measured_exposed_comm_s": m["measured_s"] - local["measured_s"],
        }
        for cfg, m in zip(configs, measured, strict=True)
    ]


def confirm_choice(
    comm: Any,
    rows: Sequence[dict[str, Any]],
    configs: Sequence[Config],
    rounds: int,
    work: Workload,
) -> dict[str, Any]:
    """Re-measure the model's choice against the fastest measured configuration. Each rank
    predicts from its own profile; rank 0's choice is the one re-measured. Collective."""
    chosen = np.array([min(range(len(rows)), key=lambda i: rows[i]["predicted_s"])])
    comm.bcast_(chosen)
    run = functools.partial(measured_s, comm, {c.label: c for c in configs}, work)
    return {"size": comm.size, **confirm_regret(rows, int(chosen[0]), rounds, run)}


def measured_s(comm: Any, by_label: dict[str, Config], work: Workload, label: str) -> float:
    """One more run of the configuration labelled ``label``: its step time. Collective."""
    return run_config(
        comm, by_label[label], work.arch, work.hidden, work.batch_size, work.steps, work.warmup
    )["measured_s"]


def compute_check(profile: Profile, local: dict[str, Any]) -> dict[str, Any]:
    """The compute-only row: the calibrated and the raw profile's ``F + B + O`` against the
    measured local step."""
    meas = local["measured_s"]
    return {
        "profile_s": profile.local_step_s,
        **local,
        "error_pct": 100 * (local["predicted_s"] - meas) / meas,
        "profile_error_pct": 100 * (profile.local_step_s - meas) / meas,
    }


def assemble_report(launch: Launch, calibration: PassCalibration) -> dict[str, Any]:
    """One launch's report, scored (``summary`` and its two variants)."""
    p, rows = launch.inputs.step.profile, launch.rows
    host = calibrated_host(launch.inputs.host, calibration.fits[-1])  # last pass's, s1 pooled
    report = {
        **launch.header(),
        "profile": {
            "forward_s": p.forward_s,
            "backward_s": p.backward_s,
            "optimizer_s": p.optimizer_s,
            "local_step_s": p.local_step_s,
            "param_bytes": p.param_bytes,
        },
        "host": {
            **host.to_json(),
            "cores_per_rank": host.cores_per_rank,
            "spare_core": host.spare_core,
            "rank0_cores": usable_cores(),
        },
        "calibration": calibration.to_json(),
        "compute_check": compute_check(p, launch.local),
        "configs": rows,
        "confirm": launch.confirm,
    }
    report["summary"] = score(rows, [report])
    report["summary_uncalibrated"] = score(rows, [report], key="predicted_uncalibrated_s")
    report["summary_spare_core"] = score(rows, [report], key="predicted_spare_core_s")
    report["summary_spare_core_blocking"] = blocking_score(rows, [report])
    return report


@dataclass(frozen=True)
class InSample:
    """What :func:`measure_in_sample` measured: the report, the inputs (profile, fit, host)
    and the calibration rounds (which a held-out launch freezes)."""

    report: dict[str, Any]
    inputs: Inputs
    calibration: PassCalibration


def measure(comm: Any, **kw: Any) -> dict[str, Any]:
    """Profile, fit, run and predict every config (collective). Returns rank 0's report
    (other ranks get the same dict; only rank 0 should print it). ``kw``: those of
    :func:`measure_in_sample`."""
    return measure_in_sample(comm, **kw).report


def measure_in_sample(
    comm: Any,
    *,
    arch: str = "mlp",
    hidden: int = 1024,
    batch_size: int = 32,
    configs: Sequence[Config],
    steps: int = 20,
    warmup: int = 5,
    profile_steps: int = 20,
    net_max_mb: float = 16.0,
    net_reps: int = 5,
    calibrate_allreduce: bool = False,
    calibrate_mb: float | None = None,
    calibrate_pairs: int = 2,
    calibrate_steps: int | None = None,
    confirm_rounds: int = 3,
    passes: int = 1,
    link: str = "",
) -> InSample:
    """:func:`measure`, keeping its inputs and calibration. ``link`` labels the calibration
    rounds (with the size) for :class:`~lab.plan.heldout.FrozenCalibration`.
    Collective."""
    work = Workload(arch, hidden, batch_size, steps, warmup)
    inputs = measure_inputs(
        comm,
        configs,
        arch=arch,
        hidden=hidden,
        batch_size=batch_size,
        profile_steps=profile_steps,
        net_max_mb=net_max_mb,
        net_reps=net_reps,
        calibrate_allreduce=calibrate_allreduce,
        calibrate_mb=calibrate_mb,
    )
    calibration = PassCalibration(
        comm, inputs, work, calibrate_pairs, calibrate_steps or steps, link=link
    )
    # The compute-only configuration goes first in every pass, like any other.
    local, *measured = run_passes(
        comm,
        [Config("local", 25.0), *configs],
        passes,
        arch,
        hidden,
        batch_size,
        steps,
        warmup,
        before_pass=calibration,
    )
    rows = config_rows(configs, measured, local, inputs, comm.size)
    confirm = confirm_choice(comm, rows, configs, confirm_rounds, work)
    launch = Launch(comm.size, work, passes, inputs, local, rows, confirm)
    report = assemble_report(launch, calibration)
    return InSample(report, inputs, calibration)


IDLE_WAIT_S = 3600.0
"""How long ranks left out of a smaller size wait for the others' runs (each of which has
its own communication deadlines)."""


def measure_sizes(comm: Any, sizes: Sequence[int], **kw: Any) -> list[dict[str, Any]]:
    """:func:`measure` at each size in ``sizes`` on the first ``size`` ranks (a split
    communicator; the others wait), one after another. Collective over ``comm``; rank 0 is
    in every group and gets every report, the others get those they took part in."""
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


def combined_report(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What rank 0 prints: the one size's report, or the sizes scored together (with each
    size's report under ``launches``)."""
    return reports[0] if len(reports) == 1 else {**combine(reports), "launches": list(reports)}


def validation_configs(
    strategies: Sequence[str],
    buckets: Sequence[float],
    staleness: Sequence[int],
    only_overlap: bool,
) -> list[Config]:
    """:func:`~lab.bench.plan_runs.default_configs`; with ``only_overlap`` only the
    overlapped ``mix=grad`` ones."""
    configs = default_configs(strategies, buckets, staleness)
    if only_overlap:
        configs = [c for c in configs if c.overlap and c.mix == "grad"]
    return configs

"""Held-out validation of the planner: calibrate at one size on one link, freeze, then
predict and measure other sizes (and, from a saved calibration, other links).

    mpiexec -n 8 python -m lab plan-validate --calibrate-size 2 --predict-sizes 4,8 \\
        --out oos.json
    python scripts/emucluster.py run -n 4 --rate 1gbit -- python -m lab plan-validate \\
        --calibration oos.json --predict-sizes 2,4 --out oos-1gbit.json

One launch, collective over the launched ranks (the largest size; smaller sizes run on the
first ranks while the others wait):

1. **at the calibration size** (first ``--calibrate-size`` ranks): today's in-sample
   ``plan-validate`` (:func:`~lab.bench.plan_validate.measure_in_sample`: profile,
   network fit, calibration rounds before each pass, scored runs, confirmation), then its
   calibration rounds -- and only those -- are frozen
   (:class:`~lab.plan.heldout.FrozenCalibration`). With ``--calibration FILE`` the
   frozen calibration comes from an earlier launch's report instead and this step only
   profiles and fits this launch's link;
2. **at each held-out size** (:func:`measure_held_out_size`): the host found at that size;
   rank 0 predicts every configuration (:func:`predict_rows`, a pure function of the
   profile, the fit, the frozen calibration, the configuration, size, host and link)
   *before* any run at that size; then the configurations run in passes, and the model's
   choice is re-measured against the fastest for the regret.

Nothing measured at a held-out size enters a prediction: the predictions exist before the
runs, and the frozen calibration refuses rounds from another size or link and predictions
at its own. ``lab/tests/test_plan_heldout_leak.py`` changes every scored run's timing and checks
that no prediction moves.
"""

# Over 300 lines on purpose: the launch's phases (calibrate, freeze, run, score) run in this
# order on every rank and are read as one sequence.

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from gossipgrad.runtime import host_share
from gossipgrad.settings import settings
from gossipgrad.tools.measure.netfit import host_ids
from gossipgrad.tools.plan import CommModel, HostShare, step_time
from lab.bench.plan_predict import Inputs, Launch, Workload, measure_inputs
from lab.bench.plan_runs import Config, confirm_regret, run_passes
from lab.bench.plan_score import blocking_score, combine, score
from lab.bench.plan_validate import (
    IDLE_WAIT_S,
    compute_check,
    config_rows,
    measure_in_sample,
    measured_s,
)
from lab.plan.heldout import (
    LOOPBACK,
    FrozenCalibration,
    predict_held_out,
    predict_local_s,
    share_ratio,
)

T = TypeVar("T")


def link_label(comm: Any) -> str:
    """``emulated <rate>`` on the emulated cluster, ``loopback`` when every rank is on one
    host, else ``network``. Collective."""
    hosts = set(host_ids(comm).tolist())
    rate = settings().emu_rate
    return f"emulated {rate}" if rate else LOOPBACK if len(hosts) == 1 else "network"


def workload_json(work: Workload) -> dict[str, Any]:
    """What a calibration is valid for: the model and batch trained."""
    return {"arch": work.arch, "hidden": work.hidden, "batch_size": work.batch_size}


def load_calibration(path: str, work: Workload) -> FrozenCalibration:
    """The frozen calibration in a held-out report (``frozen_calibration``) or on its own;
    refuses one fitted on another model or batch."""
    data = json.loads(Path(path).read_text())
    cal = FrozenCalibration.from_json(data.get("frozen_calibration", data))
    want = workload_json(work)
    if cal.workload and dict(cal.workload) != want:
        raise ValueError(
            f"--calibration {path}: fitted on {dict(cal.workload)}, this launch "
            f"trains {want}; pass the same --arch, --hidden and --batch-size"
        )
    return cal


def freeze(
    inputs: Inputs, runs: Sequence[dict[str, Any]], size: int, link: str, work: Workload
) -> FrozenCalibration:
    """The calibration rounds ``runs`` (all taken at ``size`` on ``link``), frozen."""
    return FrozenCalibration.from_rounds(
        runs,
        size=size,
        link=link,
        host=inputs.host,
        link_model=inputs.comm_model,
        profile=inputs.cal_profile,
        exchange_s=inputs.exchange_s,
        workload=workload_json(work),
    )


def predict_rows(
    inputs: Inputs,
    cal: FrozenCalibration,
    configs: Sequence[Config],
    size: int,
    host: HostShare,
    link: str,
) -> list[dict[str, float]]:
    """Predictions of the compute-only run and of every configuration at ``size`` ranks on
    ``host`` and ``link``, from ``inputs`` (profile, this link's fit) and ``cal`` alone:
    ``predicted_s`` (the frozen calibration), ``predicted_host_share_s`` (nothing fitted to
    a run: profile, fit and host share) and ``predicted_spare_core_s`` (profile and fit, a
    spare core assumed: the projections' path). Pure."""
    prof = inputs.step.profile
    target = CommModel.from_network(inputs.fit.network, duplex=inputs.duplex)
    bare = cal.unfitted()
    rows = [
        {
            "predicted_s": predict_local_s(prof, cal, host),
            "predicted_host_share_s": predict_local_s(prof, bare, host),
            "predicted_spare_core_s": prof.local_step_s,
        }
    ]
    for cfg in configs:
        p = inputs.profiles[cfg]
        kw = {"staleness": cfg.staleness, "overlap": cfg.overlap and cfg.mix == "grad"}
        st = predict_held_out(p, target, cal, cfg.strategy, size, host=host, link=link, **kw)
        rows.append(
            {
                "predicted_s": st.step_s,
                "predicted_comm_s": st.comm_s,
                "predicted_exposed_comm_s": st.exposed_comm_s,
                "predicted_host_share_s": predict_held_out(
                    p, target, bare, cfg.strategy, size, host=host, link=link, **kw
                ).step_s,
                "predicted_spare_core_s": step_time(p, target, cfg.strategy, size, **kw).step_s,
            }
        )
    return rows


def measure_held_out_size(
    comm: Any,
    cal: FrozenCalibration | None,
    inputs: Inputs | None,
    configs: Sequence[Config],
    work: Workload,
    passes: int,
    confirm_rounds: int,
    link: str,
) -> dict[str, Any]:
    """One held-out size (``comm.size``): rank 0 predicts (it needs ``cal`` and ``inputs``;
    the other ranks may pass None), then every configuration runs and rank 0's choice is
    re-measured against the fastest. Returns the size's report on rank 0 (``{"size": n}``
    elsewhere). Collective."""
    host = HostShare(*host_share(comm))
    predicted = None
    if comm.rank == 0:  # every prediction exists before any run at this size
        assert cal is not None and inputs is not None, "rank 0 predicts: it needs both"
        predicted = predict_rows(inputs, cal, configs, comm.size, host, link)
    local, *measured = run_passes(
        comm,
        [Config("local", 25.0), *configs],
        passes,
        work.arch,
        work.hidden,
        work.batch_size,
        work.steps,
        work.warmup,
    )
    rows = [{"config": c.label, **m} for c, m in zip(configs, measured, strict=True)]
    chosen = np.zeros(1, dtype=np.int64)
    if predicted is not None:
        local = {**local, **predicted[0]}
        measured = [{**m, **p} for m, p in zip(measured, predicted[1:], strict=True)]
        rows = [
            {**r, "held_out": True, "link": link}
            for r in config_rows(configs, measured, local, inputs, comm.size)
        ]
        chosen[0] = min(range(len(rows)), key=lambda i: rows[i]["predicted_s"])
    comm.bcast_(chosen)
    run = functools.partial(measured_s, comm, {c.label: c for c in configs}, work)
    confirm = {"size": comm.size, **confirm_regret(rows, int(chosen[0]), confirm_rounds, run)}
    if predicted is None:
        return {"size": comm.size}
    launch = Launch(comm.size, work, passes, inputs, local, rows, confirm)
    return held_out_report(launch, link, host, cal)


def held_out_report(
    launch: Launch, link: str, host: HostShare, cal: FrozenCalibration
) -> dict[str, Any]:
    """One held-out size's report: its rows and its scores (``summary``: the frozen
    calibration's predictions; ``summary_host_share``, ``summary_spare_core`` and its
    ``_blocking`` subset)."""
    rows = launch.rows
    report = {
        **launch.header(),
        "held_out": True,
        "link": link,
        "host": {
            **host.to_json(),
            "cores_per_rank": host.cores_per_rank,
            "spare_core": host.spare_core,
            "share_ratio": share_ratio(cal, host),
        },
        "calibrated_at": {"size": cal.size, "link": cal.link},
        "compute_check": compute_check(launch.inputs.step.profile, launch.local),
        "configs": rows,
        "confirm": launch.confirm,
    }
    report["summary"] = score(rows, [report])
    for name, key in (
        ("summary_host_share", "predicted_host_share_s"),
        ("summary_spare_core", "predicted_spare_core_s"),
    ):
        report[name] = score(rows, [report], key=key)
    report["summary_spare_core_blocking"] = blocking_score(rows, [report])
    return report


def on_first(comm: Any, size: int, body: Callable[[Any], T]) -> T | None:
    """``body`` on a communicator of the first ``size`` ranks (None on the others, which
    wait); everyone leaves together. Collective over ``comm``."""
    sub = comm if size == comm.size else comm.split(0 if comm.rank < size else None)
    out = None
    if sub is not None:
        try:
            out = body(sub)
        finally:
            if sub is not comm:
                sub.free()
    comm.iallreduce_(np.zeros(1)).wait(IDLE_WAIT_S)
    return out


# Over 60 lines on purpose: every rank walks the same phases in the same order (collectives).
def measure_held_out(
    comm: Any,
    *,
    calibrate_size: int | None,
    predict_sizes: Sequence[int],
    calibration: FrozenCalibration | None = None,
    **kw: Any,
) -> dict[str, Any] | None:
    """The held-out launch (module docstring): calibrate at ``calibrate_size`` (or take the
    frozen ``calibration`` of an earlier launch: :func:`load_calibration`), then every size
    in ``predict_sizes``. ``kw``: those of
    :func:`~lab.bench.plan_validate.measure_in_sample`. Returns the combined report
    on rank 0, None elsewhere. Raises ``ValueError`` (on every rank, before anything runs)
    for a predicted size that is the calibration's own size on its own link. Collective."""
    work = Workload(kw["arch"], kw["hidden"], kw["batch_size"], kw["steps"], kw["warmup"])
    link = link_label(comm)
    cal = calibration
    at = cal.size if cal else calibrate_size
    if at is None:
        raise ValueError("--predict-sizes needs --calibrate-size N or --calibration FILE")
    own = [p for p in predict_sizes if p == at and link == (cal.link if cal else link)]
    if own:
        raise ValueError(
            f"--predict-sizes {own[0]}: the calibration is fitted at size {at} "
            f"on {link}, so runs there are in-sample, not held out; predict "
            "other sizes (or this size on another link)"
        )

    def calibrate(sub: Any) -> tuple[Inputs, FrozenCalibration, dict[str, Any] | None]:
        if cal is not None:  # this link's profile and fit; the factors are the file's
            inputs = measure_inputs(
                sub,
                kw["configs"],
                **{
                    k: kw[k]
                    for k in (
                        "arch",
                        "hidden",
                        "batch_size",
                        "profile_steps",
                        "net_max_mb",
                        "net_reps",
                        "calibrate_allreduce",
                        "calibrate_mb",
                    )
                },
            )
            return inputs, cal, None
        ins = measure_in_sample(sub, **kw, link=link)
        frozen = freeze(ins.inputs, ins.calibration.runs, sub.size, link, work)
        return ins.inputs, frozen, ins.report

    got = on_first(comm, at, calibrate)
    inputs, frozen, in_sample = got if got is not None else (None, None, None)
    reports = [in_sample] if in_sample is not None else []
    for size in predict_sizes:
        reports.append(
            on_first(
                comm,
                size,
                lambda sub: measure_held_out_size(
                    sub,
                    frozen,
                    inputs,
                    kw["configs"],
                    work,
                    kw["passes"],
                    kw["confirm_rounds"],
                    link,
                ),
            )
        )
    if comm.rank != 0:
        return None
    assert frozen is not None
    return {
        **combine(reports),
        "calibrate_size": at,
        "predict_sizes": list(predict_sizes),
        "link": link,
        "frozen_calibration": frozen.to_json(),
        "launches": reports,
    }

"""The predictions' side of ``plan-validate`` (:mod:`lab.bench.plan_validate`): what
is measured before any scored run (:func:`measure_inputs`), the in-step calibration taken
before each pass (:class:`PassCalibration`) and a configuration's predicted step time from
it (:func:`predict`). Every function that measures is collective over its communicator."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gossipgrad.models import build_model, default_classes, input_shape
from gossipgrad.options import bucket_cap_bytes
from gossipgrad.runtime import host_share
from gossipgrad.tools.measure.netfit import NetfitResult, measure_network
from gossipgrad.tools.measure.profiler import ArchRun, StepProfile, layout_profile, profile_arch
from gossipgrad.tools.plan import CommModel, Profile, step_time
from gossipgrad.tools.plan.calibrate import fit_in_step, scale_exchange, scale_profile
from gossipgrad.tools.plan.host import HostShare
from lab.bench.plan_runs import Config, calibration_rounds


@dataclass(frozen=True)
class Workload:
    """What every run trains: ``arch`` (width ``hidden``) on a fixed batch of
    ``batch_size``, ``warmup`` untimed then ``steps`` timed steps."""

    arch: str
    hidden: int
    batch_size: int
    steps: int
    warmup: int


@dataclass(frozen=True)
class Inputs:
    """What the predictions start from, measured before any scored run: the step profile,
    the network fit and the host as found, and the profile in the engine's buckets at each
    configuration's cap (``profiles``) and at the calibration runs' cap (``cal_profile``,
    with the predicted exchange seconds per step of each strategy, ``exchange_s``)."""

    step: StepProfile
    fit: NetfitResult
    duplex: float
    comm_model: CommModel
    host: HostShare
    strategies: list[str]
    cap_mb: float
    cal_profile: Profile
    exchange_s: dict[str, float]
    profiles: dict[Config, Profile]


def measure_inputs(
    comm: Any,
    configs: Sequence[Config],
    *,
    arch: str,
    hidden: int,
    batch_size: int,
    profile_steps: int,
    net_max_mb: float,
    net_reps: int,
    calibrate_allreduce: bool,
    calibrate_mb: float | None,
) -> Inputs:
    """Profile the model on every rank at once, fit the network, find the host (all
    collective, in this order on every rank)."""
    torch.set_num_threads(1)
    comm.barrier()
    step = profile_arch(ArchRun(arch, batch_size, hidden, steps=profile_steps, warmup=5))
    comm.barrier()
    fit = measure_network(comm, max_bytes=int(net_max_mb * 2**20), reps=net_reps)
    duplex = min(2.0, max(1.0, fit.duplex or 1.0))
    cm = CommModel.from_network(fit.network, duplex=duplex, calibrate_allreduce=calibrate_allreduce)
    net = build_model(arch, input_shape(arch, 224), default_classes(arch), hidden)
    found = HostShare(*host_share(comm))
    strategies = list(dict.fromkeys(c.strategy for c in configs if c.strategy != "local"))
    cap_mb = calibrate_mb or min(c.bucket_mb for c in configs)
    cal_prof = layout_profile(step, net, bucket_cap_bytes(cap_mb))
    exchange_s = {
        s: sum(cm.bucket_s(s, b.bytes, comm.size) for b in cal_prof.buckets) for s in strategies
    }
    profiles = {cfg: layout_profile(step, net, bucket_cap_bytes(cfg.bucket_mb)) for cfg in configs}
    return Inputs(step, fit, duplex, cm, found, strategies, cap_mb, cal_prof, exchange_s, profiles)


def calibrated_host(
    found: HostShare, cal: dict[str, Any], strategy: str | None = None
) -> HostShare:
    """The host as calibrated: without a spare core, ``cal``'s overlap and staleness-1
    costs (``strategy``'s own staleness-1 cost when given, else the pooled one)."""
    if found.spare_core:
        return found
    stale = cal["stale_s_per_byte_by_strategy"][strategy] if strategy else cal["stale_s_per_byte"]
    return HostShare(found.cores, found.ranks_per_host, 0.0, stale, cal["overlap_s"])


def predict(inputs: Inputs, cal: dict[str, Any], size: int, cfg: Config) -> dict[str, float]:
    """``cfg``'s step time at ``size`` ranks from one pass's calibration ``cal``, plus the
    uncalibrated and spare-core predictions. ``mix=param`` is predicted without overlap (the
    engine's exchange follows the optimizer step)."""
    if cfg.strategy == "local":
        return {"predicted_s": inputs.step.profile.local_step_s * cal["compute_factor"]}
    prof, cm = inputs.profiles[cfg], inputs.comm_model
    kw = {"staleness": cfg.staleness, "overlap": cfg.overlap and cfg.mix == "grad"}
    factor = cal["exchange_factor"].get(cfg.strategy, 1.0)
    own = calibrated_host(inputs.host, cal, cfg.strategy)
    st = step_time(
        scale_profile(prof, cal["compute_factor"]),
        scale_exchange(cm, cfg.strategy, factor),
        cfg.strategy,
        size,
        host=own,
        **kw,
    )
    raw = step_time(prof, cm, cfg.strategy, size, host=own, **kw)
    free = step_time(prof, cm, cfg.strategy, size, **kw)
    return {
        "predicted_s": st.step_s,
        "predicted_comm_s": st.comm_s,
        "predicted_exposed_comm_s": st.exposed_comm_s,
        "predicted_uncalibrated_s": raw.step_s,
        "predicted_spare_core_s": free.step_s,
    }


class PassCalibration:
    """``before_pass`` of :func:`~lab.bench.plan_runs.run_passes`: before pass ``p``,
    ``pairs`` calibration rounds per strategy, fitted together with every round so far (the
    compute factor from this pass's rounds only); returns that pass's predictor. Keeps the
    rounds (``runs``, each tagged with the size and ``link``) and each pass's fit
    (``fits``). Collective."""

    def __init__(
        self, comm: Any, inputs: Inputs, work: Workload, pairs: int, steps: int, link: str = ""
    ) -> None:
        self.comm, self.inputs, self.work = comm, inputs, work
        self.pairs, self.steps, self.link = pairs, steps, link
        self.runs: list[dict[str, Any]] = []
        self.fits: list[dict[str, Any]] = []

    def __call__(self, p: int) -> Callable[[Config], dict[str, float]]:
        w, i = self.work, self.inputs
        new = calibration_rounds(
            self.comm,
            i.strategies,
            i.cap_mb,
            self.pairs,
            w.arch,
            w.hidden,
            w.batch_size,
            self.steps,
            w.warmup,
            first_round=p * self.pairs,
        )
        # Each round says where it was measured: a frozen calibration takes only its own.
        new = [{**r, "size": self.comm.size, "link": self.link} for r in new]
        self.runs.extend(new)
        cal = fit_in_step(self.runs, new, i.cal_profile, i.exchange_s)
        self.fits.append(cal)
        return functools.partial(predict, i, cal, self.comm.size)

    def to_json(self) -> dict[str, Any]:
        """The calibration section of the report: every round, fitted together, and the
        per-pass fits the predictions used."""
        i = self.inputs
        return {
            "bucket_mb": i.cap_mb,
            "n_buckets": len(i.cal_profile.buckets),
            "grad_bytes": i.cal_profile.grad_bytes,
            "runs": self.runs,
            **fit_in_step(self.runs, self.runs, i.cal_profile, i.exchange_s),
            "per_pass": self.fits,
        }


@dataclass(frozen=True)
class Launch:
    """What one launch measured at ``size`` ranks: the compute-only row, one row per
    config and the confirmation of the chosen one."""

    size: int
    work: Workload
    passes: int
    inputs: Inputs
    local: dict[str, Any]
    rows: list[dict[str, Any]]
    confirm: dict[str, Any]

    def header(self) -> dict[str, Any]:
        """The fields every plan-validate report starts with."""
        w = self.work
        return {
            "benchmark": "plan-validate",
            "size": self.size,
            "arch": w.arch,
            "hidden": w.hidden,
            "batch_size": w.batch_size,
            "steps": w.steps,
            "warmup": w.warmup,
            "passes": self.passes,
            "network": {**self.inputs.fit.network.to_json(), "duplex": self.inputs.duplex},
        }

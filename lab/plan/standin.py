"""The planner held out on the stand-in cluster: calibrated on some launches, scored on others.

Inputs are ``gossipgrad bench strategies --device standin:PROFILE --dilate K`` records (one
JSON per launch, run under ``scripts/emucluster.py run -n N --rate R``) and ``gossipgrad
netfit`` documents of the same emulated links (one per size and rate). Everything is in
the time of the cluster stood in for: measured step times undilated (``step_s_undilated``),
the network's alpha, beta and shared bottleneck divided by K.

What the model is given, per contender (one row of a launch):

- the stand-in profile (undilated) at the contender's bucket cap, times the profile's
  ``compute_factor`` (``local``'s measured step / the profile's, median over the
  calibration launches of that profile: the stand-in host's own work per step);
- its wire codec, where the row names one: the links' per-byte times scaled by the codec's
  bytes on the wire (:func:`gossipgrad.tools.plan.report.codec_on_the_wire`; encoding not priced);
- the network of its size and rate (:func:`network_model`): netfit's ping-pong alpha and
  beta, its exchange's duplex, its allreduce's ring factors, its concurrent sweep's shared
  bottleneck (:mod:`gossipgrad.tools.plan.fabric`) -- measurements of the links, not of training;
- two constants fitted on the calibration launches only (:func:`calibrate`): the host's
  work per byte exchanged for each strategy and mix (the mixing arithmetic, copies and
  reductions on the stand-in host: ``CommModel.host_s_per_byte``), and one interference
  coefficient for all (``CommModel.interference``). The host's work is real work on this
  host, which dilation does not stretch: it is fitted in this host's seconds and charged
  ``/ K`` in the cluster's time, so one fit serves every dilation.

A scored launch never enters a fit: :func:`calibrate` takes the calibration rows only and
:func:`predict` is a pure function of the frozen :class:`StandinCalibration`. PURE apart
from reading files.
"""

# Over 300 lines on purpose: the launches' rows, their networks, the calibration and the
# prediction are one pipeline, read top to bottom.

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gossipgrad.registry import STRATEGIES
from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.measure.refit import refit_network
from gossipgrad.tools.plan.fabric import Fabric, shared_from_concurrent
from gossipgrad.tools.plan.formats import NetworkFit, Profile
from gossipgrad.tools.plan.model import (
    MIB,
    CommModel,
    allreduce_factors,
    rebucket,
    split_large,
    step_time,
)
from gossipgrad.tools.plan.patterns import ps_cap
from gossipgrad.tools.plan.report import codec_on_the_wire

#: Interference coefficients tried by :func:`calibrate` (compute seconds per second of
#: communication beside it).
INTERFERENCE_GRID = tuple(round(0.05 * i, 2) for i in range(21))
#: Host seconds per byte tried for each contender kind (this host's seconds, which
#: dilation does not stretch: 1e-11 to 1e-7, log-spaced; 0 included).
HOST_GRID = (0.0, *(10 ** (-11 + 0.1 * i) for i in range(41)))


@dataclass(frozen=True)
class Run:
    """One contender of one launch, in the cluster's (undilated) time."""

    profile: str
    size: int
    rate: str
    dilate: float
    name: str
    strategy: str
    mix: str
    bucket_mb: float
    staleness: int
    step_s: float
    phases: Mapping[str, float]
    wire_bytes: float | None
    theory_bytes: float
    wire: str = "fp32"
    split: bool = False  # ps split a parameter larger than a server's share (bench rows)

    @property
    def kind(self) -> str:
        """What the host cost is fitted per: the strategy and, for a peer, its mix."""
        peer = STRATEGIES.get(self.strategy).exchange_shape.one_peer
        return f"{self.strategy}/{self.mix}" if peer else self.strategy

    @property
    def group(self) -> tuple[str, int, str]:
        """(profile, size, rate): the configurations ranked against each other."""
        return self.profile, self.size, self.rate


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every contender row of every ``bench strategies --device standin`` record."""
    runs = []
    for path in paths:
        rec = json.loads(Path(path).read_text())
        if "standin" not in rec:
            raise ValueError(f"{path}: not a stand-in record (no 'standin' field)")
        k = float(rec["standin"]["dilate"])
        for row in rec["results"]:
            runs.append(
                Run(
                    profile=rec["standin"]["profile"].removesuffix(" (shipped)"),
                    size=int(rec["size"]),
                    rate=str(rec.get("emu_rate") or "host"),
                    dilate=k,
                    name=row.get("name", row["strategy"]),
                    strategy=row["strategy"].split("@")[0],
                    mix=row.get("mix", rec["mix"]),
                    bucket_mb=float(row.get("bucket_mb", rec["bucket_mb"])),
                    staleness=int(row.get("staleness", 0)),
                    step_s=float(row["step_s"]) / k,
                    phases={p: float(v) / k for p, v in row["phase_s"].items()},
                    wire_bytes=row.get("wire_bytes_per_step"),
                    theory_bytes=float(row["theory_bytes_per_step"]),
                    wire=row.get("wire") or "fp32",
                    split=bool(row.get("split_parameters", False)),
                )
            )
    return runs


def network_model(net: NetworkFit, doc: Mapping[str, Any], dilate: float) -> CommModel:
    """The emulated links of one netfit document as the cluster stood in for sees them
    (times / K): alpha and beta, the exchange's duplex (clamped to [1, 2]), the allreduce
    fit's ring factors when it has one (and the in-flight sweep's for a queued bucket), the
    concurrent sweep's shared bottleneck."""
    k = dilate
    duplex = doc.get("measurements", {}).get("exchange_fit", {}).get("duplex") or 1.0
    duplex = min(2.0, max(1.0, float(duplex)))
    latency = bandwidth = 1.0
    if net.allreduce is not None and net.allreduce.size >= 2 and net.p2p.alpha_s > 0:
        latency, bandwidth = allreduce_factors(net)
    elif net.allreduce is not None and net.allreduce.size >= 2:
        p = net.allreduce.size
        bandwidth = net.allreduce.beta_s_per_byte / (2 * (p - 1) / p * net.p2p.beta_s_per_byte)
    queued: tuple[float | None, float | None] = (None, None)
    ark = net.allreduce_in_flight
    if ark is not None and net.p2p.alpha_s > 0:
        lat, bw = allreduce_factors(net, ark)
        queued = max(lat, 1e-6), max(bw, 1e-6)
    shared = 0.0
    if net.concurrent is not None:
        beta_x = duplex * net.p2p.beta_s_per_byte
        shared = shared_from_concurrent(net.concurrent.beta_s_per_byte, net.concurrent.size, beta_x)
    return CommModel(
        net.p2p.alpha_s / k,
        net.p2p.beta_s_per_byte / k,
        duplex,
        max(latency, 1e-6),
        max(bandwidth, 1e-6),
        fabric=Fabric(ranks_per_node=net.ranks_per_node or 1, shared_s_per_byte=shared / k),
        queued_latency_factor=queued[0],
        queued_bandwidth_factor=queued[1],
    )


def load_networks(
    paths: Iterable[str | Path], *, refit: bool = False
) -> dict[tuple[int, str], tuple[NetworkFit, dict]]:
    """netfit documents by (size, emulated rate) (the rate from the document's source).
    With ``refit`` each document's fits are first recomputed from its recorded times
    (:func:`gossipgrad.tools.measure.refit.refit_network`), as ``gossipgrad netfit --refit``
    does."""
    out = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        if refit:
            doc = refit_network(doc, where=str(path))
        net = NetworkFit.from_json(doc)
        rate = next(
            (w.split()[-1] for w in net.source.split(", ") if w.startswith("emulated link rate")),
            "host",
        )
        sized = net.concurrent or net.allreduce
        out[(sized.size if sized else 2, rate)] = (net, doc)
    return out


@dataclass(frozen=True)
class StandinCalibration:
    """What the calibration launches fixed: compute factors per profile, host seconds per
    byte per contender kind (on this host's clock: :func:`predict_run` divides by the run's
    dilation), the interference coefficient, and where they came from."""

    compute_factor: Mapping[str, float]
    host_s_per_byte: Mapping[str, float]
    interference: float
    sizes: tuple[int, ...]
    rate: str
    rows: int
    fit_mape: float = float("nan")
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "compute_factor": dict(self.compute_factor),
            "host_s_per_byte_on_host": dict(self.host_s_per_byte),
            "interference": self.interference,
            "sizes": list(self.sizes),
            "rate": self.rate,
            "rows": self.rows,
            "fit_mape_pct": self.fit_mape,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StandinCalibration:
        """The calibration :meth:`to_json` wrote (a ``plan-validate --out`` file's
        ``calibration``), frozen."""
        return cls(
            dict(doc["compute_factor"]),
            dict(doc["host_s_per_byte_on_host"]),
            float(doc["interference"]),
            tuple(int(n) for n in doc["sizes"]),
            str(doc["rate"]),
            int(doc["rows"]),
            float(doc["fit_mape_pct"]),
        )


_LAID_OUT: dict[tuple, tuple[StandinProfile, Profile]] = {}
"""``profile_for``'s results: the calibration's grid search prices each run thousands of
times with the same layout (what made a rescore take minutes)."""


def profile_for(
    run: Run, profiles: Mapping[str, StandinProfile], factor: float, cycles: bool = True
) -> Profile:
    """The stand-in profile of ``run`` at its bucket cap (a parameter server's capped at
    1/size of the model; a library that fuses per cycle, by its cycle unless ``cycles`` is
    False), its times x ``factor``."""
    base = profiles[run.profile]
    key = (id(base), run.bucket_mb, run.strategy, run.size, run.dilate, run.split, factor, cycles)
    known = _LAID_OUT.get(key)
    if known is not None and known[0] is base:  # the same profile object, not a reused id
        return known[1]
    laid_out = _lay_out(run, base, factor, cycles)
    _LAID_OUT[key] = (base, laid_out)
    return laid_out


def _lay_out(run: Run, base: StandinProfile, factor: float, cycles: bool) -> Profile:
    prof = base.planner
    prof = replace(
        prof,
        forward_s=prof.forward_s * factor,
        backward_s=prof.backward_s * factor,
        optimizer_s=prof.optimizer_s * factor,
        buckets=tuple(replace(b, ready_s=b.ready_s * factor) for b in prof.buckets),
    )
    cap = max(1, round(run.bucket_mb * MIB))
    spec = STRATEGIES.get(run.strategy)
    if spec.exchange_shape.incast:
        cap = ps_cap(prof.grad_bytes, run.size, cap) or cap
    window = spec.fusion_window_s() if cycles else None  # on the dilated clock
    undilated = None if window is None else window / run.dilate
    engine = prof.per_parameter and not spec.library and spec.fusion_window_s() is None
    merged = rebucket(prof.buckets, cap, undilated, registration=engine)
    if spec.exchange_shape.incast and run.split:  # as the engine split them in that run
        merged = split_large(merged, cap)
    return prof.with_buckets(merged)


def predict_run(
    run: Run,
    profiles: Mapping[str, StandinProfile],
    networks: Mapping[tuple[int, str], tuple[NetworkFit, dict]],
    cal: StandinCalibration,
    *,
    network_key: tuple[int, str] | None = None,
) -> float:
    """Predicted undilated step time of ``run`` from ``cal`` (frozen) and the network of
    ``network_key`` (default: the run's own size and rate). The host's work per byte is
    this host's time, so in the cluster's time it is ``/ K``."""
    net, doc = networks[network_key or (run.size, run.rate)]
    model = replace(
        network_model(net, doc, run.dilate),
        interference=cal.interference,
        host_s_per_byte=cal.host_s_per_byte.get(run.kind, 0.0) / run.dilate,
    )
    if run.wire != "fp32":  # a codec: its bytes on the wire (encoding not priced)
        model = codec_on_the_wire(model, run.wire)
    prof = profile_for(run, profiles, cal.compute_factor.get(run.profile, 1.0))
    return step_time(
        prof, model, run.strategy, run.size, staleness=run.staleness, mix=run.mix
    ).step_s


def calibrate(
    rows: Sequence[Run],
    profiles: Mapping[str, StandinProfile],
    networks: Mapping[tuple[int, str], tuple[NetworkFit, dict]],
) -> StandinCalibration:
    """Fit the calibration (see the module) on ``rows`` only: compute factors from their
    ``local`` rows, then for each interference coefficient of :data:`INTERFERENCE_GRID`
    each kind's host cost (the value of :data:`HOST_GRID` with the least squared relative
    error over that kind's rows), keeping the coefficient with the least error in all."""
    if not rows:
        raise ValueError("no calibration rows")
    factors = {
        name: statistics.median(
            r.step_s / profiles[name].planner.local_step_s
            for r in rows
            if r.profile == name and r.strategy == "local"
        )
        for name in {r.profile for r in rows if r.strategy == "local"}
    }
    comm_rows = [r for r in rows if r.strategy != "local"]
    kinds = sorted({r.kind for r in comm_rows})
    best: tuple[float, float, dict[str, float]] | None = None
    for c in INTERFERENCE_GRID:
        hosts, total = {}, 0.0
        for kind in kinds:
            mine = [r for r in comm_rows if r.kind == kind]

            def err(h: float, mine: list[Run] = mine, c: float = c, kind: str = kind) -> float:
                cal = StandinCalibration(factors, {kind: h}, c, (), "", 0)
                return sum(
                    ((predict_run(r, profiles, networks, cal) - r.step_s) / r.step_s) ** 2
                    for r in mine
                )

            h = min(HOST_GRID, key=err)
            hosts[kind] = h
            total += err(h)
        if best is None or total < best[0]:
            best = (total, c, hosts)
    assert best is not None
    sizes = tuple(sorted({r.size for r in rows}))
    cal = StandinCalibration(factors, best[2], best[1], sizes, rows[0].rate, len(rows))
    fitted = [(predict_run(r, profiles, networks, cal), r.step_s) for r in comm_rows]
    return replace(cal, fit_mape=mape_pct(fitted))


def mape_pct(pairs: Sequence[tuple[float, float]]) -> float:
    return 100 * sum(abs(p - m) / m for p, m in pairs) / len(pairs) if pairs else math.nan


def plain(cal: StandinCalibration) -> StandinCalibration:
    """Nothing fitted: compute factor 1, no host cost, no interference."""
    return StandinCalibration({}, {}, 0.0, cal.sizes, cal.rate, 0)

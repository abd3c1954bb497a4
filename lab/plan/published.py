"""The planner against published results: predictions from papers' stated facts only.

    python -m lab plan-validate --published lab/plan/data/published.json \\
        --host-network net-1gbit-2.json --standin-calibration cal.json

Each configuration of ``lab/plan/data/published.json`` (committed before the first
prediction, never edited to fit) becomes planner inputs:

- **profile**: torchvision's model, its per-layer roofline on the GPU's datasheet peaks at
  the stated batch (:mod:`lab.devices.costs`), scaled to the stated single-GPU
  images/s, else to the roofline / 0.63 (the file's ``assumptions``); gradient-ready times
  from running that stand-in on a virtual clock; its Linear layers for sufficient factors;
- **network**: the stated link rate times the share of it one TCP stream moved on this
  host (``--host-network``: this host's netfit of an emulated link, its largest message),
  the file's latency and intra-node links, the stated GPUs per node (a NIC shared by them)
  and hierarchical allreduce where the paper says so;
- **compute slowed by communication beside it**: the interference coefficient fitted on
  this host (``--standin-calibration``: the stand-in cluster's calibration), nothing else.

Nothing is fitted to a published number; every case is reported. PURE apart from torch on
the meta device (no weights, no GPU).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torchvision

from gossipgrad.tools.devices.dilation import parse_rate
from gossipgrad.tools.devices.profile import LayerTime, StandinProfile
from gossipgrad.tools.plan.fabric import Fabric
from gossipgrad.tools.plan.formats import Bucket, LinearLayer, Profile
from gossipgrad.tools.plan.model import MIB, CommModel
from gossipgrad.tools.plan.planner import plan
from lab.devices.costs import Gpu, layer_costs
from lab.devices.published import ready_times

ROOFLINE_FRACTION = 0.63
LATENCY_S = {"ethernet": 25e-6, "infiniband": 2e-6}
INTRA_BYTES_PER_S = {"nvlink": 20e9, "pcie": 10e9}
BUCKET_MB = 25.0


def build_model(arch: str, classes: int) -> torch.nn.Module:
    """torchvision's ``arch`` on the meta device: GoogLeNet with its auxiliary heads, as it
    trains; Inception-V3 without its one (3.4 M of 27 M parameters), whose batch norm the
    stand-in's one-sample trace cannot run."""
    kw: dict[str, Any] = {"num_classes": classes, "weights": None}
    if arch == "googlenet":
        kw.update(aux_logits=True, init_weights=False)
    if arch == "inception_v3":
        kw.update(aux_logits=False, init_weights=False)
    with torch.device("meta"):
        return getattr(torchvision.models, arch)(**kw)


def profile_of(cfg: Mapping[str, Any], gpu: Gpu) -> Profile:
    """The planner profile of one configuration (see the module)."""
    arch, batch = cfg["model"], int(cfg["batch_per_gpu"])
    shape = (3, cfg["image_size"], cfg["image_size"])
    model = build_model(arch, cfg["classes"])
    costs = layer_costs(model, shape, batch, "fp32")
    roof = [c.seconds(gpu) for c in costs]
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = 5.0 * param_bytes / gpu.bandwidth
    total = sum(f + b for f, b in roof) + opt
    ips = cfg.get("images_per_s_single")
    step = batch / ips if ips else total / ROOFLINE_FRACTION
    k = step / total
    layers = tuple(
        LayerTime(c.name, c.kind, c.calls, f * k, b * k)
        for c, (f, b) in zip(costs, roof, strict=True)
    )
    fwd, bwd = sum(t.forward_s for t in layers), sum(t.backward_s for t in layers)
    draft = StandinProfile(
        name=cfg["id"],
        arch=arch,
        hidden=0,
        input_shape=shape,
        classes=cfg["classes"],
        precision="fp32",
        source={"kind": "published-check"},
        planner=Profile(
            arch, batch, gpu.name, fwd, bwd, opt * k, param_bytes, (Bucket(0, param_bytes, bwd),)
        ),
        layers=layers,
    )
    buckets, _ = ready_times(model, draft)
    buckets = tuple(Bucket(b.index, b.bytes, min(b.ready_s, bwd)) for b in buckets)
    return replace(draft.planner, buckets=buckets, linear=linear_layers(model, batch))


def linear_layers(model: torch.nn.Module, batch: int) -> tuple[LinearLayer, ...]:
    """Every exact ``nn.Linear`` whose weight trains, seen by ``batch`` rows per step."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    return tuple(
        LinearLayer(index[id(m.weight)], m.out_features, m.in_features, batch)
        for m in model.modules()
        if type(m) is torch.nn.Linear and m.weight.requires_grad
    )


def link_efficiency(network_doc: Mapping[str, Any]) -> float:
    """Share of its nominal rate one stream moved on this host: the largest ping-pong
    message of a netfit of an emulated link, against the rate it was shaped to."""
    pp = network_doc["measurements"]["pingpong"]
    n, t = pp["nbytes"][-1], pp["seconds"][-1]
    source = network_doc["source"]
    rate = next(w.split()[-1] for w in source.split(", ") if w.startswith("emulated link rate"))
    return n * 8 / parse_rate(rate) / t


def duplex_of(network_doc: Mapping[str, Any]) -> float:
    """This host's exchange over ping-pong at the largest message (both ways at once)."""
    m = network_doc["measurements"]
    return min(2.0, max(1.0, m["exchange"]["seconds"][-1] / m["pingpong"]["seconds"][-1]))


def comm_model(
    cfg: Mapping[str, Any], efficiency: float, duplex: float, interference: float
) -> CommModel:
    """The configuration's network (see the module)."""
    beta = 8.0 / (cfg["link_gbit"] * 1e9 * efficiency)
    intra = INTRA_BYTES_PER_S.get(cfg["intra"])
    fabric = Fabric(
        ranks_per_node=int(cfg["gpus_per_node"]),
        intra_beta_s_per_byte=None if intra is None else 1.0 / intra,
        hierarchical=bool(cfg["hierarchical"]),
    )
    return CommModel(LATENCY_S[cfg["link"]], beta, duplex, fabric=fabric, interference=interference)


def step_s(prof: Profile, model: CommModel, cfg: Mapping[str, Any], strategy: str, size: int):
    """The planner's step time of ``strategy`` at ``size`` with the configuration's
    staleness, mix, sufficient factors and a 25 MiB bucket cap."""
    if size == 1:
        return prof.local_step_s
    (row,) = plan(
        prof,
        model,
        sizes=[size],
        strategies=[strategy],
        bucket_mb=[BUCKET_MB],
        staleness=[int(cfg["staleness"])],
        mix=cfg["mix"],
        sufficient_factors=cfg["sufficient_factors"],
    )
    return row.step_s


def quantity(prof: Profile, model: CommModel, cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(the configuration's predicted quantity, its step time at ``gpus``)."""
    p = int(cfg["gpus"])
    t = step_s(prof, model, cfg, cfg["strategy"], p)
    if cfg["quantity"] == "efficiency":
        return step_s(prof, model, cfg, cfg["strategy"], int(cfg["baseline_gpus"])) / t, t
    return t / step_s(prof, model, cfg, cfg["versus"], p), t


def legacy(cfg: Mapping[str, Any], model: CommModel) -> tuple[dict[str, Any], CommModel]:
    """The planner before issue 22's terms: one rank per NIC, a flat ring, a parameter
    server charged as a ring, Horovod as fixed buckets (its ring, without its cycle), no
    factors, no interference."""
    plain = {**cfg, "sufficient_factors": "off"}
    for key in ("strategy", "versus"):
        if plain.get(key) in ("ps", "horovod"):
            plain[key] = "allreduce"
    return plain, replace(model, fabric=Fabric(), interference=0.0)


def predict(
    cfg: Mapping[str, Any], gpus: Mapping[str, Any], efficiency: float, duplex: float, c: float
) -> dict[str, Any]:
    """One configuration's predicted quantity against its published one (and what the
    planner before these terms predicted)."""
    g = gpus[cfg["gpu"]]
    prof = profile_of(cfg, Gpu(g["name"], g["peak_flops"], g["bandwidth"]))
    model = comm_model(cfg, efficiency, duplex, c)
    value, t = quantity(prof, model, cfg)
    old, _ = quantity(prof, legacy(cfg, model)[1], legacy(cfg, model)[0])
    measured = float(cfg["measured"])
    return {
        "id": cfg["id"],
        "paper": cfg["paper"].split(" (")[0],
        "quantity": cfg["quantity"],
        "bound": cfg["bound"],
        "verified": cfg["verified"],
        "measured": measured,
        "predicted": round(value, 4),
        "error_pct": round(100 * (value - measured) / measured, 1),
        "legacy_predicted": round(old, 4),
        "legacy_error_pct": round(100 * (old - measured) / measured, 1),
        "single_gpu_step_s": round(prof.local_step_s, 4),
        "step_s": round(t, 4),
        "model_mb": round(prof.param_bytes / 1e6, 1),
    }


def check(
    published: Mapping[str, Any],
    host_network: Mapping[str, Any],
    interference: float = 0.0,
) -> dict[str, Any]:
    """Every configuration predicted and scored: median and worst absolute error, the
    share of errors of each sign (targets: median <= 15 %, worst <= 50 %, neither sign
    more than two thirds; above = the prediction is higher: for an efficiency, optimistic)."""
    eff, dup = link_efficiency(host_network), duplex_of(host_network)
    rows = [predict(c, published["gpus"], eff, dup, interference) for c in published["configs"]]
    errors = [r["error_pct"] for r in rows]
    old = [r["legacy_error_pct"] for r in rows]
    return {
        "inputs": {
            "link_efficiency": round(eff, 4),
            "duplex": round(dup, 4),
            "interference": interference,
            "bucket_mb": BUCKET_MB,
            "mib": MIB,
        },
        "n": len(rows),
        "papers": len({r["paper"] for r in rows}),
        "median_abs_error_pct": round(statistics.median(abs(e) for e in errors), 1),
        "worst_abs_error_pct": round(max(abs(e) for e in errors), 1),
        "share_above": round(sum(e > 0 for e in errors) / len(errors), 3),
        "share_below": round(sum(e < 0 for e in errors) / len(errors), 3),
        "legacy": {
            "median_abs_error_pct": round(statistics.median(abs(e) for e in old), 1),
            "worst_abs_error_pct": round(max(abs(e) for e in old), 1),
            "share_above": round(sum(e > 0 for e in old) / len(old), 3),
        },
        "rows": rows,
    }


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())

"""Scores of the stand-in held-out split, and the side-by-side table of issue 22, item 3.

    >>> round(hidden_fraction(3.1, 3.0, 0.5), 3)      # 0.1 s of a 0.5 s exchange showed
    0.8

:func:`score` calibrates on the launches at ``cal_sizes`` on ``cal_rate`` and predicts every
other launch (held out: another size, another rate, or both); it reports MAPE, the worst
error and their sign, Kendall's tau of predicted against measured step time within each
(profile, size, rate), and the regret of following the model there. :func:`side_by_side`
reads the same launches as the benchmark they are: samples per second, scaling efficiency
against one stand-in rank, the share of each strategy's wire time hidden behind compute.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gossipgrad.tools.devices.dilation import parse_rate
from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.plan.fabric import Fabric
from gossipgrad.tools.plan.formats import NetworkFit
from lab.plan.standin import (
    Run,
    StandinCalibration,
    calibrate,
    mape_pct,
    network_model,
    plain,
    predict_run,
    profile_for,
)
from lab.plan.validate import kendall_tau

Networks = Mapping[tuple[int, str], tuple[NetworkFit, dict]]


def legacy_predict(run: Run, profiles: Mapping[str, StandinProfile], networks: Networks) -> float:
    """Today's planner before these terms: the plain alpha-beta ring and peer formulas, a
    parameter server charged as a ring, Horovod's fusion as fixed buckets, nothing shared,
    nothing fitted."""
    from gossipgrad.tools.plan.model import step_time

    net, doc = networks[(run.size, run.rate)]
    model = replace(network_model(net, doc, run.dilate), fabric=Fabric())
    model = replace(
        model,
        allreduce_latency_factor=1.0,
        allreduce_bandwidth_factor=1.0,
        queued_latency_factor=None,
        queued_bandwidth_factor=None,
    )
    strategy = "allreduce" if run.strategy == "ps" else run.strategy
    prof = profile_for(run, profiles, 1.0, cycles=False)
    return step_time(prof, model, strategy, run.size, staleness=run.staleness, mix=run.mix).step_s


def _groups(rows: Sequence[tuple[Run, float]]) -> dict[tuple, list[tuple[Run, float]]]:
    out: dict[tuple, list[tuple[Run, float]]] = {}
    for run, pred in rows:
        out.setdefault(run.group, []).append((run, pred))
    return out


def summarize(rows: Sequence[tuple[Run, float]]) -> dict[str, Any]:
    """MAPE, worst, sign balance, tau and regret per group, over (run, predicted) rows."""
    comm = [(r, p) for r, p in rows if r.strategy != "local"]
    errors = [(p - r.step_s) / r.step_s for r, p in comm]
    groups = {}
    for key, members in sorted(_groups(comm).items()):
        pred = [p for _, p in members]
        meas = [r.step_s for r, _ in members]
        try:
            tau = kendall_tau(pred, meas)
        except ValueError:
            tau = None
        chosen = min(members, key=lambda m: m[1])[0]
        groups["/".join(map(str, key))] = {
            "n": len(members),
            "kendall_tau": None if tau is None else round(tau, 3),
            "regret": round(chosen.step_s / min(meas), 4),
            "model_picks": chosen.name,
            "fastest": min(members, key=lambda m: m[0].step_s)[0].name,
        }
    taus = [g["kendall_tau"] for g in groups.values() if g["kendall_tau"] is not None]
    return {
        "n": len(comm),
        "mape_pct": round(mape_pct([(p, r.step_s) for r, p in comm]), 2),
        "worst_pct": round(100 * max(map(abs, errors)), 2) if errors else None,
        "share_too_fast": round(sum(e < 0 for e in errors) / len(errors), 3) if errors else None,
        "median_tau": round(statistics.median(taus), 3) if taus else None,
        "min_tau": min(taus) if taus else None,
        "max_regret": max(g["regret"] for g in groups.values()) if groups else None,
        "groups": groups,
    }


def score(
    runs: Sequence[Run],
    profiles: Mapping[str, StandinProfile],
    networks: Networks,
    cal_sizes: Sequence[int],
    cal_rate: str,
    frozen: StandinCalibration | None = None,
) -> dict[str, Any]:
    """Calibrate on ``cal_sizes`` at ``cal_rate`` (or take ``frozen``, fitted on them
    before), predict the rest (see the module)."""
    cal_rows = [r for r in runs if r.size in cal_sizes and r.rate == cal_rate]
    held = [r for r in runs if not (r.size in cal_sizes and r.rate == cal_rate) and r.size > 1]
    cal = frozen or calibrate(cal_rows, profiles, networks)
    fitted = [(r, predict_run(r, profiles, networks, cal)) for r in held]
    splits: dict[str, list[tuple[Run, float]]] = {}
    for r, p in fitted:
        where = "other size" if r.rate == cal_rate else "other rate"
        splits.setdefault(where, []).append((r, p))
    return {
        "calibration": cal.to_json(),
        "held_out": summarize(fitted),
        "by_split": {k: summarize(v) for k, v in splits.items()},
        "unfitted": summarize([(r, predict_run(r, profiles, networks, plain(cal))) for r in held]),
        "legacy": summarize([(r, legacy_predict(r, profiles, networks)) for r in held]),
        "in_sample": summarize([(r, predict_run(r, profiles, networks, cal)) for r in cal_rows]),
        "rows": [
            {
                "profile": r.profile,
                "size": r.size,
                "rate": r.rate,
                "name": r.name,
                "measured_s": round(r.step_s, 5),
                "predicted_s": round(p, 5),
                "legacy_s": round(legacy_predict(r, profiles, networks), 5),
                "error_pct": round(100 * (p - r.step_s) / r.step_s, 1),
            }
            for r, p in fitted
        ],
    }


def hidden_fraction(step_s: float, local_s: float, wire_s: float) -> float | None:
    """Share of a step's wire time hidden behind compute: ``1 - (step - local) / wire``,
    clamped to [0, 1]; None without wire time."""
    if not wire_s > 0:
        return None
    return min(1.0, max(0.0, 1.0 - (step_s - local_s) / wire_s))


def side_by_side(runs: Sequence[Run], batch: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per contender of each launch: samples/s (undilated), scaling efficiency against
    one stand-in rank of the same profile (``local`` at size 1), the wire's time per step
    at the emulated rate (undilated) and the share of it hidden."""
    one = {r.profile: r.step_s for r in runs if r.size == 1 and r.strategy == "local"}
    local = {r.group: r.step_s for r in runs if r.strategy == "local"}
    out = []
    for r in runs:
        if r.size == 1:
            continue
        bits = parse_rate(r.rate) if r.rate != "host" else None
        wire_s = (r.wire_bytes or 0) * 8 / bits / r.dilate if bits else 0.0
        base = one.get(r.profile)
        out.append(
            {
                "profile": r.profile,
                "size": r.size,
                "link": f"{parse_rate(r.rate) * r.dilate / 1e9:g} Gbit/s" if bits else "host",
                "name": r.name,
                "step_s": round(r.step_s, 4),
                "samples_per_s": round(batch[r.profile] * r.size / r.step_s, 1),
                "efficiency": round(base / r.step_s, 3) if base else None,
                "wire_mb": round((r.wire_bytes or 0) / 1e6, 1),
                "wire_s": round(wire_s, 4),
                "backward_s": round(r.phases.get("backward", 0.0), 4),
                "hidden": None
                if r.strategy == "local"
                else hidden_fraction(r.step_s, local.get(r.group, r.step_s), wire_s),
            }
        )
    return out


def check_targets(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue 22, item 3's targets per launch: where the link dominates (gossip's or DDP's
    wire time above the step's compute), gossip/DDP step time against their wire bytes'
    ratio (within 10 %); where gossip's wire fits behind backward, its efficiency >= 0.9."""
    by_launch: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for row in table:
        by_launch.setdefault((row["profile"], row["size"], row["link"]), {})[row["name"]] = row
    out = []
    for (profile, size, link), rows in sorted(by_launch.items()):
        g, d, loc = rows.get("gossip"), rows.get("ddp"), rows.get("local")
        if not (g and d and loc):
            continue
        item: dict[str, Any] = {"profile": profile, "size": size, "link": link}
        if d["wire_s"] > loc["step_s"]:
            step_ratio = g["step_s"] / d["step_s"]
            byte_ratio = g["wire_mb"] / d["wire_mb"] if d["wire_mb"] else None
            item["link_dominates"] = True
            item["gossip_over_ddp_step"] = round(step_ratio, 3)
            item["gossip_over_ddp_bytes"] = None if byte_ratio is None else round(byte_ratio, 3)
            item["within_10pct"] = (
                None if byte_ratio is None else abs(step_ratio / byte_ratio - 1) <= 0.10
            )
        if g["wire_s"] <= g["backward_s"]:
            item["gossip_fits_behind_backward"] = True
            item["gossip_efficiency"] = g["efficiency"]
            item["efficiency_ge_0.9"] = None if g["efficiency"] is None else g["efficiency"] >= 0.9
        out.append(item)
    return out


def calibration_only(cal: StandinCalibration) -> dict[str, Any]:
    return cal.to_json()


def render_markdown(report: Mapping[str, Any], table: Sequence[Mapping[str, Any]]) -> str:
    """The side-by-side table, item 3's targets and the held-out scores as Markdown."""
    out = [
        "| profile | size | link stood for | contender | step s | samples/s | efficiency vs "
        "1 rank | wire MB/step | wire s | hidden |",
        "|" + "---|" * 10,
    ]
    for r in table:
        hidden = "-" if r["hidden"] is None else f"{r['hidden']:.2f}"
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}"
        out.append(
            f"| {r['profile'].split('-')[0]} | {r['size']} | {r['link']} | {r['name']} | "
            f"{r['step_s']:.4f} | {r['samples_per_s']:,.0f} | {eff} | {r['wire_mb']:.1f} | "
            f"{r['wire_s']:.4f} | {hidden} |"
        )
    out += ["", "| launch | link dominates | gossip/DDP step | gossip/DDP wire bytes | "
            "within 10 % | gossip fits behind backward | gossip efficiency | >= 0.9 |",
            "|" + "---|" * 8]  # fmt: skip
    for t in check_targets(table):
        out.append(
            f"| {t['profile'].split('-')[0]} {t['size']} @ {t['link']} | "
            f"{'yes' if t.get('link_dominates') else 'no'} | "
            f"{t.get('gossip_over_ddp_step', '-')} | "
            f"{t.get('gossip_over_ddp_bytes', '-')} | {t.get('within_10pct', '-')} | "
            f"{'yes' if t.get('gossip_fits_behind_backward') else 'no'} | "
            f"{t.get('gossip_efficiency', '-')} | {t.get('efficiency_ge_0.9', '-')} |"
        )
    if report:
        out += ["", "| scored | n | MAPE % | worst % | share too fast | median tau | min tau | "
                "max regret |", "|" + "---|" * 8]  # fmt: skip
        scored = [("held out", report["held_out"])]
        scored += [(f"held out, {k}", v) for k, v in report["by_split"].items()]
        scored += [("held out, nothing fitted", report["unfitted"])]
        scored += [("held out, the planner before these terms", report["legacy"])]
        scored += [("in-sample (calibration launches)", report["in_sample"])]
        for name, s in scored:
            out.append(
                f"| {name} | {s['n']} | {s['mape_pct']} | {s['worst_pct']} | "
                f"{s['share_too_fast']} | {s['median_tau']} | {s['min_tau']} | {s['max_regret']} |"
            )
    return "\n".join(out) + "\n"

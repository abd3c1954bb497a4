"""Scoring ``plan-validate`` reports: the validation metrics of predicted against measured
step times, the error split between the compute and communication terms, reports of several
sizes combined, and the summary printed for people."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gossipgrad.tools.bench.common import markdown
from lab.plan.validate import summarize

TARGETS = {"mape_pct": 10.0, "worst_abs_pct": 25.0, "kendall_tau": 0.8, "regret": 1.10}


def _group(item: dict[str, Any]) -> Any:
    """The set of alternatives a row or launch belongs to: its size within one launch, its
    ``group`` (file and size) when several launches' reports are merged."""
    return item.get("group", item["size"])


# Over 60 lines on purpose: every metric is computed from the same filtered rows, in one pass.
def score(
    rows: Sequence[dict[str, Any]], launches: Sequence[dict[str, Any]], key: str = "predicted_s"
) -> dict[str, Any]:
    """Validation metrics of ``rows[key]`` plus a compute-vs-communication error split
    (the split always uses ``predicted_exposed_comm_s``)."""
    obs = [((r["config"], _group(r)), r[key], r["measured_s"]) for r in rows]
    s = summarize(obs).to_json()
    # Error split: compute term (profile vs measured local step, per launch) vs the rest.
    local = {_group(lc): lc["compute_check"] for lc in launches}
    comp, comm_err = [], []
    for r in rows:
        c = local[_group(r)]
        comp.append(abs(c["predicted_s"] - c["measured_s"]))
        comm_err.append(abs(r["predicted_exposed_comm_s"] - r["measured_exposed_comm_s"]))
    s["mean_abs_compute_error_s"] = statistics.mean(comp)
    s["mean_abs_exposed_comm_error_s"] = statistics.mean(comm_err)
    s["dominant_error"] = (
        "compute"
        if s["mean_abs_compute_error_s"] >= s["mean_abs_exposed_comm_error_s"]
        else "communication"
    )
    # Regret per size (per launch and size when merged): the planner chooses a configuration
    # for a given number of ranks on a given cluster; step times at different sizes are not
    # alternatives to each other.
    # The model's choice is re-measured against the fastest configuration where the launch
    # did so (``confirm``: fresh runs, free of the first pass's pick of the luckiest run).
    per_size = {}
    for size in dict.fromkeys(_group(r) for r in rows):
        group = [r for r in rows if _group(r) == size]
        chosen = min(group, key=lambda r: r[key])
        best = min(group, key=lambda r: r["measured_s"])
        first = chosen["measured_s"] / best["measured_s"]
        per_size[str(size)] = {
            "regret": first,
            "first_pass_regret": first,
            "chosen": chosen["config"],
            "best_measured": best["config"],
        }
        confirmed = [
            lc["confirm"]
            for lc in launches
            if _group(lc) == size and (lc.get("confirm") or {}).get("regret") is not None
        ]
        if (
            key == "predicted_s"
            and len(confirmed) == 1
            and (confirmed[0]["chosen"], confirmed[0]["best"]) == (chosen["config"], best["config"])
        ):
            per_size[str(size)]["regret"] = confirmed[0]["regret"]
            per_size[str(size)]["confirmed"] = True
    s["regret"] = max(v["regret"] for v in per_size.values())
    s["regret_per_size"] = per_size
    s["targets"] = TARGETS
    tau = s["kendall_tau"]
    s["meets_targets"] = bool(
        s["mape_pct"] <= TARGETS["mape_pct"]
        and s["worst_abs_pct"] <= TARGETS["worst_abs_pct"]
        and tau is not None
        and tau >= TARGETS["kendall_tau"]
        and s["regret"] <= TARGETS["regret"]
    )
    return s


def blocking_score(
    rows: Sequence[dict[str, Any]],
    launches: Sequence[dict[str, Any]],
    key: str = "predicted_spare_core_s",
) -> dict[str, Any] | None:
    """:func:`score` of ``key`` over the configurations without overlap (blocking, or
    ``mix=param``), where the model's spare-core assumption changes nothing: there the
    nothing-fitted model is the profile plus the network fit alone. None with fewer than 2."""
    subset = [r for r in rows if not r.get("overlap", True) or r.get("mix") == "param"]
    return score(subset, launches, key=key) if len(subset) >= 2 else None


def merge(paths: Sequence[str]) -> dict[str, Any]:
    """Score several launches' reports together (per-size summaries kept). A report of
    several sizes (``--sizes``) counts as its launches; each launch and its rows get a
    ``group`` (``"<n>:<file>:<size>"``), so that the same size from two files -- say,
    loopback and an emulated link -- is scored as two sets of alternatives."""
    launches = []
    for i, path in enumerate(paths):
        report = json.loads(Path(path).read_text())
        for lc in report.get("launches", [report]):
            g = f"{i}:{Path(path).name}:{lc['size']}"
            launches.append(
                {**lc, "group": g, "configs": [{**r, "group": g} for r in lc["configs"]]}
            )
    return {**combine(launches), "merged": list(paths)}


def combine(launches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report scoring the configurations of several reports (one per size) together:
    ``summary`` over the in-sample ones, the ``oos_*`` keys (:func:`oos_scores`) over the
    held-out ones (``held_out``: predicted from a calibration frozen at another size or
    link)."""
    fitted = [lc for lc in launches if not lc.get("held_out")]
    held = [lc for lc in launches if lc.get("held_out")]
    rows = [r for lc in fitted for r in lc["configs"]]
    out: dict[str, Any] = {
        "benchmark": "plan-validate",
        "sizes": sorted({lc["size"] for lc in launches}),
        "per_launch": [
            {
                "size": lc["size"],
                "group": _group(lc),
                "source": lc["network"].get("source"),
                **({"held_out": True, "link": lc.get("link")} if lc.get("held_out") else {}),
                "compute_check": lc["compute_check"],
                "summary": lc["summary"],
            }
            for lc in launches
        ],
        "configs": rows + [r for lc in held for r in lc["configs"]],
    }
    if fitted:
        out["summary"] = score(rows, fitted)
        out.update(
            {
                name: score(rows, fitted, key=key)
                for name, key in (
                    ("summary_uncalibrated", "predicted_uncalibrated_s"),
                    ("summary_spare_core", "predicted_spare_core_s"),
                )
                if all(key in r for r in rows)
            }
        )
    if held:
        out.update(oos_scores(held))
    return out


OOS_TARGETS = {"oos_mape_pct": 15.0, "oos_worst_pct": 35.0, "oos_tau_min": 0.7, "oos_regret": 1.10}


def oos_scores(launches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The held-out scores of ``launches`` (each one size on one link, scored in its own
    ``summary``): ``oos_mape_pct`` and ``oos_worst_pct`` over all their configurations,
    ``oos_tau_min`` the smallest Kendall tau within one launch (None where none is
    defined), ``oos_regret`` the largest (re-measured) regret; and the same four for the
    models with nothing fitted to a run (``summary_oos_host_share``,
    ``summary_oos_spare_core``)."""

    def four(key: str, per: Sequence[dict[str, Any]]) -> dict[str, Any]:
        rows = [r for lc in launches for r in lc["configs"]]
        s = summarize([((r["config"], _group(r)), r[key], r["measured_s"]) for r in rows])
        taus = [p["kendall_tau"] for p in per if p["kendall_tau"] is not None]
        return {
            "n": s.n,
            "mape_pct": s.mape_pct,
            "worst_pct": s.worst_abs_pct,
            "tau_min": min(taus) if taus else None,
            "regret": max(p["regret"] for p in per),
        }

    own = four("predicted_s", [lc["summary"] for lc in launches])
    out: dict[str, Any] = {f"oos_{k}": v for k, v in own.items()}
    out["oos_per_size"] = {
        str(_group(lc)): {
            "link": lc.get("link"),
            "calibrated_at": lc.get("calibrated_at"),
            **{
                k: lc["summary"][k]
                for k in ("n", "mape_pct", "worst_abs_pct", "kendall_tau", "regret")
            },
            "chosen": lc["confirm"]["chosen"],
            "best": lc["confirm"]["best"],
        }
        for lc in launches
    }
    out["oos_targets"] = OOS_TARGETS
    tau = out["oos_tau_min"]
    out["oos_meets_targets"] = bool(
        out["oos_mape_pct"] <= OOS_TARGETS["oos_mape_pct"]
        and out["oos_worst_pct"] <= OOS_TARGETS["oos_worst_pct"]
        and tau is not None
        and tau >= OOS_TARGETS["oos_tau_min"]
        and out["oos_regret"] <= OOS_TARGETS["oos_regret"]
    )
    for name, key in (
        ("summary_oos_host_share", "predicted_host_share_s"),
        ("summary_oos_spare_core", "predicted_spare_core_s"),
    ):
        if all(key in r for lc in launches for r in lc["configs"]):
            out[name] = four(key, [score(lc["configs"], [lc], key=key) for lc in launches])
    return out


def markdown_table(report: dict[str, Any]) -> str:
    """The per-config rows of a report (one launch or merged) as a markdown table."""
    header = ["size", "config", "predicted (ms)", "measured (ms)", "error"]
    header += ["spare-core pred (ms)", "its error", "predicted comm (ms)"]
    header += ["measured exposed comm (ms)"]
    rows = []
    for r in report["configs"]:
        meas = r["measured_s"]
        free = r.get("predicted_spare_core_s", r["predicted_s"])
        rows.append(
            [
                r["size"],
                r["config"],
                f"{1e3 * r['predicted_s']:.2f}",
                f"{1e3 * meas:.2f}",
                f"{100 * (r['predicted_s'] - meas) / meas:+.0f}%",
                f"{1e3 * free:.2f}",
                f"{100 * (free - meas) / meas:+.0f}%",
                f"{1e3 * r['predicted_comm_s']:.2f}",
                f"{1e3 * r['measured_exposed_comm_s']:.2f}",
            ]
        )
    return markdown(header, "lllllllll", rows)


def print_summary(report: dict[str, Any], launches: Sequence[dict[str, Any]]) -> None:
    """Per-config lines, each size's host and calibration, and the three summaries (stderr)."""
    for r in report["configs"]:
        print(
            f"{r['size']:>3} {r['config']:<36} pred {1e3 * r['predicted_s']:8.2f} ms  "
            f"meas {1e3 * r['measured_s']:8.2f} ms  "
            f"(spare-core pred {1e3 * r['predicted_spare_core_s']:8.2f} ms)",
            file=sys.stderr,
        )
    for lc in launches:
        if lc.get("held_out"):
            at, h = lc["calibrated_at"], lc["host"]
            print(
                f"size {lc['size']} on {lc['link']}: held out, predicted from the "
                f"calibration at size {at['size']} on {at['link']}; {h['cores']} cores, "
                f"{h['ranks_per_host']} ranks on the host (share x{h['share_ratio']:.2f})",
                file=sys.stderr,
            )
            continue
        h, c = lc["host"], lc["calibration"]
        print(
            f"size {lc['size']}: {h['cores']} cores, {h['ranks_per_host']} ranks on the "
            f"host, spare core {h['spare_core']}, overlap {1e6 * h.get('overlap_s', 0):.0f} "
            f"us/step, staleness 1 {1e9 * h['stale_s_per_byte']:.3g} ns/byte; "
            f"calibration: compute x{c['compute_factor']:.3f}, exchange "
            + ", ".join(f"{k} x{v:.2f}" for k, v in c["exchange_factor"].items()),
            file=sys.stderr,
        )
    for name, what in (
        ("summary", "calibrated, in-sample"),
        ("summary_uncalibrated", "host term fitted, in-sample"),
        ("summary_spare_core", "nothing fitted"),
        ("summary_spare_core_blocking", "nothing fitted, without overlap"),
    ):
        s = report.get(name)
        if s is not None:
            print(
                f"{name} ({what}): MAPE {s['mape_pct']:.1f}%  worst "
                f"{s['worst_abs_pct']:.1f}%  tau {s['kendall_tau']}  regret "
                f"{s['regret']:.3f}",
                file=sys.stderr,
            )
    if "oos_mape_pct" in report:
        held = {
            "oos (held out)": {k[4:]: v for k, v in report.items() if k.startswith("oos_")},
            **{
                f"{n[8:]} (held out)": report[n]
                for n in ("summary_oos_host_share", "summary_oos_spare_core")
                if n in report
            },
        }
        for name, s in held.items():
            print(
                f"{name}: MAPE {s['mape_pct']:.1f}%  worst {s['worst_pct']:.1f}%  tau min "
                f"{s['tau_min']}  regret {s['regret']:.3f}",
                file=sys.stderr,
            )

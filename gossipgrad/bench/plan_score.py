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

from gossipgrad.plan.validate import summarize

TARGETS = {"mape_pct": 10.0, "worst_abs_pct": 25.0, "kendall_tau": 0.8, "regret": 1.10}


def _group(item: dict[str, Any]) -> Any:
    """The set of alternatives a row or launch belongs to: its size within one launch, its
    ``group`` (file and size) when several launches' reports are merged."""
    return item.get("group", item["size"])


def score(rows: Sequence[dict[str, Any]], launches: Sequence[dict[str, Any]],
          key: str = "predicted_s") -> dict[str, Any]:
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
    s["dominant_error"] = ("compute" if s["mean_abs_compute_error_s"]
                           >= s["mean_abs_exposed_comm_error_s"] else "communication")
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
        per_size[str(size)] = {"regret": first, "first_pass_regret": first,
                               "chosen": chosen["config"], "best_measured": best["config"]}
        confirmed = [lc["confirm"] for lc in launches if _group(lc) == size
                     and (lc.get("confirm") or {}).get("regret") is not None]
        if (key == "predicted_s" and len(confirmed) == 1
                and (confirmed[0]["chosen"], confirmed[0]["best"])
                == (chosen["config"], best["config"])):
            per_size[str(size)]["regret"] = confirmed[0]["regret"]
            per_size[str(size)]["confirmed"] = True
    s["regret"] = max(v["regret"] for v in per_size.values())
    s["regret_per_size"] = per_size
    s["targets"] = TARGETS
    tau = s["kendall_tau"]
    s["meets_targets"] = bool(s["mape_pct"] <= TARGETS["mape_pct"]
                              and s["worst_abs_pct"] <= TARGETS["worst_abs_pct"]
                              and tau is not None and tau >= TARGETS["kendall_tau"]
                              and s["regret"] <= TARGETS["regret"])
    return s


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
            launches.append({**lc, "group": g,
                             "configs": [{**r, "group": g} for r in lc["configs"]]})
    return {**combine(launches), "merged": list(paths)}


def combine(launches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report scoring the configurations of several reports (one per size) together."""
    rows = [r for lc in launches for r in lc["configs"]]
    return {"benchmark": "plan-validate",
            "sizes": sorted({lc["size"] for lc in launches}),
            "per_launch": [{"size": lc["size"], "group": _group(lc),
                            "source": lc["network"].get("source"),
                            "compute_check": lc["compute_check"], "summary": lc["summary"]}
                           for lc in launches],
            "configs": rows, "summary": score(rows, launches),
            **{name: score(rows, launches, key=key)
               for name, key in (("summary_uncalibrated", "predicted_uncalibrated_s"),
                                 ("summary_spare_core", "predicted_spare_core_s"))
               if all(key in r for r in rows)}}


def markdown_table(report: dict[str, Any]) -> str:
    """The per-config rows of a report (one launch or merged) as a markdown table."""
    lines = ["| size | config | predicted (ms) | measured (ms) | error | spare-core pred (ms) "
             "| its error | predicted comm (ms) | measured exposed comm (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["configs"]:
        meas = r["measured_s"]
        free = r.get("predicted_spare_core_s", r["predicted_s"])
        lines.append(f'| {r["size"]} | {r["config"]} | {1e3 * r["predicted_s"]:.2f} | '
                     f'{1e3 * meas:.2f} | {100 * (r["predicted_s"] - meas) / meas:+.0f}% | '
                     f'{1e3 * free:.2f} | {100 * (free - meas) / meas:+.0f}% | '
                     f'{1e3 * r["predicted_comm_s"]:.2f} | '
                     f'{1e3 * r["measured_exposed_comm_s"]:.2f} |')
    return "\n".join(lines)


def print_summary(report: dict[str, Any], launches: Sequence[dict[str, Any]]) -> None:
    """Per-config lines, each size's host and calibration, and the three summaries (stderr)."""
    for r in report["configs"]:
        print(f'{r["size"]:>3} {r["config"]:<36} pred {1e3 * r["predicted_s"]:8.2f} ms  '
              f'meas {1e3 * r["measured_s"]:8.2f} ms  '
              f'(spare-core pred {1e3 * r["predicted_spare_core_s"]:8.2f} ms)', file=sys.stderr)
    for lc in launches:
        h, c = lc["host"], lc["calibration"]
        print(f'size {lc["size"]}: {h["cores"]} cores, {h["ranks_per_host"]} ranks on the '
              f'host, spare core {h["spare_core"]}, overlap {1e6 * h.get("overlap_s", 0):.0f} '
              f'us/step, staleness 1 {1e9 * h["stale_s_per_byte"]:.3g} ns/byte; '
              f'calibration: compute x{c["compute_factor"]:.3f}, exchange '
              + ", ".join(f"{k} x{v:.2f}" for k, v in c["exchange_factor"].items()),
              file=sys.stderr)
    for name in ("summary", "summary_uncalibrated", "summary_spare_core"):
        s = report.get(name)
        if s is not None:
            print(f'{name}: MAPE {s["mape_pct"]:.1f}%  worst {s["worst_abs_pct"]:.1f}%  '
                  f'tau {s["kendall_tau"]}  regret {s["regret"]:.3f}', file=sys.stderr)

"""``bench tta``'s record as a Markdown table, a PNG and planner-readable metrics lines.

The metrics lines are what ``gossipgrad plan --metrics`` reads
(:mod:`gossipgrad.tools.plan.convergence`): one ``eval`` record per evaluation and one
``summary`` per strategy, each with ``strategy`` and ``size``, so launches at several sizes
feed the steps-to-target model (:mod:`gossipgrad.tools.plan.steps`).
"""

from __future__ import annotations

import json
from typing import Any

from gossipgrad.tools.bench.common import base_strategy, finite, rounded


def markdown_table(record: dict[str, Any]) -> str:
    """One row per strategy (MB = 10^6 bytes; "-" where the target was not reached)."""

    def cell(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    lines = [
        f"Target test accuracy {record['target']:g}, {record['size']} ranks, "
        f"{record.get('emu_rate') or 'host'}; evaluation every {record['eval_every']} "
        "steps, off the training clock.",
        "",
        "| strategy | steps to target | samples to target | seconds to target | "
        "final acc. | step (s) | eval (s) | wire MB/step | theory MB/step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in record["results"].items():
        wire = r["wire_bytes_per_step"]
        lines.append(
            f"| {name} | {cell(r['steps_to_target'], 'd')} | "
            f"{cell(r['samples_to_target'], 'd')} | {cell(r['seconds_to_target'], '.2f')} | "
            f"{r['final_accuracy']:.4f} | {r['step_s']:.4f} | {r['eval_seconds']:.2f} | "
            f"{cell(None if wire is None else wire / 1e6, '.2f')} | "
            f"{r['theory_bytes_per_step'] / 1e6:.2f} |"
        )
    return "\n".join(lines) + "\n"


def metrics_lines(record: dict[str, Any]) -> list[str]:
    """JSON lines: each strategy's evaluations, then its summary.

    >>> rec = {"size": 2, "target": 0.9, "results": {"gossip": {
    ...     "curve": [[0.0, 0, 0.1], [1.5, 5, 0.93]], "steps": 5, "final_accuracy": 0.93,
    ...     "seconds_to_target": 1.5, "steps_to_target": 5, "step_s": 0.3}}}
    >>> [json.loads(x)["event"] for x in metrics_lines(rec)]
    ['eval', 'eval', 'summary']
    """
    out = []
    for name, r in record["results"].items():
        base = {"strategy": name, "size": record["size"]}
        for wall, step, acc in r["curve"]:
            out.append(
                {"event": "eval", **base, "step": step, "test_accuracy": acc, "train_seconds": wall}
            )
        out.append(
            {
                "event": "summary",
                **base,
                "steps": r["steps"],
                "test_accuracy": r["final_accuracy"],
                "target": record["target"],
                "steps_to_target": r["steps_to_target"],
                "seconds_to_target": r["seconds_to_target"],
                "step_s": r["step_s"],
                "source": "bench tta",
            }
        )
    return [json.dumps(x, sort_keys=True) for x in out]


def plot_png(record: dict[str, Any], path: str) -> None:
    """Test accuracy against training seconds, one line per strategy, the target dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--png needs matplotlib: pip install 'gossipgrad[plot]'") from exc
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, r in record["results"].items():
        ax.plot([p[0] for p in r["curve"]], [p[2] for p in r["curve"]], marker=".", label=name)
    ax.axhline(
        record["target"],
        color="gray",
        linestyle="--",
        linewidth=1,
        label=f"target {record['target']:g}",
    )
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("test accuracy (consensus model)")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    mb = record["model_bytes"] / 1e6
    ax.set_title(
        f"{record['size']} ranks, {record.get('emu_rate') or 'host'}, "
        f"{record['arch']} {mb:.1f} MB, batch {record['batch']}/rank"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ratios(record: dict[str, Any]) -> dict[str, Any]:
    """Each gossip contender (``gossip``, ``gossip@block``) against every other strategy:
    ``<gossip>_over_<other>_seconds`` and ``_steps`` to the target; and the job's
    exchange-to-compute ratio, one model over the emulated link against ``local``'s step.

        >>> rows = {"gossip": {"seconds_to_target": 3.0, "steps_to_target": 30},
        ...         "ddp": {"seconds_to_target": 6.0, "steps_to_target": 25}}
        >>> ratios({"results": rows, "model_bytes": 1})
        {'gossip_over_ddp_seconds': 0.5, 'gossip_over_ddp_steps': 1.2}
    """
    rows, out = record["results"], {}
    for g, gr in rows.items():
        if base_strategy(g) != "gossip":
            continue
        for other, orow in rows.items():
            if base_strategy(other) == "gossip":
                continue
            for key, short in (("seconds_to_target", "seconds"), ("steps_to_target", "steps")):
                if gr[key] is not None and orow[key]:
                    out[f"{g}_over_{other}_{short}"] = finite(gr[key] / orow[key])
    link = link_bits_per_s(record.get("emu_rate"))
    local = rows.get("local")
    if link and local and local["step_s"]:
        wire_s = record["model_bytes"] * 8 / link
        out["model_wire_s"] = rounded(wire_s, 4)
        out["exchange_over_compute"] = finite(wire_s / local["step_s"])
    return out


def link_bits_per_s(rate: str | None) -> float | None:
    """``"1gbit"`` -> 1e9 (tc's units: kbit, mbit, gbit, or bits); None when unknown.

    >>> link_bits_per_s("1gbit"), link_bits_per_s("100mbit"), link_bits_per_s(None)
    (1000000000.0, 100000000.0, None)
    """
    if not rate:
        return None
    text = rate.strip().lower()
    for suffix, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * scale
            except ValueError:
                return None
    return None

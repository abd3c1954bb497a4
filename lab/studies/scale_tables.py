"""Markdown tables of the scale studies' JSON lines (``python -m lab scale-efficiency
--table FILE``, ``python -m lab scale-jitter --table FILE``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def efficiency_tables(records: list[dict[str, Any]]) -> str:
    """One table per optimizer x scaling x partition: a row per size, a column per
    contender, each cell ``final accuracy / steps to the target (x allreduce's on iid
    shards)``; then the seconds every size's runs took on this host."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["optimizer"], r["scaling"], r["partition"])].append(r)
    reference = {
        (r["optimizer"], r["scaling"], r["size"]): r
        for r in records
        if r["contender"] == "allreduce" and r["partition"] == "iid"
    }
    out = []
    for (optimizer, scaling, partition), rows in sorted(groups.items()):
        contenders = _ordered({r["contender"] for r in rows})
        target = rows[0]["target"]
        out.append(
            f"\n**{optimizer}, {scaling} scaling, {partition} shards** (final accuracy of "
            f"the merged model / steps to {target} as a multiple of allreduce's on iid "
            "shards; - : never)\n"
        )
        out.append("| ranks | " + " | ".join(contenders) + " |")
        out.append("|---" * (len(contenders) + 1) + "|")
        by = {(r["size"], r["contender"]): r for r in rows}
        for size in sorted({r["size"] for r in rows}):
            ref = reference.get((optimizer, scaling, size))
            cells = [_cell(by.get((size, c)), ref) for c in contenders]
            out.append(f"| {size} | " + " | ".join(cells) + " |")
    out.append("\n**Seconds per run on this host** (the 2-core host's load average beside)\n")
    out.append("| ranks | runs | median s | longest s | load |")
    out.append("|---|---|---|---|---|")
    sizes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        sizes[r["size"]].append(r)
    for size in sorted(sizes):
        secs = sorted(r["wall_s"] for r in sizes[size])
        load = sorted(r["load_before"] for r in sizes[size])
        out.append(
            f"| {size} | {len(secs)} | {secs[len(secs) // 2]:.0f} | {secs[-1]:.0f} | "
            f"{load[0]:.1f}-{load[-1]:.1f} |"
        )
    return "\n".join(out)


def _cell(r: dict[str, Any] | None, ref: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    steps = r["steps_to_target"]
    base = ref["steps_to_target"] if ref else None
    if steps is None:
        ratio = "-"
    elif base:
        ratio = f"{steps / base:.2f}x"
    else:
        ratio = str(steps)
    return f"{r['final_accuracy']:.3f} / {ratio}"


def _ordered(names: set[str]) -> list[str]:
    order = ["allreduce", "gossip", "gossip-sync", "local", "gossip-lag"]
    return [n for n in order if n in names] + sorted(names - set(order))


def jitter_table(records: list[dict[str, Any]]) -> str:
    """A row per size: the noiseless step of each contender, then its step with 5 % noise
    and with one 2x straggler as multiples of that."""
    contenders = _jitter_order({r["contender"] for r in records})
    by = {(r["size"], r["contender"], r["condition"]): r for r in records}
    first = records[0]
    out = [
        f"\n**{first['profile']}, {first['link_gbit']:g} Gbit/s, {first['steps']} steps** "
        "(seconds a step without noise; x that with 5 % compute noise / with one rank "
        "2x slower)\n",
        "| ranks | " + " | ".join(contenders) + " |",
        "|---" * (len(contenders) + 1) + "|",
    ]
    for size in sorted({r["size"] for r in records}):
        cells = []
        for c in contenders:
            none, noise, slow = (by.get((size, c, k)) for k in ("none", "noise5", "straggler2x"))
            if none is None:
                cells.append("")
                continue
            cells.append(
                f"{none['mean_step_s']:.3f} s; x{noise['vs_none']:.3f} / x{slow['vs_none']:.2f}"
            )
        out.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _jitter_order(names: set[str]) -> list[str]:
    order = ["allreduce", "gossip", "gossip-stale", "gossip-lag1", "gossip-lag2", "gossip-lag4"]
    return [n for n in order if n in names] + sorted(names - set(order))

"""Jitter at scale on the simulator's clock (issue 41, item 4): step time against the number
of ranks for allreduce, lockstep gossip and bounded lag, with 5 % compute noise and with one
rank twice as slow.

    python -m lab scale-jitter --out lab/records/scale/jitter.jsonl
    python -m lab scale-jitter --table lab/records/scale/jitter.jsonl

The hardware is a planner profile (default: ResNet-50 at batch 64 on a P100, the published
stand-in profile, 0.29 s a step, 102 MB of gradients in 25 MB buckets) on links of
``--link-gbit`` (default 25) with 20 us latency, the exchange priced by the planner's
model. Nothing is trained: :func:`gossipgrad.tools.simulate.timeline_for` runs the clock
only (every rank's compute drawn per step, waits as each timing has them; under bounded
lag the event simulation with its catch-up skips). Each line: the mean step over
``--steps`` steps, and its ratio to the same contender without noise or straggler.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.simulate import ClockOptions, exchange_for, timeline_for

CONTENDERS: dict[str, dict[str, Any]] = {
    "allreduce": {"strategy": "allreduce"},
    "gossip": {"strategy": "gossip", "mix": "param"},
    "gossip-stale": {"strategy": "gossip", "mix": "param", "staleness": 1},
    "gossip-lag1": {"strategy": "gossip", "mix": "param", "max_lag": 1},
    "gossip-lag2": {"strategy": "gossip", "mix": "param", "max_lag": 2},
    "gossip-lag4": {"strategy": "gossip", "mix": "param", "max_lag": 4},
}
CONDITIONS = {
    "none": {},
    "noise5": {"jitter": 0.05},
    "straggler2x": {"stragglers": ((0, 2.0),)},
}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab scale-jitter", description=__doc__)
    p.add_argument("--sizes", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--profile", default="resnet50-p100-fp32-b64")
    p.add_argument("--link-gbit", type=float, default=25.0)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="JSON lines to write")
    p.add_argument("--table", help="print a Markdown table of this JSON lines file instead")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.table:
        from lab.studies.scale_tables import jitter_table

        with open(args.table, encoding="utf-8") as f:
            print(jitter_table([json.loads(line) for line in f if line.strip()]))
        return 0
    profile = StandinProfile.load(args.profile).planner
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    for size in (int(s) for s in args.sizes.split(",")):
        for name in args.contenders.split(","):
            fields = dict(CONTENDERS[name])
            exchange = exchange_for(fields.pop("strategy"), False, **fields)
            base = None
            for condition, extra in CONDITIONS.items():
                clock = ClockOptions(
                    profile=profile, link_gbit=args.link_gbit, seed=args.seed, **extra
                )
                started = time.perf_counter()
                line = timeline_for(exchange, size, args.steps, [], clock)
                step = line.mean_step_s()
                base = step if base is None else base
                rec = {
                    "study": "jitter",
                    "profile": args.profile,
                    "link_gbit": args.link_gbit,
                    "size": size,
                    "contender": name,
                    "condition": condition,
                    "steps": args.steps,
                    "compute_s": profile.local_step_s,
                    "mean_step_s": step,
                    "vs_none": step / base,
                    "skipped_share": float(line.skipped.mean())
                    if line.skipped is not None
                    else 0.0,
                    "clock_s": round(time.perf_counter() - started, 2),
                }
                print(json.dumps(rec), flush=True)
                if out is not None:
                    out.write(json.dumps(rec) + "\n")
    if out is not None:
        out.close()
    return 0

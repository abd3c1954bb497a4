"""Run `gossipgrad train` over sizes x strategies x mixes and print a markdown table + JSON.

    python -m lab sweep --sizes 1,2,3,5,6,8 --strategies gossip,allreduce
    python -m lab sweep --sizes 8 --mixes grad,param --extra "--epochs 10"

Each configuration runs once under the venv's mpiexec (size 1 without a launcher); every
run has a deadline. ``--mixes`` applies to the strategies that read a mix (gossip);
allreduce averages gradients and allreduce-param parameters whatever it says. Rows come
from each run's summary record.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import gossipgrad  # noqa: F401 - registers the built-in strategies
from gossipgrad.registry import STRATEGIES

COLUMNS = [
    "size",
    "strategy",
    "mix",
    "topology",
    "test_accuracy",
    "steps",
    "wall_seconds",
    "comm_seconds",
    "bytes_sent_per_step",
]


def run_one(size: int, strategy: str, mix: str, extra: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.jsonl")
        cmd = [
            sys.executable,
            "-m",
            "gossipgrad",
            "train",
            "--no-progress",
            "--strategy",
            strategy,
            *(["--mix", mix] if "mix" in STRATEGIES.get(strategy).uses else []),
            "--metrics-out",
            out,
            *extra,
        ]
        if size > 1:
            cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(size), *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise SystemExit(f"failed ({res.returncode}): {shlex.join(cmd)}\n{res.stderr[-2000:]}")
        with open(out, encoding="utf-8") as f:
            return next(r for r in map(json.loads, f) if r.get("event") == "summary")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lab sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,2,3,5,6,8")
    ap.add_argument("--strategies", default="gossip,allreduce")
    ap.add_argument("--mixes", default="param")
    ap.add_argument("--extra", default="", help="more train flags, one string")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    rows = []
    for size in map(int, args.sizes.split(",")):
        for strategy in args.strategies.split(","):
            for mix in args.mixes.split(","):
                s = run_one(size, strategy, mix, shlex.split(args.extra), args.timeout)
                rows.append({k: s.get(k) for k in COLUMNS})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        cells = [
            f"{v:.4f}"
            if isinstance(v, float) and k == "test_accuracy"
            else f"{v:.2f}"
            if isinstance(v, float)
            else str(v)
            for k, v in r.items()
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per-step training loss of two runs, compared: prints one JSON object.

    mpiexec -n 4 gossipgrad train --strategy ps --print-freq 1 --metrics-out ps.jsonl
    mpiexec -n 4 gossipgrad train --strategy allreduce --mix grad --print-freq 1 \\
        --metrics-out ar.jsonl
    python -m lab compare-losses ps.jsonl ar.jsonl

Reads the ``log`` records of two ``--metrics-out`` files (rank 0's loss, one record per step
with ``--print-freq 1``) and reports the steps both have, the largest absolute difference
and where it is, and each run's summary accuracy. Exit 1 if the runs share no step.
"""

from __future__ import annotations

import json
import sys


def losses(path: str) -> tuple[dict[int, float], dict]:
    steps, summary = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "log":
                steps[int(rec["step"])] = float(rec["loss"])
            elif rec.get("event") == "summary":
                summary = rec
    return steps, summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    (a, sa), (b, sb) = losses(argv[0]), losses(argv[1])
    common = sorted(set(a) & set(b))
    if not common:
        print(f"no step in common between {argv[0]} and {argv[1]}", file=sys.stderr)
        return 1
    diffs = {t: abs(a[t] - b[t]) for t in common}
    worst = max(common, key=lambda t: diffs[t])
    print(
        json.dumps(
            {
                "steps": len(common),
                "first": common[0],
                "last": common[-1],
                "max_abs_diff": diffs[worst],
                "at_step": worst,
                "test_accuracy": [sa.get("test_accuracy"), sb.get("test_accuracy")],
                "strategy": [sa.get("strategy"), sb.get("strategy")],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

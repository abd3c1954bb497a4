#!/usr/bin/env python3
"""Soak: a long ``gossipgrad train`` whose ranks' memory, threads and open files are recorded.

    python -m lab soak --ranks 4 --steps 20000 --every 1000 --out soak.json
    python -m lab soak --steps 2000 --every 500 -- --mix grad     # extra train flags

Runs ``mpiexec -n RANKS python -m gossipgrad train --max-lag 2 --shuffle --max-steps STEPS``
on digits (plus any flags after ``--``) and, every EVERY steps (as the run's metrics record
them), reads each rank's resident memory (``VmRSS``), thread count (``Threads``) and open
file descriptors (``/proc/<pid>/fd``) from ``/proc``. Prints one JSON object (and writes it
to ``--out``): every sample, the largest growth of any rank's resident memory after the
first sample (target <= 5 %), and whether thread and descriptor counts stayed constant.
The exit code is 0 when the run finished and every target was met, 1 otherwise.

Linux only (``/proc``); stdlib only; the ``mpiexec`` next to this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

# scripts/procs.py: the ranks below a launcher (shared with the tests' launch helpers)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from procs import rank_pids  # noqa: E402

TARGET_RSS_GROWTH = 0.05


def usage(pid: int) -> dict[str, int]:
    """Resident memory (KiB), threads and open file descriptors of ``pid``."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                fields[key] = int(value.split()[0])
    return {
        "rss_kib": fields["VmRSS"],
        "threads": fields["Threads"],
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def last_step(metrics: str) -> int:
    """The step of the last ``log`` record in the metrics file (-1 before the first)."""
    step = -1
    try:
        with open(metrics, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n") and '"event": "log"' in line:
                    step = json.loads(line)["step"]
    except OSError:
        pass
    return step


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth of resident memory after the first sample, and constancy of the counts."""
    if len(samples) < 2:
        return {"rss_growth": None, "threads_constant": None, "fds_constant": None}
    first, growth = samples[0]["ranks"], 0.0
    for s in samples[1:]:
        for rank, u in s["ranks"].items():
            growth = max(growth, u["rss_kib"] / first[rank]["rss_kib"] - 1.0)
    same = {
        k: all(s["ranks"][r][k] == first[r][k] for s in samples for r in first)
        for k in ("threads", "fds")
    }
    return {
        "rss_growth": round(growth, 4),
        "threads_constant": same["threads"],
        "fds_constant": same["fds"],
    }


def monitor(proc: subprocess.Popen, metrics: str, every: int, steps: int) -> list[dict]:
    """Sample every rank each time the run's metrics pass a multiple of ``every``."""
    samples: list[dict[str, Any]] = []
    due = every
    while proc.poll() is None and due <= steps:
        step = last_step(metrics)
        if step >= due:
            pids = rank_pids(proc.pid)
            try:
                ranks = {str(r): usage(pid) for r, pid in sorted(pids.items())}
            except (OSError, KeyError):
                break  # a rank is exiting
            samples.append({"step": step, "time_s": round(time.monotonic(), 1), "ranks": ranks})
            print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
            due = (step // every + 1) * every
        time.sleep(0.1)
    return samples


# Over 60 lines on purpose: argparse's flags, the launch and its sampling loop, and the report.
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--every", type=int, default=1_000)
    ap.add_argument("--max-lag", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=50, help="Epochs between evaluations.")
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="Seconds for the run.")
    ap.add_argument("--out", default=None, help="Also write the JSON here.")
    ap.add_argument("train_args", nargs="*", help="More `gossipgrad train` flags (after --).")
    args = ap.parse_args(argv)
    if args.every < 1 or args.steps < 2 * args.every or args.ranks < 1:
        ap.error("need --ranks >= 1, --every >= 1 and --steps >= 2 x --every")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = mpiexec if os.path.exists(mpiexec) else shutil.which("mpiexec")
    tmp = tempfile.mkdtemp(prefix="gossipgrad-soak-")
    metrics = os.path.join(tmp, "metrics.jsonl")
    cmd = [
        mpiexec,
        "-n",
        str(args.ranks),
        sys.executable,
        "-m",
        "gossipgrad",
        "train",
        "--max-lag",
        str(args.max_lag),
        "--shuffle",
        "--max-steps",
        str(args.steps),
        "--epochs",
        "100000",
        "--eval-every",
        str(args.eval_every),
        "--print-freq",
        str(min(args.every, 100)),
        "--no-progress",
        "--metrics-out",
        metrics,
        *args.train_args,
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        samples = monitor(proc, metrics, args.every, args.steps)
        out, err = proc.communicate(timeout=max(1.0, args.timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    lines = [x for x in out.splitlines() if x.startswith("{")]
    summary = json.loads(lines[-1]) if lines else None
    result = {
        "command": " ".join(cmd[cmd.index("-m") + 1 :]).replace(metrics, "M"),
        "ranks": args.ranks,
        "steps": args.steps,
        "every": args.every,
        "returncode": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "target_rss_growth": TARGET_RSS_GROWTH,
        **summarize(samples),
        "samples": samples,
        "run": {
            k: summary.get(k) for k in ("steps", "test_accuracy", "skipped_steps", "samples_per_s")
        }
        if summary
        else None,
    }
    result["passed"] = bool(
        proc.returncode == 0
        and result["rss_growth"] is not None
        and result["rss_growth"] <= TARGET_RSS_GROWTH
        and result["threads_constant"]
        and result["fds_constant"]
    )
    if proc.returncode != 0:
        result["stderr_tail"] = err[-2000:]
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

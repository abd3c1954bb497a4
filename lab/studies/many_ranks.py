#!/usr/bin/env python3
"""The runtime at many real ranks on one host (issue 41, item 6): start-up, memory per rank,
bytes a step, checkpoint and resume, and a stopped rank named.

    python -m lab many-ranks --sizes 16,32 --out lab/records/scale/many-ranks.jsonl

Per size N, three launches of ``mpiexec -n N python -m gossipgrad train --dataset templates
--batch-size 8 --shuffle`` (gossip, its defaults) in a fresh run directory:

1. ``--epochs 1``: the launch's seconds, the seconds to the first metrics line (start-up:
   every rank imported, met the others, built its model and data), every rank's peak
   proportional set size (``Pss``, shared library pages split between the ranks that map
   them: what the ranks cost the host together, summed) and resident size, threads and
   open descriptors (sampled from ``/proc`` twice a second), and the summary's
   ``bytes_sent_per_step`` against ``model_bytes`` (one peer a step: the model's bytes
   whatever N);
2. ``--epochs 2 --resume auto``: resumes from the first launch's checkpoint
   (``start_step`` equal to its steps) and finishes;
3. ``--epochs 1000 --comm-timeout T``: once training has written a metrics line, rank
   ``N - 1`` is stopped (SIGSTOP); the job must end non-zero within ``1.1 T + 20`` s
   (docs/guarantees.md) with a message that names it.

Prints one JSON line per size (and appends it to ``--out``). Linux only; needs the memory:
check ``free -g`` first (about 0.4 GB a rank here).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from procs import rank_pids  # noqa: E402

TRAIN = ["--dataset", "templates", "--batch-size", "8", "--shuffle", "--no-progress"]


def mpiexec() -> str:
    return os.path.join(os.path.dirname(sys.executable), "mpiexec")


def usage(pid: int) -> dict[str, int]:
    """Pss and Rss (KiB), threads and descriptors of ``pid`` (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":")[0]
                if key in ("Pss", "Rss"):
                    out[key.lower()] = int(line.split()[1])
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return {}
    return out


def launch(n: int, args: list[str], metrics: str, stop_rank: int | None = None, wait: float = 3600):
    """Run one launch, sampling its ranks; returns (returncode, stderr, seconds, seconds to
    the first metrics line, peaks per rank, seconds from the stop to the end)."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "gossipgrad", "train", *TRAIN, *args,
           "--metrics-out", metrics]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO, start_new_session=True)  # fmt: skip
    peaks: dict[int, dict[str, int]] = {}
    first = stopped = None
    err_chunks: list[str] = []
    try:
        while proc.poll() is None and time.monotonic() - started < wait:
            for rank, pid in rank_pids(proc.pid).items():
                for k, v in usage(pid).items():
                    peaks.setdefault(rank, {})[k] = max(peaks.get(rank, {}).get(k, 0), v)
            if first is None and os.path.exists(metrics) and os.path.getsize(metrics) > 0:
                first = time.monotonic() - started
                if stop_rank is not None:
                    os.kill(rank_pids(proc.pid)[stop_rank], signal.SIGSTOP)
                    stopped = time.monotonic()
            time.sleep(0.5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        err_chunks.append(proc.communicate()[1])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    end = time.monotonic()
    return (
        proc.returncode,
        "".join(err_chunks),
        end - started,
        first,
        peaks,
        (None if stopped is None else end - stopped),
    )


def summary(metrics: str) -> dict[str, Any]:
    with open(metrics, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return next(r for r in reversed(recs) if r.get("event") == "summary")


def one_size(n: int, timeout: float) -> dict[str, Any]:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, m1, m2, m3 = (
            os.path.join(tmp, x) for x in ("run", "1.jsonl", "2.jsonl", "3.jsonl")
        )
        code, err, seconds, first, peaks, _ = launch(n, ["--epochs", "1", "--run-dir", run_dir], m1)
        if code != 0:
            raise RuntimeError(f"{n} ranks: the first launch failed:\n{err[-3000:]}")
        s1 = summary(m1)
        code2, err2, seconds2, _, _, _ = launch(
            n, ["--epochs", "2", "--run-dir", run_dir, "--resume", "auto"], m2
        )
        s2 = summary(m2) if code2 == 0 else {}
        code3, err3, _, _, _, after = launch(
            n,
            ["--epochs", "1000", "--comm-timeout", str(timeout), "--print-freq", "1"],
            m3,
            stop_rank=n - 1,
            wait=1.1 * timeout + 120,
        )
    named = re.search(
        rf"peer {n - 1} (sent|received) nothing|rank {n - 1} did not arrive|"
        rf"rank {n - 1} answers no probe|is rank {n - 1} alive",
        err3,
    )
    pss = [p.get("pss", 0) / 1024 for p in peaks.values()]
    rss = [p.get("rss", 0) / 1024 for p in peaks.values()]
    return {
        "study": "many-ranks",
        "size": n,
        "load_before": round(load, 2),
        "launch_s": round(seconds, 1),
        "startup_s": None if first is None else round(first, 1),
        "train_wall_s": s1.get("wall_seconds"),
        "steps": s1["steps"],
        "test_accuracy": s1.get("test_accuracy"),
        "bytes_sent_per_step": s1["bytes_sent_per_step"],
        "model_bytes": s1["model_bytes"],
        "ranks_sampled": len(peaks),
        "pss_mb_max": round(max(pss), 1),
        "pss_mb_sum": round(sum(pss), 1),
        "rss_mb_max": round(max(rss), 1),
        "threads_max": max(p.get("threads", 0) for p in peaks.values()),
        "fds_max": max(p.get("fds", 0) for p in peaks.values()),
        "resume_ok": code2 == 0 and s2.get("start_step") == s1["steps"],
        "resume_start_step": s2.get("start_step"),
        "resume_steps": s2.get("steps"),
        "resume_test_accuracy": s2.get("test_accuracy"),
        "resume_launch_s": round(seconds2, 1),
        "stop_exit_code": code3,
        "stop_named": bool(named),
        "stop_to_end_s": None if after is None else round(after, 1),
        "stop_bound_s": 1.1 * timeout + 20,
        "stop_message": (named.group(0) if named else err3[-500:]),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lab many-ranks", description=__doc__)
    p.add_argument("--sizes", default="16,32")
    p.add_argument("--comm-timeout", type=float, default=60.0)
    p.add_argument("--out")
    args = p.parse_args(argv)
    ok = True
    for n in (int(s) for s in args.sizes.split(",")):
        rec = one_size(n, args.comm_timeout)
        line = json.dumps(rec)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        ok = ok and rec["resume_ok"] and rec["stop_named"] and rec["stop_exit_code"] != 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

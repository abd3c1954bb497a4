"""Rank failure, measured: train with ranks killed mid-run, and without, side by side; print JSON.

    python -m lab failure                       # 8 ranks, digits, 20 epochs
    python -m lab failure --ranks 4 --kills 2:12 --kills 1:7,3:30
    python -m lab failure --on-failure respawn --kills 3:27 --kills 2:12,6:37

Every run is ``.venv-ompi/bin/mpiexec --with-ft ulfm --oversubscribe -n RANKS python -m
gossipgrad train --on-failure continue`` (or ``respawn``; Open MPI with ULFM;
``scripts/test.sh`` builds the venv); each ``--kills`` value is one run, its ranks killed by
``GOSSIPGRAD_INJECT_KILL`` (SIGKILL at the start of that step). A run without kills is the
reference. Per run: exit code, steps and epochs run, final consensus accuracy and its
difference from the reference (target: within 1.5 points; 0.3 under ``respawn``), per failure
the seconds from the kill (the dying rank logs the wall-clock time) to training again
(``resumed_at`` in the summary; target: at most ``--comm-timeout`` + 5 s) and, under
``respawn``, at the launch size again, the part of it the spawn took, the bytes the
replacement received and from whom; and whether any rank of the job was left running after
``mpiexec`` returned. ``respawn`` also wants ``samples_lost`` 0 and the launch size at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(REPO, ".venv-ompi", "bin")
RESPAWN_FIELDS = (
    "replaced",
    "spawn_seconds",
    "build_seconds",
    "settle_seconds",
    "from",
    "bytes",
    "samples_seen_twice",
)
KILLED = re.compile(r"launch rank (\d+) dies at step (\d+) \((\w+)\), time ([\d.]+)")


# Over 60 lines on purpose: one job's command, its kill schedule and the parsing of what it
# printed belong to one launch.
def launch(
    ranks: int, kills: str, flags: list[str], timeout: float, workdir: str, mode: str = "continue"
) -> dict:
    """One training job; returns its record (see the module docstring)."""
    metrics = os.path.join(workdir, f"metrics-{kills or 'none'}.jsonl".replace(":", "_"))
    cmd = [
        os.path.join(VENV, "mpiexec"),
        "--with-ft",
        "ulfm",
        "--oversubscribe",
        "-n",
        str(ranks),
        os.path.join(VENV, "python"),
        "-m",
        "gossipgrad",
        "train",
        "--on-failure",
        mode,
        "--no-progress",
        "--metrics-out",
        metrics,
        *flags,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "OMP_NUM_THREADS": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "GOSSIPGRAD_INJECT_KILL": kills,
    }
    t0 = time.time()
    res = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    records = (
        [json.loads(x) for x in open(metrics, encoding="utf-8")] if os.path.exists(metrics) else []
    )
    summary = next((r for r in records if r.get("event") == "summary"), {})
    deaths = {int(rank): float(at) for rank, _, _, at in KILLED.findall(res.stderr)}
    failures = [
        {
            "rank": f["rank"],
            "step": f["step"],
            "steps_redone": f["steps_redone"],
            "samples_lost": f["samples_lost"],
            "detected_to_training_s": f["seconds"],
            "kill_to_training_s": (
                round(f["resumed_at"] - deaths[f["rank"]], 3) if f["rank"] in deaths else None
            ),
            **{k: f[k] for k in RESPAWN_FIELDS if k in f},
        }
        for f in summary.get("failures", [])
    ]
    return {
        "kills": kills or None,
        "exit_code": res.returncode,
        "wall_s": round(time.time() - t0, 1),
        "steps": summary.get("steps"),
        "epochs": _epochs(records),
        "size_final": summary.get("size_final"),
        "test_accuracy": summary.get("top1"),
        "samples_lost": summary.get("samples_lost"),
        "failures": failures,
        "left_running": _left_running(metrics),
        "stderr_tail": res.stderr[-1500:] if res.returncode or not summary else "",
    }


def _epochs(records: list[dict]) -> int:
    return len([r for r in records if r.get("event") == "eval"])


def _left_running(marker: str) -> list[int]:
    """Pids of processes whose command line still holds ``marker`` (this job's ranks)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


# Over 60 lines on purpose: argparse's flags, then one loop over the kill cases.
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lab failure", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument(
        "--kills",
        action="append",
        default=None,
        help="RANK:STEP[,RANK:STEP...] for one run (repeat for more runs); "
        "default: 3:52 and 2:27,6:77 (mid-epoch at 8 ranks, 5 steps/epoch)",
    )
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument(
        "--on-failure", dest="mode", choices=["continue", "respawn"], default="continue"
    )
    ap.add_argument("--comm-timeout", type=float, default=60.0)
    ap.add_argument(
        "--train-flag",
        action="append",
        default=[],
        help="one more `gossipgrad train` argument for every run (repeat; e.g. "
        "--train-flag=--arch --train-flag=resnet50)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per launch")
    ap.add_argument(
        "--workdir",
        default=None,
        help="keep each run's metrics here (default: a temporary directory)",
    )
    ap.add_argument(
        "--reference-top1",
        type=float,
        default=None,
        help="skip the run without failure and compare with this top-1 (from an "
        "earlier run of the same command; accuracy is deterministic per seed "
        "and size)",
    )
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(VENV, "mpiexec")):
        sys.exit(f"no Open MPI venv in {VENV}: run bash scripts/test.sh (it builds .venv-ompi)")
    flags = [
        "--epochs",
        str(args.epochs),
        "--comm-timeout",
        str(args.comm_timeout),
        *args.train_flag,
    ]
    kills = args.kills or ["3:52", "2:27,6:77"]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        if args.reference_top1 is None:
            runs = [launch(args.ranks, "", flags, args.timeout, workdir, args.mode)]
        else:
            runs = [{"kills": None, "test_accuracy": args.reference_top1, "given": True}]
        for k in kills:
            runs.append(launch(args.ranks, k, flags, args.timeout, workdir, args.mode))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)  # partial results
    ref = runs[0]
    budget = args.comm_timeout + 5.0
    points = 0.3 if args.mode == "respawn" else 1.5
    for r in runs[1:]:
        r["accuracy_delta_points"] = (
            round(100 * (r["test_accuracy"] - ref["test_accuracy"]), 2)
            if r["test_accuracy"] is not None and ref["test_accuracy"] is not None
            else None
        )
        times = [f["kill_to_training_s"] for f in r["failures"]]
        r["targets_met"] = bool(
            r["exit_code"] == 0
            and r["epochs"] == args.epochs
            and not r["left_running"]
            and r["accuracy_delta_points"] is not None
            and abs(r["accuracy_delta_points"]) <= points
            and times
            and all(t is not None and t <= budget for t in times)
            and (
                args.mode != "respawn" or (r["samples_lost"] == 0 and r["size_final"] == args.ranks)
            )
        )
    print(
        json.dumps(
            {
                "ranks": args.ranks,
                "on_failure": args.mode,
                "epochs": args.epochs,
                "train_flags": args.train_flag,
                "comm_timeout": args.comm_timeout,
                "kill_to_training_budget_s": budget,
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

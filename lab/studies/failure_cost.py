"""What ``--on-failure continue`` (or ``respawn``) costs per step when nothing fails, against
``abort``, in one launch: the same processes train the same job alternately with each (abort,
continue, abort, continue, ...), so both see the same machine and the same load; prints one
JSON object.

    .venv-ompi/bin/mpiexec --with-ft ulfm --oversubscribe -n 8 .venv-ompi/bin/python \\
        -m lab failure-cost --reps 3 --epochs 40
    .venv-ompi/bin/mpiexec --oversubscribe -n 8 .venv-ompi/bin/python \\
        -m lab failure-cost --modes abort        # Open MPI without ULFM: its own cost
    .venv-ompi/bin/mpiexec --with-ft ulfm --oversubscribe -n 8 .venv-ompi/bin/python \\
        -m lab failure-cost --modes abort,respawn

Per training: samples/s over the timed steps (the first step, evaluations and checkpoints
left out, as ``gossipgrad train`` reports it), seconds per step (global batch / samples/s),
communication seconds and top-1. The order alternates (abort first in even repetitions,
the others first in odd ones). Per mode: the median over repetitions; ``MODE_vs_abort``
(``continue_vs_abort``, ``respawn_vs_abort``) is the ratio of the medians of seconds per step
(1.00: free), ``..._paired_median`` the median of each repetition's own ratio (less
sensitive to load that changes between repetitions). Run from the root of a checkout (the
lab is not installed) with ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` as
root and ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import statistics

from gossipgrad import runtime
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m lab failure-cost", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--reps", type=int, default=3, help="trainings per mode, alternated")
    ap.add_argument("--epochs", type=int, default=40, help="digits: 5 steps per epoch at 8")
    ap.add_argument("--modes", default="abort,continue")
    ap.add_argument("--comm-timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    comm = runtime.init(args.comm_timeout, configure=True)
    runs = []
    for rep in range(args.reps):
        for mode in modes if rep % 2 == 0 else modes[::-1]:  # ABBA: no order effect
            cfg = TrainConfig.from_flags(
                on_failure=mode,
                epochs=args.epochs,
                progress=False,
                print_freq=10**6,
                comm_timeout=args.comm_timeout,
            )
            s = runtime.call_or_abort(comm, lambda c, cfg=cfg: trainer.train(cfg, c))
            runs.append(
                {
                    "rep": rep,
                    "mode": mode,
                    "steps": s["steps"],
                    "samples_per_s": round(s["samples_per_s"], 1),
                    "seconds_per_step": s["batch_size"] * s["size"] / s["samples_per_s"],
                    "comm_seconds": round(s["comm_seconds"], 3),
                    "wall_seconds": round(s["wall_seconds"], 2),
                    "top1": s["top1"],
                }
            )
    if comm.rank != 0:
        return
    median = {
        m: statistics.median(r["seconds_per_step"] for r in runs if r["mode"] == m) for m in modes
    }
    out = {
        "ranks": comm.size,
        "epochs": args.epochs,
        "reps": args.reps,
        "median_seconds_per_step": median,
        "runs": runs,
    }
    per_rep = {(r["rep"], r["mode"]): r["seconds_per_step"] for r in runs}
    for mode in modes if "abort" in modes else ():
        if mode == "abort":
            continue
        out[f"{mode}_vs_abort"] = round(median[mode] / median["abort"], 3)
        pairs = [per_rep[(k, mode)] / per_rep[(k, "abort")] for k in range(args.reps)]
        out[f"{mode}_vs_abort_per_rep"] = [round(x, 3) for x in pairs]
        out[f"{mode}_vs_abort_paired_median"] = round(statistics.median(pairs), 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""The simulator's clock against real launches on the emulated cluster (issue 41, item 4):
8 ranks, one rank 2x slow (``GOSSIPGRAD_INJECT_SLOW``) or none, per contender.

    bash lab/scale_clock_check.sh            # the launches, then this script
    python -m lab scale-clock-check lab/records/scale/clock-check

Inputs in DIR (what ``lab/scale_clock_check.sh`` wrote): the stand-in profile the ranks
computed with (``mlp1024.json``: their compute is its waits, x ``--dilate``), the netfit
of the emulated links (``net-100mbit.json``) and the two ``bench strategies`` records
(``bench-none.json``, ``bench-slow7x2.json``). The clock gets the same profile, dilated,
and the netfit (the ring at its measured allreduce factors); the straggler is what
``INJECT_SLOW`` does, forward and backward twice as long, the optimizer not: a factor
``(2 (F + B) + O) / (F + B + O)`` on the rank's whole step.

Two predictions per contender, both printed: ``plain`` (the planner's prices as they are)
and ``calibrated`` (each contender's exchange scaled so that the clock matches its launch
without the straggler: in-sample there, a held-out prediction of the launch with it).
The ratio slow / none needs no calibration. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.plan.calibrate import scale_exchange
from gossipgrad.tools.plan.formats import NetworkFit, Profile
from gossipgrad.tools.plan.model import CommModel
from gossipgrad.tools.simulate import ClockOptions, exchange_for, timeline_for

CONTENDERS = {
    "allreduce": ("allreduce", {}),
    "gossip": ("gossip", {"mix": "param"}),
    "gossip:max-lag=2": ("gossip", {"mix": "param", "max_lag": 2}),
}
STEPS = 200


def dilated(profile: Profile, k: float) -> Profile:
    return replace(
        profile,
        forward_s=profile.forward_s * k,
        backward_s=profile.backward_s * k,
        optimizer_s=profile.optimizer_s * k,
        buckets=tuple(replace(b, ready_s=b.ready_s * k) for b in profile.buckets),
    )


def measured(path: Path) -> tuple[dict[str, float], dict[str, Any]]:
    record = next(json.loads(line) for line in path.open() if line.startswith("{"))
    return {r["name"]: r["step_s"] for r in record["results"]}, record


def clock_step(profile: Profile, model: CommModel, name: str, slow: tuple, size: int) -> float:
    strategy, fields = CONTENDERS[name]
    exchange = exchange_for(strategy, False, **fields)
    clock = ClockOptions(profile=profile, network=model, stragglers=slow)
    return timeline_for(exchange, size, STEPS, [], clock).mean_step_s()


def calibrate(profile: Profile, model: CommModel, name: str, target: float, size: int) -> float:
    """The exchange factor at which the clock gives ``target`` without a straggler
    (bisection on a log scale; the step grows with the factor)."""
    strategy = CONTENDERS[name][0]
    lo, hi = 1e-3, 1e3
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        step = clock_step(profile, scale_exchange(model, strategy, mid), name, (), size)
        lo, hi = (mid, hi) if step < target else (lo, mid)
    return (lo * hi) ** 0.5


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "lab/records/scale/clock-check")
    none, rec = measured(folder / "bench-none.json")
    slow, _ = measured(folder / "bench-slow7x2.json")
    size, k = rec["size"], rec["standin"]["dilate"]
    profile = dilated(StandinProfile.load(folder / "mlp1024.json").planner, k)
    model = CommModel.from_network(
        NetworkFit.load(folder / "net-100mbit.json"), calibrate_allreduce=True
    )
    fb, o = profile.forward_s + profile.backward_s, profile.optimizer_s
    straggler = ((size - 1, (2 * fb + o) / (fb + o)),)
    rows = []
    for name in CONTENDERS:
        factor = calibrate(profile, model, name, none[name], size)
        tuned = scale_exchange(model, CONTENDERS[name][0], factor)
        plain = [clock_step(profile, model, name, s, size) for s in ((), straggler)]
        cal = [clock_step(profile, tuned, name, s, size) for s in ((), straggler)]
        rows.append(
            {
                "contender": name,
                "measured_s": [none[name], slow[name]],
                "measured_ratio": slow[name] / none[name],
                "plain_s": plain,
                "plain_error": [plain[0] / none[name] - 1, plain[1] / slow[name] - 1],
                "ratio": plain[1] / plain[0],
                "ratio_error": (plain[1] / plain[0]) / (slow[name] / none[name]) - 1,
                "exchange_factor": factor,
                "calibrated_slow_s": cal[1],
                "calibrated_slow_error": cal[1] / slow[name] - 1,
            }
        )
    out = {
        "study": "clock-check",
        "size": size,
        "dilate": k,
        "straggler_factor": straggler[0][1],
        "rows": rows,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
